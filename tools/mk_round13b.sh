#!/usr/bin/env bash
# (Ran in round 13. -DMEGASERVE_MK_ATTN_ILP was removed after it: the H200 did not support it.)
# Round 13, second call (not yet run): the packed kernel with its odd
# k-steps in a second accumulator pair (-DMEGASERVE_MK_ATTN_ILP=1, a build
# of its own) under the megakernel tests (both kernels: the defaults, then
# attn_pack=0), and its speed against the default build on the H200, one
# process a build (default, ILP, default again), bs 1 / 8 x 8K and 128K (64K on a card of
# less than 100 GB), the layered path in each process as the cross-build
# reference; the attention's share at 1-2 rows; one bs 8 step's timeline there (a stage's cost, fitted). If the tests pass and the numbers hold, make it the default
# (attention.cuh: ilp = kPack) and drop the flag.
#   OUT=/dir tools/mk_round13b.sh 2>&1 | tee $OUT/round.txt   (device machine, repo root, .deps carried)
set -uo pipefail
source tools/gpu_build.sh megaserve || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
L=${LONG:-$([ "${mem:-0}" -ge 100000 ] && echo 128K || echo 64K)}
cmake -S . -B build-gpu-ilp -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGASERVE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_PREFIX_PATH="$PWD/.deps" \
  -DCMAKE_INCLUDE_PATH="$PWD/.deps/include" -DCMAKE_LIBRARY_PATH="$PWD/.deps/lib" \
  -DCMAKE_CUDA_FLAGS="-DMEGASERVE_MK_ATTN_ILP=1" > "$OUT/configure_ilp.log" 2>&1 &&
  ninja -C build-gpu-ilp -j16 megaserve test_gpu > "$OUT/build_ilp.log" 2>&1 || { tail -30 "$OUT/build_ilp.log"; exit 1; }
for b in build-gpu build-gpu-ilp build-gpu; do
  t=$(left 75)
  [ "$t" = 0 ] && break
  timeout "$t" $b/megaserve bench decode --random nmc-full --batch 1,8 --context "8K,$L" \
    --mk-variants "default;attn_pack=0" --json "$OUT/bench_$b-$SECONDS.json" 2> "$OUT/bench_$b-$SECONDS.log"
  echo "== bench $b: exit $?"
done
# The attention's share of the SMs at one and two rows below 64K (round 11
# measured 50 / 75 / 100; the fewer, longer splits leave more SMs to the
# expert loops from the route on), the ILP build.
t=$(left 70)
[ "$t" != 0 ] && timeout "$t" build-gpu-ilp/megaserve bench decode --random nmc-full --batch 1,2 --context 8K,32K \
  --mk-variants "default;attn_pct=25;attn_pct=33;attn_pct=50" --json "$OUT/bench_pct.json" 2> "$OUT/bench_pct.log"
echo "== bench attn_pct: exit $?"
# One bs 8 step's timeline at the long context (the default build): the
# attention splits by stages and a stage's fitted cost (layers 3-4: a
# sliding and a full layer), kept small (--extract).
t=$(left 45)
if [ "$t" != 0 ]; then
  timeout "$t" build-gpu/megaserve bench decode --random nmc-full --batch 8 --context "$L" --decode-backend megakernel \
    --timeline "$OUT/tl.json" > /dev/null 2> "$OUT/tl.log"
  python3 tools/plot_timeline.py --summary "$OUT/tl.json" 3-4 > "$OUT/tl_summary.txt" 2>&1
  python3 tools/plot_timeline.py --extract "$OUT/tl.json" "$OUT/tl_l3-4.json.gz" 3-4
  rm -f "$OUT/tl.json"
  sed -n '/attention splits by stages/,/fit over/p' "$OUT/tl_summary.txt"
fi
t=$(left 200)
[ "$t" != 0 ] && MK_TESTS="$MK_TESTS" timeout "$t" build-gpu-ilp/test_gpu --gtest_filter="$MK_TESTS" > "$OUT/mk_tests_ilp.log" 2>&1
echo "== megakernel tests (ILP build, defaults): exit $?"; grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/mk_tests_ilp.log" | head
t=$(left 150)
[ "$t" != 0 ] && MEGASERVE_MK_EXPERIMENTS=attn_pack=0 timeout "$t" build-gpu-ilp/test_gpu --gtest_filter="$MK_TESTS-*nmc_wide3*" > "$OUT/mk_tests_ilp_unpacked.log" 2>&1
echo "== megakernel tests (ILP build, attn_pack=0): exit $?"; grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/mk_tests_ilp_unpacked.log" | head
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
