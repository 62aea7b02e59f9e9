#!/usr/bin/env python3
"""The source lines with the most warp-state samples in an Nsight Compute
source-page CSV (`ncu -i REP --page source --csv --print-source cuda,sass`).

Usage: tools/ncu_lines.py FILE.csv [N]

The CSV (ncu of CUDA 13.0) is a block per source file: a "File Path" row, a
"Function Name" row, a header row starting "Line No", then one row per source
line (its number in the first column) followed by that line's SASS rows (an
empty first column). The samples are the "Warp Stall Sampling (All Samples)"
column of the source-line rows. Prints the N lines (default 40) with the
most samples and their share of all samples, then each file's share (which
opcode's code the warps sit in: ops/attention.cuh against the attention's
share of the SM time in the timeline, say).
"""
import collections
import csv
import sys


def main(path, n):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    cur, col = "", None
    samples, text = collections.Counter(), {}
    for r in rows:
        if not r:
            continue
        if r[0] == "File Path":
            cur = r[1].split("/")[-1]
            continue
        if r[0] == "Line No":
            col = next((i for i, c in enumerate(r) if c.startswith("Warp Stall Sampling (All")), None)
            continue
        if r[0] in ("Function Name", "") or col is None or len(r) <= col:
            continue
        try:
            s = float(r[col])
        except ValueError:
            continue
        samples[(cur, r[0])] += s
        text[(cur, r[0])] = r[1]
    total = sum(samples.values())
    if not total:
        sys.exit(f"{path}: no warp-state samples found")
    print(f"{len(samples)} source lines, {total:.0f} samples")
    for (fil, line), s in samples.most_common(n):
        print(f"{s / total:6.1%} {fil}:{line}  {text[(fil, line)].strip()[:100]}")
    by_file = collections.Counter()
    for (fil, _), s in samples.items():
        by_file[fil] += s
    print("per file:")
    for fil, s in by_file.most_common():
        print(f"{s / total:6.1%} {fil}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
