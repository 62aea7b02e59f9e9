#!/usr/bin/env python3
"""Per-SM timeline of one megakernel step as an SVG (no dependencies).

Input: the JSON `megaserve bench decode --timeline FILE` writes (one entry per
instruction: sm, index, op, layer, start_ns, ready_ns, end_ns). Each SM is a
row; an instruction is a bar from its start to its end, coloured by opcode,
with the part spent waiting on its dependencies (start -> ready) drawn pale.

Usage: tools/plot_timeline.py timeline.json out.svg [FIRST-LAST]
       tools/plot_timeline.py --summary timeline.json [FIRST-LAST]
       tools/plot_timeline.py --model timeline.json [FIRST-LAST]
       tools/plot_timeline.py --extract timeline.json out.json.gz FIRST-LAST
FIRST-LAST (layers, e.g. 2-3) draws only those layers' instructions, on a
time axis from the first one's start (a whole step of a full model is tens
of thousands of bars; two layers show the structure).

--summary prints, per opcode, the instruction count, the span from the first
start to the last end, and the median of each part of an instruction: waiting
on its dependencies (start -> ready), waiting for its first ring position
after that (ready -> data), the rest (data -> end), and how far ahead the
loader issued its copies (issue -> ready; negative: the loader was late),
the tiles an instruction ran (claim loops: the tiles they took), the rest
per tile, and the stall: the consumers' wait on full ring positions after
the first one (stall_ns; near the rest: the instruction is loader-bound,
near 0: consumer-bound), and the signal: from the end of the instruction's
work (signal_ns) to its end, the consumers' barrier and the release of its
counter; then warp 0's held time (its SM cycles from each ring acquire to the
release: its work on the positions' data) and its share of the time from the
first data to the end. Norms and routes record a point inside them as data_ns (sources
summed, top-k done). Timelines without data_ns / issue_ns / tiles /
stall_ns / signal_ns / hold_cycles (older builds) print those as "-". Per layer it then gives
the critical path (first start / ready / last end per opcode), the claim
loops across SMs (first claim, first data, end, tiles / us per SM) and how
many SMs are in each opcode (waiting on its producers or running) every 4 us,
and where the layer's SM time goes (per opcode running / waiting, and the
time between instructions).

Attention splits, where the timeline names their stages (round 13 on), are
then grouped by stage count, with a least-squares fit of a split's time from
its first data to its end over its stages (the slope: one stage's cost), and,
where the timeline has SM cycles (hold_cycles / span_cycles), the time warp 0
held the stages (acquire to release: the stage's math) and its fit.

--extract keeps layers FIRST-1 .. LAST (the layer before: the head chain
starts at its last down tile) with every field, gzipped: small enough
(~100 KB at bs 1) to commit beside a round's numbers, so that a later
session without a device can still read the timeline with the modes above
(a whole step's JSON is tens of MB).

--model sets the schedule builder's cost model (est_start_ns / est_end_ns,
in timelines from round 11 on) beside the measurement: per opcode the
median instruction from its wait to its end, measured and modelled, and
per layer when each opcode's last instruction ends, from the layer's first
norm start, both ways. That is what mk::apply_cost_set's constants are
fitted from.
"""
import gzip
import json
import sys


def load(src):
    """The timeline JSON, plain or gzipped (mk_speed.sh keeps them gzipped)."""
    with (gzip.open(src, "rt") if src.endswith(".gz") else open(src)) as f:
        return json.load(f)

COLORS = {
    "norm": "#6b6b6b", "final_norm": "#6b6b6b", "qkv": "#1f77b4", "attention": "#d62728",
    "attn_combine": "#ff9896", "o_proj": "#2ca02c", "router": "#9467bd", "route": "#c5b0d5",
    "expert_gate_up": "#ff7f0e", "expert_down": "#ffbb78", "dense_gate_up": "#8c564b",
    "dense_down": "#c49c94", "lm_head": "#17becf", "barrier": "#000000", "nop": "#ffffff",
}


def main(src, dst, layers=None):
    data = load(src)
    ins = data["instructions"]
    n_sm = data["n_sm"]
    title_extra = ""
    if layers:
        lo, hi = (int(x) for x in layers.split("-"))
        ins = [i for i in ins if lo <= i["layer"] <= hi]
        if not ins:
            sys.exit(f"no instructions in layers {layers}")
        t0 = min(i["start_ns"] for i in ins)
        ins = [dict(i, start_ns=i["start_ns"] - t0, ready_ns=i["ready_ns"] - t0, end_ns=i["end_ns"] - t0) for i in ins]
        title_extra = f", layers {lo}-{hi}"
    t_end = max(i["end_ns"] for i in ins) or 1
    width, row_h, left, top = 1400, 6, 60, 40
    height = top + n_sm * row_h + 60
    scale = (width - left - 20) / t_end
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11">',
           f'<text x="{left}" y="16">megakernel step: batch {data["batch"]}, context {data["context"]}, '
           f'{n_sm} SMs{title_extra}, {t_end / 1000:.1f} us (pale: waiting on dependencies)</text>']
    for i in ins:
        y = top + i["sm"] * row_h
        x0 = left + i["start_ns"] * scale
        xr = left + i["ready_ns"] * scale
        x1 = left + i["end_ns"] * scale
        c = COLORS.get(i["op"], "#bbbbbb")
        if xr > x0:
            out.append(f'<rect x="{x0:.2f}" y="{y}" width="{xr - x0:.2f}" height="{row_h - 1}" fill="{c}" '
                       f'opacity="0.25"/>')
        out.append(f'<rect x="{xr:.2f}" y="{y}" width="{max(x1 - xr, 0.3):.2f}" height="{row_h - 1}" fill="{c}">'
                   f'<title>SM {i["sm"]} #{i["index"]} L{i["layer"]} {i["op"]}: {(i["end_ns"] - i["start_ns"]) / 1000:.2f} us'
                   f'</title></rect>')
    for k in range(0, 11):
        x = left + k * (width - left - 20) / 10
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{top + n_sm * row_h}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{top + n_sm * row_h + 14}" text-anchor="middle">'
                   f'{k * t_end / 10000:.0f} us</text>')
    lx = left
    for name, c in COLORS.items():
        if name in ("nop", "final_norm"):
            continue
        out.append(f'<rect x="{lx}" y="{height - 22}" width="10" height="10" fill="{c}"/>'
                   f'<text x="{lx + 13}" y="{height - 13}">{name}</text>')
        lx += 13 + 7 * len(name) + 12
    out.append(f'<text x="4" y="{top + 8}">SM 0</text><text x="4" y="{top + n_sm * row_h}">SM {n_sm - 1}</text>')
    out.append("</svg>")
    with open(dst, "w") as f:
        f.write("\n".join(out))


def hold_ns(i):
    """Warp 0's time holding ring positions in one instruction (acquire ->
    release: its work on their data), from its SM cycles at the SM's clock
    over the instruction (timelines with hold_cycles / span_cycles, round 14
    on); None for older timelines."""
    if not i.get("span_cycles") or i.get("hold_cycles") is None:
        return None
    return i["hold_cycles"] * (i["end_ns"] - i["start_ns"]) / i["span_cycles"]


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None


def summary(src, layers=None):
    ins = load(src)["instructions"]
    if layers:
        lo, hi = (int(x) for x in layers.split("-"))
        ins = [i for i in ins if lo <= i["layer"] <= hi]
    by_op = {}
    for i in ins:
        by_op.setdefault(i["op"], []).append(i)
    fmt = lambda x: "-" if x is None else f"{x / 1000:.2f}"
    print(f"{'op':16} {'count':>6} {'span us':>9} {'wait':>7} {'to data':>8} {'rest':>7} {'lead':>7} {'tiles':>6} "
          f"{'rest/tile':>9} {'stall':>7} {'signal':>7} {'held':>7} {'held%':>6}   (medians, us)")
    for op, v in sorted(by_op.items(), key=lambda kv: min(i["start_ns"] for i in kv[1])):
        span = max(i["end_ns"] for i in v) - min(i["start_ns"] for i in v)
        wait = median([i["ready_ns"] - i["start_ns"] for i in v])
        have = [i for i in v if i.get("data_ns") is not None]
        to_data = median([i["data_ns"] - i["ready_ns"] for i in have]) if have else None
        rest = median([i["end_ns"] - (i["data_ns"] if i.get("data_ns") is not None else i["ready_ns"]) for i in v])
        led = [i for i in v if i.get("issue_ns") is not None]
        lead = median([i["ready_ns"] - i["issue_ns"] for i in led]) if led else None
        # Tiles per instruction (claim loops: the tiles they took) and the rest per tile.
        tl = [i for i in v if i.get("tiles")]
        tiles = median([i["tiles"] for i in tl]) if tl else None
        per = median([(i["end_ns"] - (i["data_ns"] if i.get("data_ns") is not None else i["ready_ns"])) / i["tiles"]
                      for i in tl]) if tl else None
        # Waits on full ring positions after the first one (instructions with data).
        st = [i for i in have if i.get("stall_ns") is not None]
        stall = median([i["stall_ns"] for i in st]) if st else None
        # The signal: the consumers' barrier and the release, from the end of the work (newer builds).
        sg = [i for i in v if i.get("signal_ns") is not None]
        signal = median([i["end_ns"] - i["signal_ns"] for i in sg]) if sg else None
        # Warp 0's held time, and its share of the time from the first data
        # to the end (in a one-warp-per-tile loop: its own tiles' work, their
        # activation staging included; the other warps' tiles it only passes).
        hl = [(h, i) for h, i in ((hold_ns(i), i) for i in have) if h is not None]
        held = median([h for h, _ in hl]) if hl else None
        share = median([h / max(1, i["end_ns"] - i["data_ns"]) for h, i in hl]) if hl else None
        print(f"{op:16} {len(v):6d} {fmt(span):>9} {fmt(wait):>7} {fmt(to_data):>8} {fmt(rest):>7} {fmt(lead):>7} "
              f"{'-' if tiles is None else tiles:>6} {fmt(per):>9} {fmt(stall):>7} {fmt(signal):>7} {fmt(held):>7} "
              f"{'-' if share is None else f'{100 * share:.0f}':>6}")
    stages(ins)
    phases(ins)
    if layers:  # the chain of a layer needs the previous layer's down tiles
        lo, hi = (int(x) for x in layers.split("-"))
        head_chain(load(src)["instructions"], lo, hi)
    else:
        head_chain(ins)


def fit(xs, ys):
    """Least squares y = a + b x; None when x does not vary."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def stages(ins):
    """Attention splits by their stages of 64 keys (timelines with "stages",
    from round 13 on): per stage count the median time from ready to the
    first data and from the first data to the end, and the fit of the latter
    over the stages (the slope: one more stage's cost with its K / V in the
    ring; the intercept: what a split carries after its last stage)."""
    att = [i for i in ins if i["op"] == "attention" and i.get("stages") is not None]
    if not att:
        return
    by = {}
    for i in att:
        by.setdefault(i["stages"], []).append(i)
    print("  attention splits by stages (medians, us): stages, count, ready -> data, data -> end, ready -> end,"
          " held (warp 0), stalled")
    for n in sorted(by):
        v = by[n]
        dat = [i for i in v if i.get("data_ns") is not None]
        to_data = median([i["data_ns"] - i["ready_ns"] for i in dat])
        run = median([i["end_ns"] - i["data_ns"] for i in dat])
        whole = median([i["end_ns"] - i["ready_ns"] for i in v])
        held = median([h for h in (hold_ns(i) for i in dat) if h is not None])
        stalled = median([i["stall_ns"] for i in dat if i.get("stall_ns") is not None])
        f = lambda x: "-" if x is None else f"{x / 1000:.2f}"
        print(f"    {n:6d} {len(v):6d} {f(to_data):>8} {f(run):>8} {f(whole):>8} {f(held):>8} {f(stalled):>8}")
    pts = [(i["stages"], (i["end_ns"] - i["data_ns"]) / 1000) for i in att if i["stages"] > 0 and i.get("data_ns")]
    ab = fit([p[0] for p in pts], [p[1] for p in pts]) if len(pts) > 1 else None
    if ab:
        print(f"  fit over {len(pts)} splits: data -> end = {ab[0]:.2f} us + {ab[1]:.3f} us a stage")
    hp = [(i["stages"], hold_ns(i) / 1000) for i in att if i["stages"] > 0 and i.get("data_ns") and hold_ns(i) is not None]
    ab = fit([p[0] for p in hp], [p[1] for p in hp]) if len(hp) > 1 else None
    if ab:
        print(f"  fit over {len(hp)} splits: held by warp 0 = {ab[0]:.2f} us + {ab[1]:.3f} us a stage"
              " (the rest of a stage: waiting for it, and the ring's acquire / release)")


def model(src, layers=None):
    ins = load(src)["instructions"]
    if not ins or "est_end_ns" not in ins[0]:
        sys.exit("--model: this timeline has no cost-model estimates (est_start_ns / est_end_ns)")
    sel = ins
    if layers:
        lo, hi = (int(x) for x in layers.split("-"))
        sel = [i for i in ins if lo <= i["layer"] <= hi]
    by_op = {}
    for i in sel:
        by_op.setdefault(i["op"], []).append(i)
    print(f"{'op':16} {'count':>6} {'measured':>9} {'model':>7} {'ratio':>6}   (median wait -> end, us)")
    for op, v in sorted(by_op.items(), key=lambda kv: min(i["start_ns"] for i in kv[1])):
        m = median([i["end_ns"] - i["ready_ns"] for i in v]) / 1000
        e = median([i["est_end_ns"] - i["est_start_ns"] for i in v]) / 1000
        print(f"{op:16} {len(v):6d} {m:9.2f} {e:7.2f} {m / e if e else float('nan'):6.2f}")
    for layer in sorted({i["layer"] for i in sel}):
        v = [i for i in sel if i["layer"] == layer]
        norms = [i for i in v if i["op"] == "norm"]
        if not norms:
            continue
        m0 = min(i["start_ns"] for i in norms)
        e0 = min(i["est_start_ns"] for i in norms)
        nxt = [i for i in ins if i["layer"] == layer + 1 and i["op"] in ("norm", "final_norm")]
        span = ""
        if nxt:
            span = (f": {(min(i['start_ns'] for i in nxt) - m0) / 1000:.1f} us measured, "
                    f"{(min(i['est_start_ns'] for i in nxt) - e0) / 1000:.1f} modelled")
        print(f"layer {layer}{span}; last end per opcode from the first norm start (us), measured / modelled")
        by = {}
        for i in v:
            by.setdefault(i["op"], []).append(i)
        for op, w in sorted(by.items(), key=lambda kv: max(i["end_ns"] for i in kv[1])):
            me = (max(i["end_ns"] for i in w) - m0) / 1000
            ee = (max(i["est_end_ns"] for i in w) - e0) / 1000
            print(f"  {op:16} {me:7.1f} {ee:7.1f}")


def phases(ins):
    """Per layer, when each opcode's first instruction started and its last
    ended, relative to the layer's first norm start (us): the critical path
    of a layer in one table (norm -> router -> route -> claims, and the
    attention chain beside it)."""
    layers = sorted({i["layer"] for i in ins})
    for layer in layers:
        v = [i for i in ins if i["layer"] == layer]
        norms = [i for i in v if i["op"] == "norm"]
        if not norms:
            continue
        t0 = min(i["start_ns"] for i in norms)
        nxt = [i for i in ins if i["layer"] == layer + 1 and i["op"] in ("norm", "final_norm")]
        span = (min(i["start_ns"] for i in nxt) - t0) / 1000 if nxt else None
        print(f"layer {layer}: first norm start -> next layer's norm start "
              f"{'-' if span is None else f'{span:.1f}'} us; per opcode: first start / first ready / last end (us)")
        by_op = {}
        for i in v:
            by_op.setdefault(i["op"], []).append(i)
        for op, w in sorted(by_op.items(), key=lambda kv: max(i["end_ns"] for i in kv[1])):
            a = (min(i["start_ns"] for i in w) - t0) / 1000
            r = (min(i["ready_ns"] for i in w) - t0) / 1000
            e = (max(i["end_ns"] for i in w) - t0) / 1000
            print(f"  {op:16} {a:7.1f} {r:7.1f} {e:7.1f}")
        claims(v, t0)
        occupancy(v, t0)
        if nxt:
            sm_time(v, t0, min(i["start_ns"] for i in nxt))


def head_chain(ins, lo=None, hi=None):
    """The serial head of each MoE layer measured from the previous layer's
    last expert down tile (us): its norm's end, the router tiles' last end,
    the route's ready and end, the gate/up loops' first claim and first data,
    and the MoE phase from that first claim to the layer's last down tile."""
    rows = []
    for layer in sorted({i["layer"] for i in ins}):
        if lo is not None and not lo <= layer <= hi:
            continue
        prev = [i for i in ins if i["layer"] == layer - 1 and i["op"] == "expert_down"]
        gu = [i for i in ins if i["layer"] == layer and i["op"] == "expert_gate_up"]
        down = [i for i in ins if i["layer"] == layer and i["op"] == "expert_down"]
        route = [i for i in ins if i["layer"] == layer and i["op"] == "route"]
        if not prev or not gu or not down or not route:
            continue
        t0 = max(i["end_ns"] for i in prev)
        norm = max(i["end_ns"] for i in ins if i["layer"] == layer and i["op"] == "norm")
        router = max(i["end_ns"] for i in ins if i["layer"] == layer and i["op"] == "router")
        claim = min(i["issue_ns"] for i in gu if i.get("issue_ns")) if any(i.get("issue_ns") for i in gu) else None
        data = min(i["data_ns"] for i in gu if i.get("data_ns")) if any(i.get("data_ns") for i in gu) else None
        end = max(i["end_ns"] for i in down)
        us = lambda t: "-" if t is None else f"{(t - t0) / 1000:6.1f}"
        moe = "-" if claim is None else f"{(end - claim) / 1000:6.1f}"
        rows.append(f"  {layer:5d} {us(norm)} {us(router)} {us(min(i['ready_ns'] for i in route))} "
                    f"{us(max(i['end_ns'] for i in route))} {us(claim)} {us(data)} {moe}")
    if rows:
        print("serial head from the previous layer's last down tile (us): layer, norm end, routers end, route ready, "
              "route end, gate/up first claim, first data; then first claim -> last down tile")
        print("\n".join(rows))


def pct(v, qs=(0, 0.1, 0.5, 0.9, 1)):
    v = sorted(v)
    return [v[int(q * (len(v) - 1))] for q in qs] if v else []


def claims(v, t0):
    """A layer's claim loops across SMs (min / 10% / median / 90% / max, us
    from the layer's first norm): when the loader took the first tile
    (issue), when its data came, when the loop ended, and the tiles per us
    each SM ran from its first data (what the ring delivered per SM)."""
    for op in ("expert_gate_up", "expert_down"):
        w = [i for i in v if i["op"] == op]
        if not w:
            continue
        f = lambda xs: " ".join(f"{x:6.1f}" for x in xs)
        iss = [(i["issue_ns"] - t0) / 1000 for i in w if i.get("issue_ns")]
        data = [(i["data_ns"] - t0) / 1000 for i in w if i.get("data_ns")]
        end = [(i["end_ns"] - t0) / 1000 for i in w]
        rate = [i["tiles"] / ((i["end_ns"] - i["data_ns"]) / 1000) for i in w
                if i.get("data_ns") and i.get("tiles") and i["end_ns"] > i["data_ns"]]
        print(f"  {op} on {len(w)} SMs, {sum(i.get('tiles') or 0 for i in w)} tiles "
              f"(min / 10% / median / 90% / max):")
        print(f"    first claim {f(pct(iss))}\n    first data  {f(pct(data))}\n    end         {f(pct(end))}\n"
              f"    tiles / us  {' '.join(f'{x:6.2f}' for x in pct(rate))}")


def occupancy(v, t0, step_us=4):
    """How many SMs are in each opcode (waiting or running) over a layer,
    every step_us (an SM still in attention cannot take expert tiles: the
    claim loops' ramp)."""
    end = (max(i["end_ns"] for i in v) - t0) / 1000
    print(f"  SMs in each opcode (waiting or running), every {step_us} us:")
    t = 0.0
    while t <= end:
        busy = {}
        for i in v:
            if (i["start_ns"] - t0) / 1000 <= t <= (i["end_ns"] - t0) / 1000:
                busy[i["op"]] = busy.get(i["op"], 0) + 1
        print(f"    {t:5.0f} " + ", ".join(f"{op} {n}" for op, n in sorted(busy.items(), key=lambda kv: -kv[1])))
        t += step_us


def sm_time(v, t0, t1):
    """Where a layer's SM time goes (its span x the SMs that ran any of its
    instructions): per opcode the time running (ready -> end) and waiting on
    its producers (start -> ready), clipped to the layer's span, and what is
    left between instructions. A claim loop's "running" includes its waits
    for ring data (its stall)."""
    sms = {i["sm"] for i in v}
    total = (t1 - t0) * len(sms)
    if total <= 0:
        return
    run, wait = {}, {}
    for i in v:
        s, e = max(i["start_ns"], t0), min(i["end_ns"], t1)
        if e <= s:
            continue
        r = min(max(i["ready_ns"], s), e)
        wait[i["op"]] = wait.get(i["op"], 0) + r - s
        run[i["op"]] = run.get(i["op"], 0) + e - r
    print(f"  SM time ({(t1 - t0) / 1000:.1f} us x {len(sms)} SMs): running / waiting on producers")
    for op in sorted(run, key=lambda o: -(run[o] + wait[o])):
        print(f"    {op:16} {100 * run[op] / total:5.1f}% {100 * wait[op] / total:5.1f}%")
    idle = total - sum(run.values()) - sum(wait.values())
    print(f"    {'between':16} {100 * idle / total:5.1f}%")


def extract(src, dst, layers):
    data = load(src)
    lo, hi = (int(x) for x in layers.split("-"))
    data["instructions"] = [i for i in data["instructions"] if lo - 1 <= i["layer"] <= hi]
    if not data["instructions"]:
        sys.exit(f"no instructions in layers {lo - 1}-{hi}")
    with gzip.open(dst, "wt") as f:
        json.dump(data, f, separators=(",", ":"))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--extract":
        extract(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) >= 3 and sys.argv[1] == "--summary":
        summary(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)
    elif len(sys.argv) >= 3 and sys.argv[1] == "--model":
        model(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)
    elif len(sys.argv) in (3, 4):
        main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)
    else:
        sys.exit(__doc__)
