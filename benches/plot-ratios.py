#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
"""Draws docs/perf/ratios.svg from docs/perf/ratios.csv: one bar per cell
(ours / theirs, median of the run set), a tick at the worst pair where there
is one, and the cell's target as a dashed line. Standard library only.

    benches/plot-ratios.py [CSV [SVG]]
"""
import csv
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
src = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "docs/perf/ratios.csv"
dst = Path(sys.argv[2]) if len(sys.argv) > 2 else root / "docs/perf/ratios.svg"

rows = [r for r in csv.reader(l for l in src.open() if not l.startswith("#")) if r]
BAR, GAP, LEFT, TOP, H, MAX = 16, 26, 40, 30, 420, 3.0
y = lambda v: TOP + H - v / MAX * H
groups = []
for g, cell, size, ratio, worst, target in rows:
    if not groups or groups[-1][0] != g:
        groups.append((g, []))
    groups[-1][1].append((f"{cell}, {size} B", float(ratio), float(worst) if worst else None, float(target)))
width = LEFT + sum(len(c) * BAR + GAP for _, c in groups) + 160
LABELS = TOP + H + 160  # below the rotated cell labels; one line per group
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{LABELS + 15 * len(groups) + 10}" '
       'font-family="sans-serif" font-size="10">',
       f'<text x="{LEFT}" y="16" font-size="12">ours / theirs (median of the run set; tick: worst pair; '
       'dashed: target; grey line: 1.0)</text>']
for v in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0):
    out.append(f'<line x1="{LEFT - 5}" x2="{width - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
               f'stroke="{"#888" if v == 1.0 else "#eee"}"/>')
    out.append(f'<text x="{LEFT - 8}" y="{y(v) + 3:.1f}" text-anchor="end">{v:.1f}</text>')
x = LEFT
for i, (g, cells) in enumerate(groups):
    out.append(f'<line x1="{x}" x2="{x}" y1="{TOP + H}" y2="{LABELS + 15 * i - 10}" stroke="#ccc"/>')
    out.append(f'<text x="{x + 3}" y="{LABELS + 15 * i}" font-size="11">{g}</text>')
    for label, ratio, worst, target in cells:
        colour = "#3a7" if (worst if worst is not None else ratio) >= target else "#d84"
        out.append(f'<rect x="{x}" y="{y(min(ratio, MAX)):.1f}" width="{BAR - 3}" '
                   f'height="{y(0) - y(min(ratio, MAX)):.1f}" fill="{colour}"><title>{label}: '
                   f'{ratio:.2f}</title></rect>')
        if worst is not None:
            out.append(f'<line x1="{x - 1}" x2="{x + BAR - 2}" y1="{y(worst):.1f}" y2="{y(worst):.1f}" '
                       'stroke="#000" stroke-width="2"/>')
        out.append(f'<line x1="{x - 1}" x2="{x + BAR - 2}" y1="{y(target):.1f}" y2="{y(target):.1f}" '
                   'stroke="#000" stroke-dasharray="2,2"/>')
        out.append(f'<text transform="translate({x + BAR / 2 + 3},{TOP + H + 6}) rotate(60)">{label}</text>')
        x += BAR
    x += GAP
out.append("</svg>")
dst.write_text("\n".join(out) + "\n")
print(f"wrote {dst}")
