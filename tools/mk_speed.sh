#!/usr/bin/env bash
# One device call for a megakernel speed change: correctness first (a wrong
# kernel is not timed), then the side-by-side bench and one step's timeline.
#   1. builds test_gpu and megaserve (tools/configure_gpu.sh, build-gpu);
#   2. the megakernel against the CPU interpreter on every family's minis,
#      the demo model against HF, determinism, timeline, watchdog (stops here
#      when one fails);
#   3. MK_CHECK="spec spec ...": each variant (a bench decode --mk-variants
#      spec, e.g. "gu_batch=4,down_gate=2") checked the same way under
#      MEGASERVE_MK_EXPERIMENTS (MkVsVm but its two 3-layer cases, MkDemo
#      and MkWatchdog: the abort paths); a variant that fails is reported
#      and left out of the bench;
#   4. `bench decode` on the full NMC shape in one process: the layered path
#      and the megakernel in every variant of MK_VARIANTS (';'-separated,
#      default "default") at MK_BATCHES x MK_CONTEXTS (default 1,8 x 8K),
#      JSON in $OUT/bench.json;
#   5. a timeline of one step (first batch and context) for each variant of
#      MK_TIMELINE (space-separated, default "default"), each in a run of its
#      own (so the recording does not slow the timed one), its per-opcode
#      summary (tools/plot_timeline.py --summary), the cost model beside it
#      (--model), the SVG of layers 2-3 and layers 1-3's entries
#      (--extract: gzipped, to commit with the round's numbers);
#   6. MK_GRID="BATCHES CONTEXTS": the default tuning and the layered path
#      side by side over that grid ($OUT/bench_grid.json);
#   7. MK_FULL=1: the full-shape teacher-forced test against the layered path
#      (under MK_FULL_VARIANT, default "default"; MK_FULL_TIMEOUT seconds).
# MK_BENCH_ANYWAY=1 times even when a test failed (said loudly: such numbers
# are not for adopting a change).
# The device tool returns at most 8 files: everything in $OUT ends up in
# $OUT/mk_speed.tgz, with bench.json, the table and the first timeline's
# summary and picture also beside it.
# Usage on the device machine, from the repo root: OUT=/dir tools/mk_speed.sh
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
T=build-gpu/test_gpu
M=build-gpu/megaserve
run_mk_tests "$OUT/mk_tests.log" 400
rc=$?
if [ $rc != 0 ]; then
  [ "${MK_BENCH_ANYWAY:-0}" = 1 ] || exit 1
  echo "== TESTS FAILED: the numbers below are not valid for adopting a change (MK_BENCH_ANYWAY=1)"
fi
variants=${MK_VARIANTS:-default}
i=0
for v in ${MK_CHECK:-}; do
  i=$((i + 1))
  t0=$SECONDS
  # Without the two 3-layer all-dimensions cases (~90 s; the default run has them).
  MEGASERVE_MK_EXPERIMENTS=$v timeout 300 $T --gtest_filter="*MkVsVm*:MkDemo.*:MkWatchdog.*:-*wide3*" > "$OUT/mk_tests_v$i.log" 2>&1
  rc=$?
  echo "== variant $v: megakernel tests exit $rc ($((SECONDS - t0)) s)"
  grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/mk_tests_v$i.log" | head -10
  if [ $rc != 0 ]; then
    # Leave every variant that holds all of this failing spec's settings out of the bench.
    variants=$(echo "$variants" | tr ';' '\n' | python3 -c '
import sys
bad = set(sys.argv[1].split(","))
print(";".join(v for v in sys.stdin.read().split() if not bad <= set(v.split(","))))' "$v")
    echo "== variants with $v left out of the bench: now $variants"
  fi
done
B=${MK_BATCHES:-1,8}
C=${MK_CONTEXTS:-8K}
t0=$SECONDS
timeout 400 $M bench decode --random nmc-full --batch "$B" --context "$C" --mk-variants "$variants" \
  --json "$OUT/bench.json" 2> "$OUT/bench.log" | tee "$OUT/bench_table.txt"
echo "== bench: $((SECONDS - t0)) s"
first_b=${B%%,*}
first_c=${C%%,*}
i=0
for v in ${MK_TIMELINE:-default}; do
  i=$((i + 1))
  timeout 200 $M bench decode --random nmc-full --decode-backend megakernel --batch "$first_b" --context "$first_c" \
    --mk-variants "$v" --timeline "$OUT/timeline$i.json" > "$OUT/timeline_run$i.log" 2>&1 ||
    tail -5 "$OUT/timeline_run$i.log"
  if [ -f "$OUT/timeline$i.json" ]; then
    echo "== timeline $i ($v), layers 2-3:"
    python3 tools/plot_timeline.py --summary "$OUT/timeline$i.json" 2-3 | tee "$OUT/timeline_summary$i.txt"
    python3 tools/plot_timeline.py --model "$OUT/timeline$i.json" 2-3 | tee -a "$OUT/timeline_summary$i.txt"
    python3 tools/plot_timeline.py "$OUT/timeline$i.json" "$OUT/timeline$i-layers2-3.svg" 2-3
    # Layers 1-3 with every field, small enough to commit (bench/results/).
    python3 tools/plot_timeline.py --extract "$OUT/timeline$i.json" "$OUT/timeline$i-layers1-3.json.gz" 2-3
    gzip -f "$OUT/timeline$i.json"
  fi
done
if [ -n "${MK_GRID:-}" ]; then  # e.g. MK_GRID="1,2,4,8 1K,8K,32K,128K": the default tuning side by side
  timeout 240 $M bench decode --random nmc-full --batch "${MK_GRID% *}" --context "${MK_GRID#* }" \
    --json "$OUT/bench_grid.json" 2> "$OUT/bench_grid.log" | tee "$OUT/bench_grid_table.txt"
fi
if [ "${MK_FULL:-0}" = 1 ]; then
  MEGASERVE_MK_EXPERIMENTS=${MK_FULL_VARIANT:-default} timeout ${MK_FULL_TIMEOUT:-300} $T --gtest_filter="MkNmcFull.*" > "$OUT/mk_full.log" 2>&1
  echo "== MkNmcFull (${MK_FULL_VARIANT:-default}): exit $?"
  grep -E "^\[mk nmc\]|Failure|^\[  (FAILED|PASSED) " "$OUT/mk_full.log" | head -20
fi
(cd "$OUT" && tar czf mk_speed.tgz $(ls | grep -v '^mk_speed.tgz$') &&
  ls | grep -vE '^(mk_speed.tgz|bench.json|bench_table.txt|bench_grid.json|timeline_summary1.txt|timeline1-layers2-3.svg|timeline1-layers1-3.json.gz)$' |
  xargs rm -rf)
