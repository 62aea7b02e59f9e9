#!/usr/bin/env python3
"""The source lines with the most warp-state samples in an Nsight Compute
source-page CSV (`ncu -i REP --page source --csv --print-source cuda,sass`).

Usage: tools/ncu_lines.py FILE.csv [N]
       tools/ncu_lines.py --stalls FILE.csv

The CSV (ncu of CUDA 13.0) is a block per source file: a "File Path" row, a
"Function Name" row, a header row starting "Line No", then one row per source
line (its number in the first column) followed by that line's SASS rows (an
empty first column). The samples are the "Warp Stall Sampling (All Samples)"
column of the source-line rows. Prints the N lines (default 40) with the
most samples and their share of all samples, then each file's share (which
opcode's code the warps sit in: ops/attention.cuh against the attention's
share of the SM time in the timeline, say).

--stalls prints the stall reasons (the stall_* columns of the source-line
rows) over the kernel and per file, and the kernel's code: SASS
instructions in all and those executed at least once (the step's code
footprint, 16 bytes an instruction, against the SM's instruction cache),
per file. "no_inst" is a warp waiting for its next instruction to be
fetched.
"""
import collections
import csv
import sys


def source_rows(path):
    """(file name, {column name: index}, row) for every source-line and SASS
    row of the CSV, after its file's header row."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    cur, cols = "", None
    for r in rows:
        if not r:
            continue
        if r[0] == "File Path":
            cur = r[1].split("/")[-1]
        elif r[0] == "Line No":
            cols = {c: i for i, c in enumerate(r)}
        elif r[0] != "Function Name" and cols is not None:
            yield cur, cols, r


def main(path, n):
    samples, text = collections.Counter(), {}
    for cur, cols, r in source_rows(path):
        col = next((i for c, i in cols.items() if c.startswith("Warp Stall Sampling (All")), None)
        if r[0] == "" or col is None or len(r) <= col:
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


def stalls(path):
    reasons, by_file = collections.Counter(), collections.defaultdict(collections.Counter)
    code, executed = collections.Counter(), collections.Counter()
    for cur, col, r in source_rows(path):
        if r[0] == "":  # a SASS row of the line above: the code
            if len(r) > 2 and r[2]:
                code[cur] += 1
                try:
                    if float(r[col["Instructions Executed"]]) > 0:
                        executed[cur] += 1
                except (KeyError, ValueError, IndexError):
                    pass
            continue
        for c, i in col.items():
            if c.startswith("stall_") and "Not Issued" not in c and i < len(r):
                try:
                    v = float(r[i])
                except ValueError:
                    continue
                reasons[c[6:]] += v
                by_file[cur][c[6:]] += v
    total = sum(reasons.values())
    if not total:
        sys.exit(f"{path}: no stall_* columns with samples")
    print(f"stall reasons over {total:.0f} samples: " +
          ", ".join(f"{k} {v / total:.1%}" for k, v in reasons.most_common() if v / total >= 0.005))
    print(f"code: {sum(code.values())} SASS instructions ({16 * sum(code.values()) / 1024:.0f} KB), "
          f"{sum(executed.values())} executed ({16 * sum(executed.values()) / 1024:.0f} KB)")
    print(f"{'file':28} {'samples':>8} {'code':>6} {'exec':>6}  top stall reasons")
    for fil, c in sorted(by_file.items(), key=lambda kv: -sum(kv[1].values()))[:14]:
        n = sum(c.values())
        print(f"{fil:28} {n / total:8.1%} {code[fil]:6d} {executed[fil]:6d}  " +
              ", ".join(f"{k} {v / n:.0%}" for k, v in c.most_common(5)))


if __name__ == "__main__":
    if sys.argv[1] == "--stalls":
        stalls(sys.argv[2])
    else:
        main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
