#!/usr/bin/env bash
# The megakernel's first runs on the device, in one call, cheapest first so a
# failure costs little device time:
#   1. builds test_gpu and megaserve (build-gpu, tools/configure_gpu.sh);
#   2. the layered GPU tests (the restructure around the device model moved
#      that code: it must still pass);
#   3. the megakernel tests: against the CPU interpreter on small random
#      models of every family (a divergence prints every step buffer's error),
#      the demo model against HF, determinism / barrier ablation, timeline,
#      watchdog; MK_SANITIZE=1 reruns the first interpreter case under
#      compute-sanitizer memcheck and racecheck;
#   4. `bench decode` on the full NMC shape, layered and megakernel side by
#      side (MK_GRID=1: the whole grid), then the full-shape
#      teacher-forced test (MK_FULL=1).
# Usage on the device machine, from the repo root: OUT=/dir tools/mk_check.sh
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
grep -E "ptxas info.*megakernel|bytes stack frame" "$OUT/build.log" | head -4
T=build-gpu/test_gpu
run() {  # name, timeout seconds, filter
  timeout "$2" $T --gtest_filter="$3" > "$OUT/$1.log" 2>&1
  local rc=$?
  echo "== $1: exit $rc"
  grep -E "^\[  (FAILED|PASSED) |^\[mk|buffer |watchdog|Failure" "$OUT/$1.log" | head -40
  return $rc
}
run layered 400 "-Mk*:*MkVsVm*:BenchNmc*:LayeredFull*"
run mk_vs_vm 300 "*MkVsVm*"
run mk_demo 200 "MkDemo.*"
run mk_misc 200 "MkDeterminism.*:MkTimeline.*:MkWatchdog.*"
if [ "${MK_SANITIZE:-0}" = 1 ]; then
  for tool in memcheck racecheck; do
    timeout 300 compute-sanitizer --tool $tool $T --gtest_filter="*MkVsVm*cohere2_moe_hd64*" > "$OUT/sanitize_$tool.log" 2>&1
    echo "== compute-sanitizer $tool: exit $?"; grep -E "ERROR SUMMARY|Invalid|Race" "$OUT/sanitize_$tool.log" | head -10
  done
fi
M=build-gpu/megaserve
if [ "${MK_GRID:-0}" = 1 ]; then
  timeout 500 $M bench decode --random nmc-full --batch 1,2,4,8 --context 1K,8K,32K,128K \
    --json "$OUT/bench_grid.json" 2>&1 | tail -40
else
  timeout 300 $M bench decode --random nmc-full --batch 1,8 --context 8K --json "$OUT/bench_mk.json" 2>&1 | tail -12
fi
if [ "${MK_FULL:-0}" = 1 ]; then run mk_full 550 "MkNmcFull.*"; fi
