#!/usr/bin/env python3
"""The source lines with the most warp-state samples in an Nsight Compute
source-page CSV (`ncu -i REP --page source --csv --print-source cuda`).

Usage: tools/ncu_lines.py FILE.csv [N]

Prints the N lines (default 40) with the most samples, with their share of
all samples and the two largest stall reasons of each line. The CSV's
columns differ between ncu versions: the sample column is the first whose
name contains "Warp Stall Sampling (All", stall reasons are the columns whose
name starts with "stall_" or contains "Stall" and holds numbers; the file
and line come from the "File"/"Source File" and "Line"/"# Line" columns when
present (the source view repeats the file in a header row otherwise).
"""
import csv
import sys


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return None


def main(path, n):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # The header is the first row with a sampling column.
    hi = next((i for i, r in enumerate(rows) if any("Sampling" in c for c in r)), None)
    if hi is None:
        sys.exit(f"{path}: no warp-state sampling column (first row: {rows[0] if rows else 'empty'})")
    head = rows[hi]
    all_col = next(i for i, c in enumerate(head) if "Sampling (All" in c or c.endswith("Sampling"))
    src_col = next((i for i, c in enumerate(head) if c.strip() in ("Source", "# Source")), None)
    line_col = next((i for i, c in enumerate(head) if c.strip() in ("Line", "# Line", "#")), 0)
    stall_cols = [i for i, c in enumerate(head) if i != all_col and ("stall" in c.lower()) and "Sampling" not in c]
    cur_file = ""
    items = []
    for r in rows[hi + 1:]:
        if len(r) < len(head):
            if r and r[0].strip():
                cur_file = r[0].strip()  # a file header row
            continue
        s = num(r[all_col])
        if not s:
            continue
        stalls = sorted(((num(r[i]) or 0, head[i]) for i in stall_cols), reverse=True)[:2]
        src = r[src_col].strip() if src_col is not None else ""
        items.append((s, cur_file, r[line_col], src, stalls))
    total = sum(i[0] for i in items) or 1
    print(f"{len(items)} lines with samples, {total:.0f} samples")
    for s, fil, line, src, stalls in sorted(items, reverse=True)[:n]:
        st = ", ".join(f"{name.replace('stall_', '')} {v / s:.0%}" for v, name in stalls if v)
        short = fil.split("/")[-1] if fil else ""
        print(f"{s / total:6.1%} {short}:{line}  {src[:90]}  [{st}]")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
