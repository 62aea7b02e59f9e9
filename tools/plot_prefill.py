#!/usr/bin/env python3
"""Plots prefill benchmark results (`megaserve bench prefill --json`) as an SVG
bar chart of prompt tokens per second per prompt length, log scale, one bar
per run. Each argument is LABEL=FILE. Standard library only.

    python3 tools/plot_prefill.py "CUDA-core experts=bench/results/...json" ... -o docs/prefill-bench.svg
"""
import argparse
import json
import math

COLORS = ["#9db4c0", "#e07a5f", "#5c6b73", "#253237", "#81b29a", "#3d405b"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="LABEL=FILE")
    ap.add_argument("-o", "--out", default="docs/prefill-bench.svg")
    ap.add_argument("--title", default="Prefill of one prompt, NMC full shape, H200 (prompt tokens/s, log scale)")
    args = ap.parse_args()
    runs = []
    for spec in args.runs:
        label, path = spec.split("=", 1)
        with open(path) as fh:
            r = json.load(fh)
        runs.append((label, {x["tokens"]: x["tok_per_s"] for x in r["rows"] if not x.get("skipped")}))
    lengths = sorted({t for _, rows in runs for t in rows})
    W, H, left, right, top, bottom = 760, 380, 70, 20, 40, 90
    pw, ph = W - left - right, H - top - bottom
    lo = 10 ** math.floor(math.log10(min(v for _, rows in runs for v in rows.values())))
    hi = 10 ** math.ceil(math.log10(max(v for _, rows in runs for v in rows.values())))

    def y(v):
        return top + ph * (1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="13">{args.title}</text>']
    d = lo
    while d <= hi:
        for m in (1, 2, 5):
            v = d * m
            if lo <= v <= hi:
                yy = y(v)
                out.append(f'<line x1="{left}" x2="{W - right}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#ddd"/>')
                out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{v:g}</text>')
        d *= 10
    gw = pw / len(lengths)
    bw = gw * 0.8 / len(runs)
    for gi, t in enumerate(lengths):
        x0 = left + gi * gw + gw * 0.1
        for ri, (label, rows) in enumerate(runs):
            if t not in rows:
                continue
            v = rows[t]
            yy = y(v)
            x = x0 + ri * bw
            out.append(f'<rect x="{x:.1f}" y="{yy:.1f}" width="{bw - 2:.1f}" height="{top + ph - yy:.1f}" '
                       f'fill="{COLORS[ri % len(COLORS)]}"/>')
            out.append(f'<text x="{x + bw / 2 - 1:.1f}" y="{yy - 3:.1f}" text-anchor="middle" font-size="9">'
                       f'{v / 1000:.1f}K</text>')
        name = f"{t // 1024}K" if t % 1024 == 0 else str(t)
        out.append(f'<text x="{left + gi * gw + gw / 2:.1f}" y="{top + ph + 16}" text-anchor="middle">{name} tokens</text>')
    for ri, (label, _) in enumerate(runs):
        lx, ly = left + (ri % 2) * 340, top + ph + 36 + (ri // 2) * 16
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{COLORS[ri % len(COLORS)]}"/>')
        out.append(f'<text x="{lx + 14}" y="{ly}">{label}</text>')
    out.append("</svg>")
    with open(args.out, "w") as fh:
        fh.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
