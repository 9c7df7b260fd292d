#!/usr/bin/env python3
"""Reports benches/compare/run.sh results: the median of each cell and system as a Markdown
table and SVG bar charts, and optionally the generated part of docs/benchmarks.md. Every
number names its sender: in the heading and the chart titles when one sender sent every
cell, else in a column of its own (and beside each cell in the charts).

usage: report.py RESULTS.jsonl OUT_DIR [DOC.md IMG_DIR]
"""
import datetime
import json
import os
import shutil
import statistics
import sys

SYSTEMS = ("penstock", "collector")
COLOURS = {"penstock": "#1f77b4", "collector": "#ff7f0e", "floor": "#7f7f7f"}
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
# The senders of run.sh, by the name its results give them.
SENDERS = {
    "penstock-loadgen": "penstock loadgen",
    "pdata-grpc": "pdata gRPC client",
    "otelarrow-producer": "otel-arrow reference producer",
}
# Results written before they named their sender were all penstock loadgen's.
DEFAULT_SENDER = "penstock-loadgen"


def load(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for r in rows:
        r.setdefault("sender", DEFAULT_SENDER)
    return rows


def sender_name(sender):
    return SENDERS.get(sender, sender)


def of(rows, system, cell):
    """The runs of SYSTEM in CELL, a (cell, sender) pair."""
    return [r for r in rows if r["system"] == system and (r["cell"], r["sender"]) == cell]


def median(rows, system, cell, key):
    # Runs that did not complete have no rate (0) and are left out, as are measures a sender
    # does not give (null).
    values = [r[key] for r in of(rows, system, cell)
              if r["logs_per_s"] > 0 and r.get(key) is not None]
    return statistics.median(values) if values else None


def completed(rows, system, cell):
    """Runs of the cell that completed, of those made, as "2/3"."""
    made = of(rows, system, cell)
    return f"{sum(r['logs_per_s'] > 0 for r in made)}/{len(made)}"


def fmt(value, spec):
    return "n/a" if value is None else format(value, spec)


def mebibytes(value):
    return "n/a" if value is None else f"{value / 2**20:.0f} MiB"


def times(value):
    return "n/a" if value is None else f"{value:.1f}x"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def table(rows, cells, with_sender):
    lines = [
        "| cell (in-out-compression-batch-workers-pipeline) "
        + ("| sender " if with_sender else "")
        + "| Penstock logs/s | Collector logs/s "
        "| Penstock CPU-s/M | Collector CPU-s/M | Collector / Penstock CPU | codec floor CPU-s/M "
        "| Penstock / floor | wire bytes per log | Penstock peak RSS | Collector peak RSS "
        "| runs completed (Penstock, Collector) |",
        "|---|" + ("---|" if with_sender else "") + "---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        m = {(s, k): median(rows, s, cell, k) for s in SYSTEMS
             for k in ("logs_per_s", "cpu_s_per_million", "peak_rss_bytes",
                       "wire_bytes_per_log", "floor_cpu_s_per_million")}
        floor = m[("penstock", "floor_cpu_s_per_million")]
        lines.append(
            f"| {cell[0]} "
            + (f"| {sender_name(cell[1])} " if with_sender else "")
            + f"| {fmt(m[('penstock', 'logs_per_s')], ',.0f')} "
            f"| {fmt(m[('collector', 'logs_per_s')], ',.0f')} "
            f"| {fmt(m[('penstock', 'cpu_s_per_million')], '.3f')} "
            f"| {fmt(m[('collector', 'cpu_s_per_million')], '.3f')} "
            f"| {times(ratio(m[('collector', 'cpu_s_per_million')], m[('penstock', 'cpu_s_per_million')]))} "
            f"| {fmt(floor, '.3f')} "
            f"| {times(ratio(m[('penstock', 'cpu_s_per_million')], floor) if floor else None)} "
            f"| {fmt(m[('penstock', 'wire_bytes_per_log')], '.1f')} "
            f"| {mebibytes(m[('penstock', 'peak_rss_bytes')])} "
            f"| {mebibytes(m[('collector', 'peak_rss_bytes')])} "
            f"| {completed(rows, 'penstock', cell)}, {completed(rows, 'collector', cell)} |")
    return "\n".join(lines) + "\n"


def svg_bars(title, unit, cells, series):
    """A grouped horizontal bar chart: one group per cell, one bar per (name, values) series."""
    bar, gap, width = 12, 10, 420
    # Room for the longest label (about 6.5 px a character at 11 px).
    left = max(300, int(max(map(len, cells), default=0) * 6.5) + 16)
    top = 40
    height = top + len(cells) * (len(series) * bar + gap) + 40
    peak = max([v for _, values in series for v in values if v] or [1])
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           f'<text x="10" y="20" font-size="14">{title}</text>']
    y = top
    for i, cell in enumerate(cells):
        out.append(f'<text x="{left - 6}" y="{y + bar * len(series) / 2 + 4}" text-anchor="end">{cell}</text>')
        for name, values in series:
            v = values[i]
            if v:
                w = max(1, v / peak * width)
                out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar - 2}" fill="{COLOURS[name]}"/>')
                out.append(f'<text x="{left + w + 4:.1f}" y="{y + bar - 3}">{v:,.3g} {unit}</text>')
            y += bar
        y += gap
    x = left
    for name, _ in series:
        out.append(f'<rect x="{x}" y="{height - 22}" width="10" height="10" fill="{COLOURS[name]}"/>')
        out.append(f'<text x="{x + 14}" y="{height - 13}">{name}</text>')
        x += 100
    out.append("</svg>")
    return "\n".join(out) + "\n"


def charts(rows, cells, with_sender):
    def values(system, key, scale=1.0):
        return [None if (v := median(rows, system, c, key)) is None else v * scale for c in cells]
    cpu = [(s, values(s, "cpu_s_per_million")) for s in SYSTEMS]
    floor = values("penstock", "floor_cpu_s_per_million")
    if any(v is not None for v in floor):
        cpu.append(("floor", floor))
    if with_sender:
        labels, sent = [f"{c} ({sender_name(s)})" for c, s in cells], ""
    else:
        labels, sent = [c for c, _ in cells], f", sender: {sender_name(cells[0][1])}"
    return {
        "compare-cpu.svg": svg_bars(f"CPU-seconds per million logs (lower is better{sent})", "s",
                                    labels, cpu),
        "compare-rate.svg": svg_bars(f"logs per second ({sent[2:] or 'by sender'})", "/s", labels,
                                     [(s, values(s, "logs_per_s")) for s in SYSTEMS]),
        "compare-rss.svg": svg_bars(f"peak RSS (MiB{sent})", "MiB", labels,
                                    [(s, values(s, "peak_rss_bytes", 1 / 2**20)) for s in SYSTEMS]),
    }


def main():
    results, out = sys.argv[1], sys.argv[2]
    rows = load(results)
    cells = list(dict.fromkeys((r["cell"], r["sender"]) for r in rows))
    senders = list(dict.fromkeys(s for _, s in cells))
    with_sender = len(senders) > 1
    text = table(rows, cells, with_sender)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    svgs = charts(rows, cells, with_sender)
    for name, svg in svgs.items():
        with open(os.path.join(out, name), "w") as f:
            f.write(svg)
    if len(sys.argv) < 5:
        return
    doc, img = sys.argv[3], sys.argv[4]
    os.makedirs(img, exist_ok=True)
    for name in svgs:
        shutil.copy(os.path.join(out, name), os.path.join(img, name))
    runs = max(r["run"] for r in rows)
    generated = (
        f"{BEGIN}\n"
        f"Generated by `benches/compare/run.sh` from `target/compare/results.jsonl` on "
        f"{datetime.date.today()} (median of {runs} run(s) per cell and system; "
        + ("senders in the second column" if with_sender
           else f"sender: {sender_name(senders[0])}")
        + "):\n\n"
        f"{text}\n"
        + "".join(f"![{n}](img/{n})\n" for n in svgs)
        + f"{END}"
    )
    with open(doc) as f:
        content = f.read()
    if BEGIN in content and END in content:
        head, rest = content.split(BEGIN, 1)
        content = head + generated + rest.split(END, 1)[1]
    else:
        content = content.rstrip("\n") + "\n\n" + generated + "\n"
    with open(doc, "w") as f:
        f.write(content)


if __name__ == "__main__":
    main()
