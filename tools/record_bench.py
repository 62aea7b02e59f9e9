#!/usr/bin/env python3
"""Records `megaserve bench decode --json` output under bench/results/.

Appends the rows of each given bench JSON to RESULTS (created when missing)
with the revision, the device call and a note on every row, and the date,
device, nominal bandwidth and command at the top. A file holds one device's
rows: rows from another device (an H100 beside H200 rows) are refused, since
their times do not compare; record them in a file of their own.

Usage: tools/record_bench.py RESULTS --revision REV --call N --command CMD --note NOTE BENCH.json...
"""
import argparse
import datetime
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("bench", nargs="+")
    ap.add_argument("--revision", required=True)
    ap.add_argument("--call", type=int, required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--note", required=True)
    a = ap.parse_args()
    if os.path.exists(a.results):
        with open(a.results) as f:
            out = json.load(f)
    else:
        out = {"device": None, "nominal_gbs": None, "date": datetime.date.today().isoformat(), "command": "", "rows": []}
    added = 0
    for path in a.bench:
        with open(path) as f:
            b = json.load(f)
        if out["device"] is None:
            out["device"], out["nominal_gbs"] = b["device"], b["nominal_gbs"]
        elif b["device"] != out["device"]:
            sys.exit(f"{path}: rows of {b['device']}, {a.results} holds {out['device']}'s: record them in another file")
        for r in b["rows"]:
            out["rows"].append(dict(r, git_revision=a.revision, device_call=a.call, note=a.note))
            added += 1
    out["command"] = (out["command"] + "; " if out["command"] else "") + f"call {a.call}: {a.command}"
    with open(a.results, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{a.results}: {added} rows added ({len(out['rows'])} in all, {out['device']})")


if __name__ == "__main__":
    main()
