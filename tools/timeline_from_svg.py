#!/usr/bin/env python3
"""A timeline JSON back from a picture tools/plot_timeline.py drew.

The rounds before round 12 committed only the SVG of layers 2-3 (the step's
JSON was tens of MB and stayed on the device machine). Each bar's <title>
names the SM, list index, layer and opcode, and the bars' geometry gives
start, ready (the end of the pale part) and end at the plot's scale (~0.1 us
a pixel). Written as plot_timeline.py's input format (without data_ns,
issue_ns, tiles, stall_ns, signal_ns, which the picture does not hold), so
its --summary reads it.

Usage: tools/timeline_from_svg.py picture.svg out.json
"""
import json
import re
import sys

LEFT, WIDTH, RIGHT = 60, 1400, 20  # plot_timeline.py's geometry


def main(src, dst):
    s = open(src).read()
    m = re.search(r"(\d+) SMs.*?, ([\d.]+) us", s)
    if not m:
        sys.exit(f"{src}: no 'N SMs ... T us' title (not a plot_timeline.py picture?)")
    n_sm, t_end_us = int(m.group(1)), float(m.group(2))
    ns_per_px = t_end_us * 1000.0 / (WIDTH - LEFT - RIGHT)
    bar = re.compile(r'<rect x="([\d.]+)" y="(\d+)" width="([\d.]+)" height="\d+" fill="#[0-9a-f]+"'
                     r'( opacity="0.25")?/?>(?:<title>SM (\d+) #(\d+) L(\d+) (\w+): [\d.]+ us</title>)?')
    ins, pale = [], None
    for x, y, w, is_pale, sm, idx, layer, op in bar.findall(s):
        x, w = float(x), float(w)
        if is_pale:  # the wait, drawn just before its instruction's bar
            pale = (x, y)
            continue
        if not sm:
            continue  # the legend
        start = pale[0] if pale and pale[1] == y else x
        pale = None
        ins.append({"sm": int(sm), "index": int(idx), "layer": int(layer), "op": op,
                    "start_ns": round((start - LEFT) * ns_per_px), "ready_ns": round((x - LEFT) * ns_per_px),
                    "end_ns": round((x + w - LEFT) * ns_per_px)})
    json.dump({"n_sm": n_sm, "from_svg": src, "instructions": ins}, open(dst, "w"))
    print(f"{len(ins)} instructions, {n_sm} SMs, {t_end_us} us")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
