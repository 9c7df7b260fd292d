#!/usr/bin/env python3
"""An SVG line chart of resident memory over time from benches/e2e/overload.sh's CSV files
(seconds,rss_bytes), one line per system, with the memory limit drawn across.

usage: rss_chart.py LIMIT_BYTES OUT.svg NAME=FILE.csv [NAME=FILE.csv ...]
"""
import csv
import sys

COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]


def load(path):
    with open(path) as f:
        return [(float(r["seconds"]), int(r["rss_bytes"]) / 2**20) for r in csv.DictReader(f)]


def main():
    limit = int(sys.argv[1]) / 2**20
    out = sys.argv[2]
    series = [(arg.split("=", 1)[0], load(arg.split("=", 1)[1])) for arg in sys.argv[3:]]
    left, top, width, height = 70, 40, 640, 300
    t_max = max([t for _, points in series for t, _ in points] or [1])
    m_max = max([m for _, points in series for _, m in points] + [limit]) * 1.1
    x = lambda t: left + t / t_max * width
    y = lambda m: top + height - m / m_max * height
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 160}" '
           f'height="{top + height + 50}" font-family="sans-serif" font-size="11">',
           '<text x="10" y="20" font-size="14">resident memory under 2x overload (MiB)</text>',
           f'<line x1="{left}" y1="{top + height}" x2="{left + width}" y2="{top + height}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + height}" stroke="black"/>',
           f'<text x="{left + width / 2}" y="{top + height + 35}" text-anchor="middle">seconds</text>']
    for i in range(5):
        m = m_max * i / 4
        svg.append(f'<text x="{left - 6}" y="{y(m) + 4:.1f}" text-anchor="end">{m:.0f}</text>')
        t = t_max * i / 4
        svg.append(f'<text x="{x(t):.1f}" y="{top + height + 16}" text-anchor="middle">{t:.0f}</text>')
    svg.append(f'<line x1="{left}" y1="{y(limit):.1f}" x2="{left + width}" y2="{y(limit):.1f}" '
               'stroke="#d62728" stroke-dasharray="6,4"/>')
    svg.append(f'<text x="{left + width + 6}" y="{y(limit) + 4:.1f}">limit {limit:.0f} MiB</text>')
    for n, (name, points) in enumerate(series):
        colour = COLOURS[n % len(COLOURS)]
        path = " ".join(f"{x(t):.1f},{y(m):.1f}" for t, m in points)
        svg.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        peak = max((m for _, m in points), default=0)
        svg.append(f'<text x="{left + width + 6}" y="{top + 14 + 16 * n}" fill="{colour}">'
                   f'{name} (peak {peak:.0f} MiB)</text>')
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
