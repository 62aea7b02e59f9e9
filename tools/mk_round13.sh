#!/usr/bin/env bash
# Round 13, first call (docs/megakernel.md, "Round 13"): where an attention
# stage's ~1.6 us goes. The stage loop with its Q K^T mma, its P V or all its
# math left out (attn_ablate=1 / 2 / 3: timing only, the results are wrong)
# at bs 1 and 8 x 8K and 128K; the same points with q's hi / lo halves in
# separate score accumulators (a second build, -DMEGASERVE_MK_ATTN_ILP=1);
# bs 5 / 7 x 128K with the attention on every SM in one wave; the SASS of the
# stage loop; then the megakernel tests at the defaults.
#   [LONG=64K] OUT=/dir tools/mk_round13.sh 2>&1 | tee $OUT/round.txt   (device machine, repo root, .deps carried)
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
# The ILP build in the background while the first bench runs.
(cmake -S . -B build-gpu-ilp -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGASERVE_CUDA=ON \
   -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_PREFIX_PATH="$PWD/.deps" \
   -DCMAKE_INCLUDE_PATH="$PWD/.deps/include" -DCMAKE_LIBRARY_PATH="$PWD/.deps/lib" \
   -DCMAKE_CUDA_FLAGS="-DMEGASERVE_MK_ATTN_ILP=1" > "$OUT/configure_ilp.log" 2>&1 &&
 nice ninja -C build-gpu-ilp -j4 megaserve > "$OUT/build_ilp.log" 2>&1; echo "ilp build: exit $?" > "$OUT/ilp_done") &
bench ablate 1,8 "8K,${LONG:-128K}" "default;attn_ablate=1;attn_ablate=2;attn_ablate=3;default" 150
wait
cat "$OUT/ilp_done"
if [ -x build-gpu-ilp/megaserve ]; then
  t=$(left 60)
  [ "$t" != 0 ] && timeout "$t" build-gpu-ilp/megaserve bench decode --random nmc-full --batch 1,8 --context "8K,${LONG:-128K}" \
    --mk-variants "default;default" --json "$OUT/bench_ilp.json" 2> "$OUT/bench_ilp.log"
  echo "== bench ilp: exit $?"
fi
bench odd 5,7 "${LONG:-128K}" "default;attn_pct=100,attn_wave=1;default" 50
# The attention stage loop's SASS (the HMMA / LDSM lines and what lies between).
if command -v cuobjdump > /dev/null || [ -x /usr/local/cuda/bin/cuobjdump ]; then
  obj=$(find build-gpu -name 'megakernel.cu.o' | head -1)
  /usr/local/cuda/bin/cuobjdump -sass "$obj" > "$OUT/mk_sass.log" 2>&1
  objilp=$(find build-gpu-ilp -name 'megakernel.cu.o' | head -1)
  [ -n "$objilp" ] && /usr/local/cuda/bin/cuobjdump -sass "$objilp" > "$OUT/mk_sass_ilp.log" 2>&1
fi
t=$(left 300)
[ "$t" = 0 ] && echo "== tests: skipped (the call's time is spent)"
[ "$t" != 0 ] && run_mk_tests "$OUT/mk_tests.log" "$t" ""
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
