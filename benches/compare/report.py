#!/usr/bin/env python3
"""Reports benches/compare/run.sh results: the median of each cell and system as a Markdown
table and SVG bar charts, and optionally the generated part of docs/benchmarks.md.

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


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def median(rows, system, cell, key):
    # Runs that did not complete have no rate (0) and are left out.
    values = [r.get(key, 0) for r in rows
              if r["system"] == system and r["cell"] == cell and r["logs_per_s"] > 0]
    return statistics.median(values) if values else None


def completed(rows, system, cell):
    """Runs of the cell that completed, of those made, as "2/3"."""
    made = [r for r in rows if r["system"] == system and r["cell"] == cell]
    return f"{sum(r['logs_per_s'] > 0 for r in made)}/{len(made)}"


def fmt(value, spec):
    return "n/a" if value is None else format(value, spec)


def mebibytes(value):
    return "n/a" if value is None else f"{value / 2**20:.0f} MiB"


def times(value):
    return "n/a" if value is None else f"{value:.1f}x"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def table(rows, cells):
    lines = [
        "| cell (in-out-compression-batch-workers-pipeline) | Penstock logs/s | Collector logs/s "
        "| Penstock CPU-s/M | Collector CPU-s/M | Collector / Penstock CPU | codec floor CPU-s/M "
        "| Penstock / floor | wire bytes per log | Penstock peak RSS | Collector peak RSS "
        "| runs completed (Penstock, Collector) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        m = {(s, k): median(rows, s, cell, k) for s in SYSTEMS
             for k in ("logs_per_s", "cpu_s_per_million", "peak_rss_bytes",
                       "wire_bytes_per_log", "floor_cpu_s_per_million")}
        floor = m[("penstock", "floor_cpu_s_per_million")]
        lines.append(
            f"| {cell} | {fmt(m[('penstock', 'logs_per_s')], ',.0f')} "
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
    bar, gap, left, width = 12, 10, 300, 420
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


def charts(rows, cells):
    def values(system, key, scale=1.0):
        return [None if (v := median(rows, system, c, key)) is None else v * scale for c in cells]
    cpu = [(s, values(s, "cpu_s_per_million")) for s in SYSTEMS]
    cpu.append(("floor", values("penstock", "floor_cpu_s_per_million")))
    return {
        "compare-cpu.svg": svg_bars("CPU-seconds per million logs (lower is better)", "s", cells, cpu),
        "compare-rate.svg": svg_bars("logs per second", "/s", cells,
                                     [(s, values(s, "logs_per_s")) for s in SYSTEMS]),
        "compare-rss.svg": svg_bars("peak RSS (MiB)", "MiB", cells,
                                    [(s, values(s, "peak_rss_bytes", 1 / 2**20)) for s in SYSTEMS]),
    }


def main():
    results, out = sys.argv[1], sys.argv[2]
    rows = load(results)
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    text = table(rows, cells)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    svgs = charts(rows, cells)
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
        f"{datetime.date.today()} (median of {runs} run(s) per cell and system):\n\n"
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
