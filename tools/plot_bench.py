#!/usr/bin/env python3
"""Plots decode benchmark results (bench/results/*-layered-nmc-*.json, written by
`megaserve bench decode --json` / BenchNmc.Full) as an SVG bar chart of % of
nominal speed of light per (batch, context), one bar group per revision.
Standard library only (no matplotlib on the build machine).

    python3 tools/plot_bench.py bench/results/*-layered-nmc-*.json -o docs/decode-bench.svg
"""
import argparse
import json
import os
import re

COLORS = ["#9db4c0", "#5c6b73", "#c2dfe3", "#253237", "#e07a5f", "#3d405b", "#81b29a"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--out", default="docs/decode-bench.svg")
    ap.add_argument("--target", type=float, default=40.0, help="dashed target line (% SoL)")
    args = ap.parse_args()
    runs = []
    for f in args.files:
        with open(f) as fh:
            r = json.load(fh)
        parts = os.path.basename(f).rsplit(".", 1)[0].split("-")
        revs = [p for p in parts if re.fullmatch(r"[0-9a-f]{7,40}", p)]
        label = revs[0] if revs else parts[-1]
        rows = {(x["batch"], x["context"]): x for x in r["rows"] if not x.get("skipped")}
        for have_label, have_rows in runs:  # files of one revision (grid + 128K) are one run
            if have_label == label:
                have_rows.update(rows)
                break
        else:
            runs.append((label, rows))
    points = sorted({k for _, rows in runs for k in rows})
    W, H, left, bottom, top = 120 + 110 * len(points), 360, 60, 60, 40
    ph = H - bottom - top
    bw = 80 / max(1, len(runs))
    ymax = 100.0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">megaserve decode, North Mini Code shape on H200: % of nominal speed of light</text>']
    for t in range(0, 101, 20):
        y = top + ph * (1 - t / ymax)
        out.append(f'<line x1="{left}" x2="{W - 20}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{t}%</text>')
    ty = top + ph * (1 - args.target / ymax)
    out.append(f'<line x1="{left}" x2="{W - 20}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#c00" stroke-dasharray="6,4"/>')
    out.append(f'<text x="{W - 22}" y="{ty - 4:.1f}" text-anchor="end" fill="#c00">target {args.target:.0f}%</text>')
    for i, (b, c) in enumerate(points):
        x0 = left + 20 + 110 * i
        for j, (label, rows) in enumerate(runs):
            row = rows.get((b, c))
            if not row:
                continue
            v = row["pct_sol_nominal"]
            h = ph * v / ymax
            x = x0 + j * bw
            out.append(f'<rect x="{x:.1f}" y="{top + ph - h:.1f}" width="{bw - 4:.1f}" height="{h:.1f}" '
                       f'fill="{COLORS[j % len(COLORS)]}"><title>{label}: {v:.1f}% ({row["tok_per_s"]:.0f} tok/s)</title></rect>')
            out.append(f'<text x="{x + (bw - 4) / 2:.1f}" y="{top + ph - h - 3:.1f}" text-anchor="middle" font-size="10">{v:.0f}</text>')
        ctx = f'{c // 1024}K' if c % 1024 == 0 else str(c)
        out.append(f'<text x="{x0 + 40:.1f}" y="{H - bottom + 18}" text-anchor="middle">bs {b}, {ctx}</text>')
    for j, (label, _) in enumerate(runs):
        out.append(f'<rect x="{left + 180 * j}" y="{H - 24}" width="12" height="12" fill="{COLORS[j % len(COLORS)]}"/>')
        out.append(f'<text x="{left + 180 * j + 16}" y="{H - 14}">layered @ {label}</text>')
    out.append("</svg>")
    with open(args.out, "w") as fh:
        fh.write("\n".join(out) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
