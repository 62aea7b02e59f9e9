# Sourced by the device scripts (tools/mk_check.sh, tools/mk_speed.sh): sets
# OUT (default ./device_out), puts .deps/lib on LD_LIBRARY_PATH, configures
# build-gpu (tools/configure_gpu.sh) and builds the targets given, with the
# logs in $OUT; returns 1, printing the errors, when a step fails.
#   source tools/gpu_build.sh test_gpu megaserve || exit 1
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
[ -d .deps/lib ] && export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
if ! tools/configure_gpu.sh "$OUT/configure.log"; then
  tail -20 "$OUT/configure.log"
  return 1
fi
if ! ninja -C build-gpu -j16 "$@" > "$OUT/build.log" 2>&1; then
  grep -E "error" -A3 "$OUT/build.log" | head -40
  return 1
fi
