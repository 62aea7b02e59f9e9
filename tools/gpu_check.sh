#!/usr/bin/env bash
# Builds test_gpu (layered CUDA backend: ops vs CPU reference, whole model vs
# HF goldens and the CPU backend, full-shape NMC random-weight decode bench)
# and runs it, then the NMC decode benchmark (BenchNmc.Full: the same run as
# `megaserve bench decode --random nmc-full --batch 1,8 --context 1K,8K`,
# JSON in $OUT/bench_nmc.json). Run from the repository root on the H200;
# results go to $OUT. Extra arguments go to the test run (e.g. a gtest filter).
set -euo pipefail
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.mem --format=csv | tee "$OUT/gpu.txt" || true
tools/configure_gpu.sh "$OUT/configure.log"  # cpp-httplib / pcre2 from .deps/ on the device machine
tail -n 20 "$OUT/configure.log"
ninja -C build-gpu -j16 test_gpu 2>&1 | tail -n 60 | tee "$OUT/build.log"
test -x build-gpu/test_gpu
set +e
build-gpu/test_gpu --gtest_output=json:"$OUT/test_gpu.json" "$@" 2>&1 | tee "$OUT/test_gpu.log"
rc=${PIPESTATUS[0]}
echo "test_gpu exit code: $rc" | tee -a "$OUT/test_gpu.log"
MEGASERVE_BENCH=1 MEGASERVE_BENCH_JSON="$OUT/bench_nmc.json" build-gpu/test_gpu --gtest_filter=BenchNmc.Full 2>&1 |
  tee "$OUT/bench_nmc.log"
brc=${PIPESTATUS[0]}
echo "bench exit code: $brc" | tee -a "$OUT/bench_nmc.log"
[ "$rc" -ne 0 ] && exit "$rc"
exit "$brc"
