#!/usr/bin/env python3
"""Bar chart (SVG, no dependencies) of the megakernel's % of nominal speed of
light per revision of the speed work, batch 1 and batch 8, with the layered
path of the same runs as a line.

Input: bench/results/2026-12-02-decode-megakernel-rounds.json (rows with
git_revision, list_order, backend, batch, context, pct_sol_nominal).
Usage: tools/plot_mk_rounds.py ROUNDS.json OUT.svg
Each revision's bar is its default list order; the A/B order is a thin bar
beside it.
"""
import json
import sys


def main(src, dst):
    rows = json.load(open(src))["rows"]
    revs = []
    for r in rows:
        if r["git_revision"] not in revs:
            revs.append(r["git_revision"])
    W, H, left, top, bottom = max(760, 110 + 90 * len(revs)), 360, 60, 40, 70
    plot_h = H - top - bottom
    group_w = (W - left - 20) / len(revs)
    y = lambda pct: top + plot_h * (1 - pct / 70.0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="18" font-size="13">megakernel, NMC full shape, 8K context, H200: % of nominal SoL per '
           'revision (dark: its default, pale: its A/B variant)</text>']
    for pct in range(0, 71, 10):
        out.append(f'<line x1="{left}" x2="{W - 20}" y1="{y(pct):.1f}" y2="{y(pct):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(pct) + 4:.1f}" text-anchor="end">{pct}%</text>')
    out.append(f'<line x1="{left}" x2="{W - 20}" y1="{y(62):.1f}" y2="{y(62):.1f}" stroke="#d62728" '
               'stroke-dasharray="5,3"/>')
    out.append(f'<text x="{W - 22}" y="{y(62) - 4:.1f}" text-anchor="end" fill="#d62728">target 62% (bs 1)</text>')
    colors = {1: ("#1f77b4", "#aec7e8"), 8: ("#ff7f0e", "#ffbb78")}
    layered = {1: [], 8: []}
    for gi, rev in enumerate(revs):
        x0 = left + gi * group_w + 8
        mine = [r for r in rows if r["git_revision"] == rev]
        orders = []
        for r in mine:
            if r["backend"] == "megakernel" and r["list_order"] not in orders:
                orders.append(r["list_order"])
        for bi, b in enumerate((1, 8)):
            for oi, order in enumerate(orders[:2]):
                hit = [r for r in mine if r["backend"] == "megakernel" and r["batch"] == b and r["list_order"] == order]
                if not hit:
                    continue
                pct = hit[0]["pct_sol_nominal"]
                bw = 22 if oi == 0 else 8
                bx = x0 + bi * 44 + (0 if oi == 0 else 23)
                out.append(f'<rect x="{bx:.1f}" y="{y(pct):.1f}" width="{bw}" height="{y(0) - y(pct):.1f}" '
                           f'fill="{colors[b][oi]}"><title>{rev} bs {b} {order}: {pct:.1f}%</title></rect>')
                if oi == 0:
                    out.append(f'<text x="{bx + 11:.1f}" y="{y(pct) - 3:.1f}" text-anchor="middle">{pct:.0f}</text>')
            lay = [r for r in mine if r["backend"] == "layered" and r["batch"] == b]
            if lay:
                layered[b].append((x0 + bi * 44 + 11, lay[0]["pct_sol_nominal"]))
        out.append(f'<text x="{x0 + 40:.1f}" y="{y(0) + 16:.1f}" text-anchor="middle">{rev}</text>')
    for b, pts in layered.items():
        if pts:
            path = " ".join(f"{px:.1f},{y(p):.1f}" for px, p in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colors[b][0]}" stroke-dasharray="2,2"/>')
    lx = left
    for b in (1, 8):
        out.append(f'<rect x="{lx}" y="{H - 30}" width="12" height="12" fill="{colors[b][0]}"/>')
        out.append(f'<text x="{lx + 16}" y="{H - 20}">batch {b} (dotted: layered path, same runs)</text>')
        lx += 280
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
