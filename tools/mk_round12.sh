#!/usr/bin/env bash
# Round 12's first device call (docs/megakernel.md, "Round 11 measured" and
# "Where a bs 1 layer goes now"): the two settings call 4's ablation did not
# support (the signal warp: +0.2% when undone; the per-slot down wait: -1.0%
# when undone at bs 1) checked off under the tests, then timed with the
# one-wave attention splits over batches 1-8 at 8K and 128K, and the shipped
# defaults' bs 1 / 8K timeline.
#   OUT=/dir tools/mk_round12.sh   (device machine, repo root, .deps carried)
# ~420 s: build ~60, tests ~150, one check ~60, 7 variants x 8 points ~90,
# the timeline ~20.
set -uo pipefail
# The H100's ~80 GB holds the 61 GB of weights with 8 rows of 128K keys
# (~27 GB of full-attention KV) only on the H200: there the long point is 32K.
mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
long=128K
[ "${mem_mib:-0}" -lt 100000 ] && long=32K
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "== contexts 8K,$long"
variants="default;async_signal=0;down_slot_wait=0;async_signal=0,down_slot_wait=0;attn_pct=100,attn_wave=1;attn_wave=1;default"
MK_BATCHES=1,2,4,8 MK_CONTEXTS=8K,$long MK_CHECK="async_signal=0,down_slot_wait=0" MK_VARIANTS="$variants" \
  MK_TIMELINE=default tools/mk_speed.sh
