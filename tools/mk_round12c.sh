#!/usr/bin/env bash
# Round 12's second device call (docs/megakernel.md, "Round 12"): where an
# attention split's ~2 us a stage goes. Nsight Compute's warp-state sampling
# of one bs 1 / 8K step (tools/mk_ncu.sh): the lines of ops/attention.cuh with
# their samples, and the file's share against the attention's share of the SM
# time (12.5% running in the round 11 timeline). Reading: samples on the mma
# lines (math pipe throttle) say tensor work, on the stage loop's first lines
# with "no instruction" say cold code, on the merge / partial stores say the
# tail. Builds megaserve unless build-gpu has it (a warm machine after
# tools/mk_round12b.sh).
#   OUT=/dir tools/mk_round12c.sh 2>&1 | tee $OUT/round.txt   (device machine, repo root, .deps carried)
set -uo pipefail
[ -x build-gpu/megaserve ] || { source tools/gpu_build.sh megaserve || exit 1; }
[ -d .deps/lib ] && export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
mkdir -p "$OUT/ncu"
OUT="$OUT/ncu" timeout 480 tools/mk_ncu.sh 1 8K
if [ -f "$OUT/ncu/ncu_source_cuda.csv.gz" ]; then
  zcat "$OUT/ncu/ncu_source_cuda.csv.gz" > /tmp/ncu_source.csv
  python3 tools/ncu_lines.py /tmp/ncu_source.csv 400 | grep -E "attention.cuh|per file|^ *[0-9.]+% [a-z_]+\.cuh$" | head -60
fi
# At most 8 files come back: the report stays here (it can be large).
(cd "$OUT/ncu" && rm -f mk.ncu-rep && tar czf ../ncu.tgz . ) && rm -rf "$OUT/ncu"
