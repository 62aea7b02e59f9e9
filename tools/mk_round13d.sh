#!/usr/bin/env bash
# Round 13, third call: the revision that removes the ILP flag and widens
# qwen3_moe_group16's bound under every GPU test (the megakernel's first,
# then the rest), one bs 1 / 8K timeline at the defaults (summary; layers
# 1-3 kept), the attention ablations at 128K, and bs 1 / 8K in three processes of one binary (the spread
# between processes that round 12 and 13 saw, ~3-5%, against one process's
# repeats).
#   OUT=/dir tools/mk_round13d.sh 2>&1 | tee $OUT/round.txt   (device machine, repo root, .deps carried)
set -uo pipefail
source tools/gpu_build.sh megaserve test_gpu || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
run_mk_tests "$OUT/mk_tests.log" "$(left 220)"
# The stage without its math on the H200 at 128K (the H100 measured it at
# 64K, where 8 rows were the card's bandwidth): a stage of bs 8 / 128K's
# full layers took 1.21 us with its data in the ring (round 13b's timeline).
t=$(left 80)
[ "$t" != 0 ] && timeout "$t" build-gpu/megaserve bench decode --random nmc-full --batch 1,8 --context 128K \
  --mk-variants "default;attn_ablate=1;attn_ablate=2;attn_ablate=3" --json "$OUT/bench_ablate.json" 2> "$OUT/bench_ablate.log" | grep -v "^$"
# The down loop at 8 rows (22 GB/s an SM against gate/up's 30 in the bs 8 /
# 128K timeline): longer claim runs of one slot (fewer member-row stagings
# a loop) and gate/up's for comparison.
t=$(left 45)
[ "$t" != 0 ] && timeout "$t" build-gpu/megaserve bench decode --random nmc-full --batch 8 --context 8K \
  --mk-variants "default;down_batch=16;down_batch=32;gu_batch=8" --json "$OUT/bench_runs.json" 2> "$OUT/bench_runs.log" | grep -v "^$"
t=$(left 45)
if [ "$t" != 0 ]; then
  timeout "$t" build-gpu/megaserve bench decode --random nmc-full --batch 1 --context 8K --decode-backend megakernel \
    --timeline "$OUT/tl.json" > /dev/null 2> "$OUT/tl.log"
  echo "== timeline: exit $?"
  python3 tools/plot_timeline.py --summary "$OUT/tl.json" 1-3 > "$OUT/tl_summary.txt" 2>&1
  python3 tools/plot_timeline.py --extract "$OUT/tl.json" "$OUT/tl_l1-3.json.gz" 1-3
  rm -f "$OUT/tl.json"
  sed -n '/attention splits by stages/,/fit over/p' "$OUT/tl_summary.txt"
fi
for i in 1 2; do
  t=$(left 30)
  [ "$t" = 0 ] && break
  timeout "$t" build-gpu/megaserve bench decode --random nmc-full --batch 1 --context 8K --decode-backend megakernel \
    --json "$OUT/spread_$i.json" 2> "$OUT/spread_$i.log" | grep -E "megakernel"
done
t=$(left 400)
if [ "$t" != 0 ]; then
  timeout "$t" build-gpu/test_gpu --gtest_filter="-$MK_TESTS" > "$OUT/gpu_tests_rest.log" 2>&1
  echo "== the other GPU tests: exit $?"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|tests ran" "$OUT/gpu_tests_rest.log" | head -20
fi
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
