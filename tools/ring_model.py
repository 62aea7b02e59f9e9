#!/usr/bin/env python3
"""Throughput of a megakernel claim loop's stage ring, by a small
discrete-event model (no GPU): what one SM streams per us for a given load
latency, owner math per position and release protocol.

The ring has S positions; position p holds chunk p % C of tile p // C (C
positions a tile: 2 for NMC's gate/up tiles, 1 for its down tiles). The
loader issues position p once position p - S is released, its data lands L
us later. Consumer warp w walks every position in order: it waits for the
data, and if it owns the position it works m us on it (plus e us of
epilogue after a tile's last position), else it passes it at once. A
position is released (its stage free for p + S):
  all     when all eight warps have passed it (the shipped protocol: a warp
          passes a position only after its own earlier tiles' math);
  owner   when its owner is done with it (round 14's owner-only release);
and the owner of tile t is warp t % 8 ("tile"), or each chunk has its own
owner, warp p % 8, with the tile's partial sums combined by the last
chunk's owner after the others' ("chunk": a gate/up tile on two warps).

Usage: tools/ring_model.py [--stages 5] [--chunks 2] [--tiles 400]
prints tiles / us and GB/s a SM (32 KB a position) over a grid of L and m
for each protocol and ownership. Compare with the timelines' tiles / us a
SM (plot_timeline.py --summary: gate/up 0.40-0.43, down 0.69-0.77 at bs 1 /
8K on both cards) and with claim_ablate's (m ~ 0).
"""
import argparse


def simulate(S, C, L, m, e, tiles, release, owners, warps=8, issue=0.02, pass_cost=0.01):
    """Tiles a us once the ring is in its steady state (the first fifth of
    the positions, the ramp, left out). Each warp walks the positions in
    order, so a warp passes another's position only after its own earlier
    work."""
    n = tiles * C
    data = [0.0] * n          # when position p's bytes have landed
    released = [0.0] * n      # when position p's stage is free again
    arrive = [[0.0] * n for _ in range(warps)]  # when warp w was done with p
    warp_t = [0.0] * warps    # each warp's clock
    chunk_done = {}           # chunk ownership: when a tile's chunk c was done
    loader_t = 0.0
    for p in range(n):
        # The loader: in order, position p once p - S is released.
        start = max(loader_t, released[p - S] if p >= S else 0.0)
        loader_t = start + issue
        data[p] = start + issue + L
        t, c = divmod(p, C)
        owner = t % warps if owners == "tile" else p % warps
        for w in range(warps):
            begin = max(warp_t[w], data[p])
            if w == owner:
                done = begin + m
                if owners == "chunk":
                    chunk_done[(t, c)] = done
                    if c == C - 1:  # combine the tile's other chunks' partials
                        done = max([done] + [chunk_done[(t, k)] for k in range(C - 1)]) + e
                elif c == C - 1:
                    done += e
            else:
                done = begin + pass_cost
            warp_t[w] = done
            arrive[w][p] = done
        # Positions are released in order (the loader reuses stages in order).
        if release == "all":
            r = max(arrive[w][p] for w in range(warps))
        else:
            r = arrive[owner][p]
        released[p] = max(r, released[p - 1] if p else 0.0)
    skip = n // 5  # the ramp
    span = released[n - 1] - released[skip]
    return (tiles - skip // C) / span if span > 0 else float("inf")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", type=int, default=5)
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--tiles", type=int, default=400)
    ap.add_argument("--epilogue", type=float, default=0.1, help="us after a tile's last position (owner)")
    a = ap.parse_args()
    kb = 32 * a.chunks
    print(f"ring of {a.stages} positions, {a.chunks} a tile ({kb} KB), epilogue {a.epilogue} us: tiles / us a SM "
          f"(GB/s a SM)")
    cases = [("all", "tile"), ("owner", "tile"), ("all", "chunk"), ("owner", "chunk")]
    print("   L us   m us  " + "  ".join(f"{r + '/' + o:>16}" for r, o in cases))
    for L in (1.0, 1.5, 2.0, 3.0, 4.0, 5.0):
        for m in (0.0, 0.3, 0.6, 1.0, 1.5):
            vals = [simulate(a.stages, a.chunks, L, m, a.epilogue, a.tiles, r, o) for r, o in cases]
            print(f"  {L:5.1f}  {m:5.1f}  " + "  ".join(f"{v:7.3f} ({v * kb * 1.024:5.1f})" for v in vals))


if __name__ == "__main__":
    main()
