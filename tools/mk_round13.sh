#!/usr/bin/env bash
# (Ran in round 13. -DMEGASERVE_MK_ATTN_ILP was removed after it: the H200 did not support it.)
# Round 13, first call (docs/megakernel.md, "Round 13"): where an attention
# stage's ~1.6 us goes, and the packed q fragments that shorten it.
# - One process a point (bs 1 and 8 x 8K and LONG: 128K, 64K on a card of
#   less than 100 GB): the defaults (packed at NMC's G = 8), attn_pack=0 (the
#   separate hi / lo mma, the kernel before this round), and the stage loop
#   without its Q K^T mma, or any math (attn_ablate=1 / 3: timing only, the
#   results are wrong), packed and not.
# - A build with the odd k-steps in a second pair of score accumulators
#   (-DMEGASERVE_MK_ATTN_ILP=1: chains of 4) at the same points (the layered
#   path in each process is the cross-binary reference).
# - bs 5 / 7 x LONG with the attention on every SM in one wave.
# - The megakernel tests at the defaults, then under attn_pack=0.
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
# The flag build in the background while the first bench runs (the
# megakernel is one launch a step: the host's load does not time into it).
(flag_build build-gpu-ilp "-DMEGASERVE_MK_ATTN_ILP=1" megaserve > "$OUT/done_ilp" 2>&1) &
bench pack 1,8 "8K,$L" "default;attn_pack=0;attn_ablate=1;attn_ablate=3;attn_pack=0,attn_ablate=3;default" 200
wait
cat "$OUT/done_ilp"
t=$(left 50)
if [ "$t" != 0 ] && [ -x build-gpu-ilp/megaserve ]; then
  timeout "$t" build-gpu-ilp/megaserve bench decode --random nmc-full --batch 1,8 --context "8K,$L" \
    --mk-variants "default;default" --json "$OUT/bench_ilp.json" 2> "$OUT/bench_ilp.log"
  echo "== bench ilp: exit $?"
fi
bench odd 5,7 "$L" "default;attn_pct=100,attn_wave=1;default" 45
t=$(left 400)
[ "$t" = 0 ] && echo "== tests: skipped (the call's time is spent)"
[ "$t" != 0 ] && run_mk_tests "$OUT/mk_tests.log" "$t" ""
t=$(left 250)
[ "$t" != 0 ] && MEGASERVE_MK_EXPERIMENTS=attn_pack=0 run_mk_tests "$OUT/mk_tests_unpacked.log" "$t" ""
for b in build-gpu; do
  obj=$(find $b -name 'megakernel.cu.o' 2> /dev/null | head -1)
  [ -n "$obj" ] && /usr/local/cuda/bin/cuobjdump -sass "$obj" 2> /dev/null | gzip > "$OUT/sass_$(basename $b).txt.gz"
done
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
