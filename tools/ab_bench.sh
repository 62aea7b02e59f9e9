#!/usr/bin/env bash
# A/B decode benchmark on the H200: builds test_gpu (as tools/gpu_check.sh)
# and runs BenchNmc.Full (NMC full shape, bs 1/8 x 1K/8K, per-op profile)
# once per variant. Each argument is NAME or NAME:VAR=VALUE,VAR=VALUE (the
# environment of that run); JSON and logs go to $OUT/ab-NAME.{json,log}, and
# a one-line summary per variant to stdout.
# Example: OUT=/tmp/o tools/ab_bench.sh base nofork:MEGASERVE_CONCURRENT_BRANCHES=0
set -uo pipefail
OUT="${OUT:-$PWD/ab_out}"
mkdir -p "$OUT"
tools/configure_gpu.sh "$OUT/ab-configure.log"
ninja -C build-gpu -j16 test_gpu > "$OUT/ab-build.log" 2>&1 || { tail -40 "$OUT/ab-build.log"; exit 1; }
for v in "$@"; do
  name="${v%%:*}"
  envs=()
  if [[ "$v" == *:* ]]; then IFS=',' read -r -a envs <<< "${v#*:}"; fi
  env "${envs[@]}" MEGASERVE_BENCH=1 MEGASERVE_BENCH_JSON="$OUT/ab-$name.json" \
    build-gpu/test_gpu --gtest_filter=BenchNmc.Full > "$OUT/ab-$name.log" 2>&1
  echo "== $name (${envs[*]}) exit $?"
  grep -E "^ +[0-9]+ +[0-9]+ |us total" "$OUT/ab-$name.log" | head -12
done
