#!/usr/bin/env bash
# Round 11's second device call: the winner of tools/mk_round11.sh (a
# bench decode --mk-variants spec, WINNER) on the full-shape teacher-forced
# test, then the grid with the layered path, the default and the winner
# side by side, the copy probe's claimed-run and phase cases, and serving
# TPOT with --decode-backend auto beside the two paths (next/signal-warp
# holds next/decode-auto).
#   WINNER="spec" OUT=/dir tools/mk_round11b.sh   (device machine, repo root, .deps carried)
# ~330 s: build ~60, MkNmcFull ~90, grid ~130, probe ~20, serve_tpot ~40 a path.
set -uo pipefail
: "${WINNER:?WINNER=<the winning --mk-variants spec of mk_round11.sh>}"
source tools/gpu_build.sh test_gpu megaserve bench_bulk_copy || exit 1
T=build-gpu/test_gpu
M=build-gpu/megaserve
t0=$SECONDS
MEGASERVE_MK_EXPERIMENTS=$WINNER timeout 300 $T --gtest_filter="MkNmcFull.*" > "$OUT/mk_full.log" 2>&1
echo "== MkNmcFull ($WINNER): exit $? ($((SECONDS - t0)) s)"
grep -E "^\[mk nmc\]|Failure|^\[  (FAILED|PASSED) " "$OUT/mk_full.log" | head -20
t0=$SECONDS
timeout 240 $M bench decode --random nmc-full --batch 1,2,4,8 --context 1K,8K,32K,128K \
  --mk-variants "default;$WINNER" --json "$OUT/bench_grid.json" 2> "$OUT/bench_grid.log" | tee "$OUT/bench_grid_table.txt"
echo "== grid: $((SECONDS - t0)) s"
timeout 60 build-gpu/bench_bulk_copy --json "$OUT/bulk.json" > "$OUT/bulk.log" 2>&1
echo "== bench_bulk_copy: exit $?"; tail -15 "$OUT/bulk.log"
# --decode-backend auto exists once next/decode-auto is merged (its parse error names it).
if grep -aq 'megakernel, layered, auto' "$M"; then
  MEGASERVE_MK_EXPERIMENTS=$WINNER DECODE_BACKENDS="layered megakernel auto" timeout 300 tools/serve_tpot.sh
else
  echo "== serve_tpot skipped: this build has no --decode-backend auto"
fi
# The device tool returns at most 8 files: everything in one archive, the
# tables and JSON beside it.
(cd "$OUT" && tar czf round11b.tgz $(ls | grep -v '^round11b.tgz$') &&
  ls | grep -vE '^(round11b.tgz|bench_grid.json|bench_grid_table.txt|bulk.json|serve_tpot.txt|mk_full.log)$' | xargs rm -rf)
ls "$OUT"
