#!/usr/bin/env bash
# Round 12's last call (docs/megakernel.md, "Round 12 measured"): bs 5 and 7
# at 64K / 128K, the two shapes the new defaults' grid left low (54.5% and
# 57.9% of nominal SoL at 128K against 62-65% at bs 4, 6, 8), with the
# attention on every SM and / or in one wave; then the megakernel tests at
# the defaults (re-apply 6a1bab4, the per-slot down wait's removal, first:
# `git cherry-pick 6a1bab4`).
#   OUT=/dir tools/mk_round12e.sh 2>&1 | tee $OUT/round.txt   (device machine, repo root, .deps carried)
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
bench odd 5,7 64K,128K "default;attn_pct=100,attn_wave=1;attn_wave=1;attn_pct=100;default" 120
t=$(left 250)
[ "$t" = 0 ] && echo "== tests: skipped (the call's time is spent)"
[ "$t" != 0 ] && run_mk_tests "$OUT/mk_tests.log" "$t" ""
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
