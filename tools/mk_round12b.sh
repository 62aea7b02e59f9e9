#!/usr/bin/env bash
# The short form of tools/mk_round12.sh, for a call with ~6 minutes of device
# time: the signal warp and the per-slot down wait both off under the
# megakernel tests (the 3-layer cases included), each undone alone and both
# against the shipped defaults at bs 1 / 8 x 8K, and the one-wave attention
# splits at 2 / 4 rows on the longest context the card holds.
#   OUT=/dir tools/mk_round12b.sh   (device machine, repo root, .deps carried)
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
M=build-gpu/megaserve
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
long=128K
[ "${mem_mib:-0}" -lt 100000 ] && long=32K
MEGASERVE_MK_EXPERIMENTS=async_signal=0,down_slot_wait=0 \
  run_mk_tests "$OUT/mk_tests_new.log" 240 ":-MkDeterminism.*:MkTimeline.*:MkTuningSpec.*"
rc=$?
[ $rc = 0 ] || echo "== TESTS FAILED under async_signal=0,down_slot_wait=0: its numbers are not for adopting it"
t0=$SECONDS
timeout 150 $M bench decode --random nmc-full --batch 1,8 --context 8K \
  --mk-variants "default;async_signal=0;down_slot_wait=0;async_signal=0,down_slot_wait=0;default" \
  --json "$OUT/bench_knobs.json" 2> "$OUT/bench_knobs.log"
echo "== bench: $((SECONDS - t0)) s"
t0=$SECONDS
timeout 120 $M bench decode --random nmc-full --batch 2,4 --context $long \
  --mk-variants "default;attn_wave=1;attn_pct=100,attn_wave=1" \
  --json "$OUT/bench_wave.json" 2> "$OUT/bench_wave.log"
echo "== bench: $((SECONDS - t0)) s"
