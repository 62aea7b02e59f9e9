#!/usr/bin/env bash
# Round 13, first call (docs/megakernel.md, "Round 13"): where an attention
# stage's ~1.6 us goes, and two ways to shorten it.
# - The stage loop without its Q K^T mma, its P V, or any math
#   (attn_ablate=1 / 2 / 3: timing only, the results are wrong), bs 1 and 8 x
#   8K and LONG (128K; 64K where an H100's memory is short).
# - Builds with q's hi / lo halves packed into one mma (rows 0-7 / 8-15, G <=
#   8: half the Q K^T mma, chains of 8; -DMEGASERVE_MK_ATTN_PACK=1), and
#   packed with the odd k-steps in a second accumulator (chains of 4; and
#   -DMEGASERVE_MK_ATTN_ILP=1), at the same points (the layered path in each
#   process is the cross-binary reference).
# - bs 5 / 7 x LONG with the attention on every SM in one wave.
# - The megakernel tests at the defaults, then (time left) in the packed build.
#   [LONG=64K] OUT=/dir tools/mk_round13.sh 2>&1 | tee $OUT/round.txt   (device machine, repo root, .deps carried)
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
# 128K, or 64K on a card of less than 100 GB (an H100: bs 8 x 128K's KV and
# the full shape's weights do not fit).
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
L=${LONG:-$([ "${mem:-0}" -ge 100000 ] && echo 128K || echo 64K)}
echo "long context: $L"
flag_build() {  # DIR FLAGS TARGETS...
  local dir=$1 flags=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGASERVE_CUDA=ON \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_PREFIX_PATH="$PWD/.deps" \
    -DCMAKE_INCLUDE_PATH="$PWD/.deps/include" -DCMAKE_LIBRARY_PATH="$PWD/.deps/lib" \
    -DCMAKE_CUDA_FLAGS="$flags" > "$OUT/configure_$(basename "$dir").log" 2>&1 &&
    nice ninja -C "$dir" -j6 "$@" > "$OUT/build_$(basename "$dir").log" 2>&1
  echo "build $dir ($flags): exit $?"
}
# The flag builds in the background while the ablations run (the megakernel
# is one launch a step: the host's load does not time into it).
(flag_build build-gpu-pack "-DMEGASERVE_MK_ATTN_PACK=1" megaserve test_gpu > "$OUT/done_pack" 2>&1) &
(flag_build build-gpu-pi "-DMEGASERVE_MK_ATTN_PACK=1 -DMEGASERVE_MK_ATTN_ILP=1" megaserve > "$OUT/done_pi" 2>&1) &
bench ablate 1,8 "8K,$L" "default;attn_ablate=1;attn_ablate=2;attn_ablate=3;default" 170
wait
cat "$OUT/done_pack" "$OUT/done_pi"
for v in pack pi; do
  t=$(left 60)
  [ "$t" = 0 ] || [ ! -x build-gpu-$v/megaserve ] && continue
  timeout "$t" build-gpu-$v/megaserve bench decode --random nmc-full --batch 1,8 --context "8K,$L" \
    --mk-variants "default;default" --json "$OUT/bench_$v.json" 2> "$OUT/bench_$v.log"
  echo "== bench $v: exit $?"
done
bench base 1,8 "8K,$L" "default" 45
bench odd 5,7 "$L" "default;attn_pct=100,attn_wave=1;default" 45
t=$(left 400)
[ "$t" = 0 ] && echo "== tests: skipped (the call's time is spent)"
[ "$t" != 0 ] && run_mk_tests "$OUT/mk_tests.log" "$t" ""
t=$(left 300)
if [ "$t" != 0 ] && [ -x build-gpu-pack/test_gpu ]; then
  timeout "$t" build-gpu-pack/test_gpu --gtest_filter="$MK_TESTS" > "$OUT/mk_tests_pack.log" 2>&1
  echo "== megakernel tests (packed build): exit $?"
  grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/mk_tests_pack.log" | head -20
fi
for b in build-gpu build-gpu-pack; do
  obj=$(find $b -name 'megakernel.cu.o' 2> /dev/null | head -1)
  [ -n "$obj" ] && /usr/local/cuda/bin/cuobjdump -sass "$obj" 2> /dev/null | gzip > "$OUT/sass_$(basename $b).txt.gz"
done
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
