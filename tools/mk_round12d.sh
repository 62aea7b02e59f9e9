#!/usr/bin/env bash
# Round 12's third device call (docs/megakernel.md, "Round 12"): the two
# settings round 12b left standing, over the grid before adopting them by
# shape: the attention on every SM in one wave of splits
# (attn_pct=100,attn_wave=1: bs 2 / 4 x 128K -4.0 / -5.5% in 12b) and no
# per-slot wait in the down loop (down_slot_wait=0: bs 1 / 8K -1.1% in 12b,
# -1.0% in round 11's ablation); the megakernel tests under both.
#   OUT=/dir tools/mk_round12d.sh 2>&1 | tee $OUT/round.txt   (device machine, repo root, .deps carried)
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
M=build-gpu/megaserve
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
bench long 1,2,3,4,6,8 32K,64K,128K "default;attn_pct=100,attn_wave=1;down_slot_wait=0;default" 200
bench short 1,2,4,8 1K,8K "default;down_slot_wait=0;attn_pct=100,attn_wave=1;default" 80
new="attn_pct=100,attn_wave=1,down_slot_wait=0"
t=$(left 250)
[ "$t" = 0 ] && echo "== tests: skipped (the call's time is spent)"
[ "$t" != 0 ] && { MEGASERVE_MK_EXPERIMENTS=$new run_mk_tests "$OUT/mk_tests_new.log" "$t" ":-MkTuningSpec.*" \
  || echo "== TESTS FAILED under $new"; }
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
