#!/usr/bin/env bash
# Round 13, second call: the packed kernel with its second pair of score
# accumulators (the default at NMC's G = 8 since this call's revision)
# against the unpacked one (attn_pack=0) and the stage loop without its
# math (attn_ablate=3, timing only), one process a point, bs 1 and 8 x 8K
# and LONG (128K; 64K on a card of less than 100 GB); then the megakernel
# tests but the two largest minis (wide3: ~110 s).
#   BUDGET=200 OUT=/dir tools/mk_round13b.sh 2>&1 | tee $OUT/round.txt   (device machine, repo root, .deps carried)
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
L=${LONG:-$([ "${mem:-0}" -ge 100000 ] && echo 128K || echo 64K)}
bench pack 1,8 "8K,$L" "default;attn_pack=0;attn_ablate=3;default;attn_pack=0" 90
t=$(left 150)
[ "$t" = 0 ] && echo "== tests: skipped (the call's time is spent)"
[ "$t" != 0 ] && run_mk_tests "$OUT/mk_tests.log" "$t" "-*nmc_wide3*"
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
