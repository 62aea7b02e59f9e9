#!/usr/bin/env bash
# Round 11's last device call: the defaults as shipped (round 11's winners,
# the attention on 75% of the SMs but for one row at >= 64K keys, `serve`
# decoding on auto). First the megakernel tests under the shipped defaults
# (the call may be cut short by what is left of the session's device time,
# and they are what the merge needs); then the ablation: each round 11
# setting undone alone (bs 1 and 8 / 8K, one process), so that a setting
# the numbers do not support is deleted, and attn_wave at 128K; then
# serving TPOT per path and the rest of test_gpu while time lasts.
#   OUT=/dir tools/mk_round11d.sh   (device machine, repo root, .deps carried)
# ~350 s: build ~60, tests ~125, ablation ~40, 128K ~15, serve_tpot ~100, the rest.
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
T=build-gpu/test_gpu
M=build-gpu/megaserve
run_mk_tests "$OUT/mk_tests.log" 150
t0=$SECONDS
ablate="default;attn_pct=100,attn_wave=1;async_signal=0;gemv_warps=0;qkv_run=1;gemv_warps=0,qkv_run=1;costs=1;local_route=0;down_slot_wait=0;down_window=0;static_pct=0;attn_pct=100;default"
timeout 120 $M bench decode --random nmc-full --batch 1,8 --context 8K --mk-variants "$ablate" \
  --json "$OUT/bench_ablation.json" 2> "$OUT/bench_ablation.log" | tee "$OUT/bench_ablation_table.txt"
echo "== ablation: $((SECONDS - t0)) s"
# The attention's splits in one wave (attn_wave: rounded down) where the share's waves showed, 128K.
timeout 90 $M bench decode --random nmc-full --batch 2,4,8 --context 128K \
  --mk-variants "default;attn_pct=100,attn_wave=1;attn_wave=1;default" \
  --json "$OUT/bench_wave.json" 2> "$OUT/bench_wave.log" | tee "$OUT/bench_wave_table.txt"
# In a folder of its own: serve_tpot.sh packs and empties its OUT.
OUT=$OUT/serve DECODE_BACKENDS="layered megakernel auto" timeout 200 tools/serve_tpot.sh > "$OUT/serve_tpot_run.log" 2>&1
cp "$OUT/serve/serve_tpot.txt" "$OUT/" 2>/dev/null
cat "$OUT/serve_tpot.txt" 2>/dev/null | head -20
# The rest of the GPU suite (the full-shape and bench cases excluded: their own calls).
t0=$SECONDS
timeout 80 $T --gtest_filter="-*MkVsVm*:Mk*:LayeredFull.*:BenchNmc.*:DummyFullShape.*" > "$OUT/rest_tests.log" 2>&1
echo "== the rest of test_gpu: exit $? ($((SECONDS - t0)) s)"
grep -E "^\[  (FAILED|PASSED) |Failure|tests ran" "$OUT/rest_tests.log" | head -20
(cd "$OUT" && tar czf round11d.tgz $(ls | grep -v '^round11d.tgz$') &&
  ls | grep -vE '^(round11d.tgz|bench_ablation.json|bench_ablation_table.txt|bench_wave_table.txt|serve_tpot.txt|mk_tests.log|rest_tests.log)$' | xargs rm -rf)
