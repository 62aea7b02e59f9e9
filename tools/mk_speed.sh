#!/usr/bin/env bash
# One device call for a megakernel speed change: correctness first (a wrong
# kernel is not timed), then the side-by-side bench and one step's timeline.
#   1. builds test_gpu and megaserve (tools/configure_gpu.sh, build-gpu);
#   2. the megakernel against the CPU interpreter on every family's minis,
#      the demo model against HF, determinism, timeline, watchdog (stops here
#      when one fails);
#   3. `bench decode` on the full NMC shape, layered and megakernel side by
#      side, at MK_BATCHES x MK_CONTEXTS (default 1,8 x 8K), JSON in $OUT, and
#      the megakernel again with --mk-oproj-before-claims (the list-order A/B);
#   4. a timeline of one step (first batch and context) in a second run (so
#      its recording does not slow the timed one), its per-opcode summary
#      (tools/plot_timeline.py --summary) and the SVG of layers 2-3;
#   5. MK_FULL=1: the full-shape teacher-forced test against the layered path;
#   6. MK_EXPERIMENTS="claim_near route_nofence claim_near,route_nofence": each
#      set of kernel variants (bench decode --mk-experiments) checked first
#      (MkVsVm and MkDemo under MEGASERVE_MK_EXPERIMENTS) and then timed at the
#      same points, JSON in $OUT/bench_exp_<set>.json.
# The device tool returns at most 8 files: everything in $OUT ends up in
# $OUT/mk_speed.tgz.
# Usage on the device machine, from the repo root: OUT=/dir tools/mk_speed.sh
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
T=build-gpu/test_gpu
M=build-gpu/megaserve
timeout 400 $T --gtest_filter="*MkVsVm*:MkDemo.*:MkDeterminism.*:MkTimeline.*:MkWatchdog.*" > "$OUT/mk_tests.log" 2>&1
rc=$?
echo "== megakernel tests: exit $rc"
grep -E "^\[  (FAILED|PASSED) |buffer |Failure" "$OUT/mk_tests.log" | head -30
[ $rc = 0 ] || exit 1
B=${MK_BATCHES:-1,8}
C=${MK_CONTEXTS:-8K}
timeout 300 $M bench decode --random nmc-full --batch "$B" --context "$C" --json "$OUT/bench.json" 2>&1 | tail -12
# The list-order A/B (the O-projection before the claims in parallel blocks).
timeout 200 $M bench decode --random nmc-full --decode-backend megakernel --mk-oproj-before-claims --batch "$B" \
  --context "$C" --json "$OUT/bench_oproj_before_claims.json" 2>&1 | tail -6
first_b=${B%%,*}
first_c=${C%%,*}
timeout 200 $M bench decode --random nmc-full --decode-backend megakernel --batch "$first_b" --context "$first_c" \
  --timeline "$OUT/timeline.json" > "$OUT/timeline_run.log" 2>&1 || tail -5 "$OUT/timeline_run.log"
if [ -f "$OUT/timeline.json" ]; then
  python3 tools/plot_timeline.py --summary "$OUT/timeline.json" 2-3 | tee "$OUT/timeline_summary.txt"
  python3 tools/plot_timeline.py "$OUT/timeline.json" "$OUT/timeline-layers2-3.svg" 2-3
  gzip -f "$OUT/timeline.json"
fi
if [ "${MK_FULL:-0}" = 1 ]; then
  timeout 300 $T --gtest_filter="MkNmcFull.*" > "$OUT/mk_full.log" 2>&1
  echo "== MkNmcFull: exit $?"
  grep -E "^\[mk nmc\]|Failure|^\[  (FAILED|PASSED) " "$OUT/mk_full.log" | head -20
fi
for exp in ${MK_EXPERIMENTS:-}; do
  MEGASERVE_MK_EXPERIMENTS=$exp timeout 200 $T --gtest_filter="*MkVsVm*:MkDemo.*" > "$OUT/mk_tests_$exp.log" 2>&1
  rc=$?
  echo "== experiments $exp: megakernel tests exit $rc"
  grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/mk_tests_$exp.log" | head -10
  [ $rc = 0 ] || continue
  timeout 200 $M bench decode --random nmc-full --decode-backend megakernel --mk-experiments "$exp" --batch "$B" \
    --context "$C" --json "$OUT/bench_exp_$exp.json" 2>&1 | tail -4
done
(cd "$OUT" && tar czf mk_speed.tgz --remove-files $(ls | grep -v '^mk_speed.tgz$'))
