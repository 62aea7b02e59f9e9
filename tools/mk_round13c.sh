#!/usr/bin/env bash
# Round 13, a correctness call for a card with no H200 free: the ILP build
# (-DMEGASERVE_MK_ATTN_ILP=1) under the megakernel tests at the defaults
# (every mini, the G = 16 one on the unpacked kernel), then under
# attn_pack=0 (the unpacked kernel for every mini), and one small bs 8
# timeline whose splits carry their stages (the summary's fit). Speed is
# tools/mk_round13b.sh's (an H200).
#   OUT=/dir tools/mk_round13c.sh 2>&1 | tee $OUT/round.txt   (device machine, repo root, .deps carried)
set -uo pipefail
OUT="${OUT:-$PWD/device_out}"; mkdir -p "$OUT"
deadline=$((SECONDS + ${BUDGET:-575}))
left() { local l=$((deadline - SECONDS - 5)); [ $l -gt "$1" ] && l=$1; [ $l -lt 20 ] && l=0; echo $l; }
[ -d .deps/lib ] && export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
MK_TESTS="*MkVsVm*:MkDemo.*:MkDeterminism.*:MkTimeline.*:MkWatchdog.*:MkTuningSpec.*"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t0=$SECONDS
cmake -S . -B build-gpu-ilp -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGASERVE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_PREFIX_PATH="$PWD/.deps" \
  -DCMAKE_INCLUDE_PATH="$PWD/.deps/include" -DCMAKE_LIBRARY_PATH="$PWD/.deps/lib" \
  -DCMAKE_CUDA_FLAGS="-DMEGASERVE_MK_ATTN_ILP=1" > "$OUT/configure_ilp.log" 2>&1 &&
  ninja -C build-gpu-ilp -j16 megaserve test_gpu > "$OUT/build_ilp.log" 2>&1 || { tail -30 "$OUT/build_ilp.log"; exit 1; }
echo "== built in $((SECONDS - t0)) s"
t0=$SECONDS
timeout "$(left 220)" build-gpu-ilp/test_gpu --gtest_filter="$MK_TESTS" > "$OUT/mk_tests_ilp.log" 2>&1
echo "== megakernel tests (ILP build, defaults): exit $? ($((SECONDS - t0)) s)"
grep -E "^\[  (FAILED|PASSED) |Failure|^\[       OK \].*group16" "$OUT/mk_tests_ilp.log" | head
t=$(left 60)
if [ "$t" != 0 ]; then
  timeout "$t" build-gpu-ilp/megaserve bench decode --random nmc-full --batch 8 --context 16K --decode-backend megakernel \
    --timeline "$OUT/tl.json" > /dev/null 2> "$OUT/tl.log"
  echo "== timeline: exit $?"
  python3 tools/plot_timeline.py --summary "$OUT/tl.json" 3-4 > "$OUT/tl_summary.txt" 2>&1
  sed -n '/attention splits by stages/,/fit over/p' "$OUT/tl_summary.txt"
  rm -f "$OUT/tl.json"
fi
t0=$SECONDS
t=$(left 250)
[ "$t" != 0 ] && MEGASERVE_MK_EXPERIMENTS=attn_pack=0 timeout "$t" build-gpu-ilp/test_gpu --gtest_filter="$MK_TESTS-*nmc_wide3*" > "$OUT/mk_tests_ilp_unpacked.log" 2>&1
echo "== megakernel tests (ILP build, attn_pack=0): exit $? ($((SECONDS - t0)) s)"
grep -E "^\[  (FAILED|PASSED) |Failure|^\[       OK \]" "$OUT/mk_tests_ilp_unpacked.log" | tail -30
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
