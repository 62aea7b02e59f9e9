# Sourced by the device scripts (tools/mk_check.sh, tools/mk_speed.sh): sets
# OUT (default ./device_out), puts .deps/lib on LD_LIBRARY_PATH, configures
# build-gpu (tools/configure_gpu.sh) and builds the targets given, with the
# logs in $OUT; returns 1, printing the errors, when a step fails.
#   source tools/gpu_build.sh test_gpu megaserve || exit 1
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
deadline=$((SECONDS + ${BUDGET:-575}))
[ -d .deps/lib ] && export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
if ! tools/configure_gpu.sh "$OUT/configure.log"; then
  tail -20 "$OUT/configure.log"
  return 1
fi
if ! ninja -C build-gpu -j16 "$@" > "$OUT/build.log" 2>&1; then
  grep -E "error" -A3 "$OUT/build.log" | head -40
  return 1
fi
# The megakernel's GPU tests (every family's minis against the CPU
# interpreter, the demo model against HF, determinism, timeline, watchdog,
# the tuning specs): run_mk_tests LOG SECONDS [EXTRA_FILTER], the summary
# printed, its exit status returned.
MK_TESTS="*MkVsVm*:MkDemo.*:MkDeterminism.*:MkTimeline.*:MkWatchdog.*:MkTuningSpec.*"
run_mk_tests() {
  local t0=$SECONDS rc
  timeout "$2" build-gpu/test_gpu --gtest_filter="$MK_TESTS${3:-}" > "$1" 2>&1
  rc=$?
  echo "== megakernel tests: exit $rc ($((SECONDS - t0)) s, ${MEGASERVE_MK_EXPERIMENTS:-default settings})"
  grep -E "^\[  (FAILED|PASSED) |buffer |Failure" "$1" | head -30
  return $rc
}
# A call within the device tool's 600 s a command: the deadline (set at
# the top, before the build) is BUDGET seconds (default 575) from when this
# file is sourced; `left WANT` gives min(WANT, seconds to the deadline - 5),
# or 0 when under 20 are left.
left() {
  local l=$((deadline - SECONDS - 5))
  [ $l -gt "$1" ] && l=$1
  [ $l -lt 20 ] && l=0
  echo $l
}
# bench NAME BATCHES CONTEXTS VARIANTS SECONDS: `megaserve bench decode` of
# NMC's full shape (random weights), both paths, the megakernel under each
# ';'-separated variant, into $OUT/bench_NAME.json / .log, cut to what the
# call has left.
bench() {
  local t0=$SECONDS t
  t=$(left "$5")
  [ "$t" = 0 ] && { echo "== bench $1: skipped (the call's time is spent)"; return; }
  timeout "$t" build-gpu/megaserve bench decode --random nmc-full --batch "$2" --context "$3" --mk-variants "$4" \
    --json "$OUT/bench_$1.json" 2> "$OUT/bench_$1.log"
  echo "== bench $1: exit $? ($((SECONDS - t0)) s)"
}
