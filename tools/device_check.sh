#!/usr/bin/env bash
# Everything the H200 run checks, in one call (device time is scarce):
#   1. tools/gpu_check.sh: builds test_gpu, runs every GPU test (ops vs CPU
#      references, whole model vs HF goldens / bf16-emulating CPU reference,
#      demo model vs HF), then the NMC bench with a per-op profile;
#   2. builds megaserve and runs `bench decode` on the full NMC shape over
#      batch 1,2,4,8 x context 1K,8K,32K and batch 1 at 128K (DC_DECODE_GRID=0
#      skips it), and `bench prefill` (512 .. 32K prompt tokens) on the
#      default path with a per-op profile, then the other prefill paths;
#   3. serves the demo model on the GPU (--backend layered): a tool call, a
#      streamed chat, and `bench serve` against it.
# Usage on the device machine, from the repo root: OUT=/dir tools/device_check.sh
# (.deps/ holds cpp-httplib and pcre2 for the build; see README).
set -uo pipefail
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
[ -d .deps/lib ] && export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
OUT="$OUT" tools/gpu_check.sh > "$OUT/gpu_check.log" 2>&1
echo "gpu_check exit code: $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests from .* ran|demo |bf16-emulated ref worst|first routing" "$OUT/gpu_check.log" | head -60
grep -A25 "batch context" "$OUT/gpu_check.log" | head -40

ninja -C build-gpu -j16 megaserve > "$OUT/build_megaserve.log" 2>&1 || { tail -30 "$OUT/build_megaserve.log"; exit 1; }
M=build-gpu/megaserve
if [ "${DC_DECODE_GRID:-1}" = 1 ]; then
  $M bench decode --random nmc-full --batch 1,2,4,8 --context 1K,8K,32K --json "$OUT/bench_grid.json" 2>&1 | tail -15
  $M bench decode --random nmc-full --batch 1 --context 128K --json "$OUT/bench_128k.json" 2>&1 | tail -4
fi
# Prefill (time to first token of one prompt), each bounded. The default path (grouped tensor-core expert
# GEMMs, tensor-core prefill attention) with a per-op profile of the first sub-step; then the CUDA-core
# prefill attention for comparison. (The CUDA-core expert kernels: ~11 s per 8K
# prompt, measured at 334883d; run with DC_PREFILL_KERNEL=1.)
timeout 200 $M bench prefill --random nmc-full --tokens 512,2K,8K,32K --iters 3 --profile \
  --json "$OUT/bench_prefill.json" 2>&1 | tail -60
MEGASERVE_ATTN_PREFILL=simt timeout 100 $M bench prefill --random nmc-full --tokens 2K,8K --iters 2 \
  --json "$OUT/bench_prefill_attn_simt.json" 2>&1 | tail -4
# The prefill attention with Q K^T on wgmma (opt-in until measured).
MEGASERVE_ATTN_PREFILL=wgmma timeout 100 $M bench prefill --random nmc-full --tokens 2K,8K,32K --iters 3 \
  --json "$OUT/bench_prefill_attn_wgmma.json" 2>&1 | tail -5
if [ "${DC_PREFILL_KERNEL:-0}" = 1 ]; then
  MEGASERVE_MOE_PREFILL=kernel timeout 150 $M bench prefill --random nmc-full --tokens 512,2K,8K --iters 2 \
    --json "$OUT/bench_prefill_kernel.json" 2>&1 | tail -5
fi

$M serve --model models/north-mini-demo --backend layered --port 8011 > "$OUT/serve.log" 2>&1 &
srv=$!
for i in $(seq 1 60); do curl -sf localhost:8011/health >/dev/null && break; sleep 1; done
curl -s localhost:8011/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":"north-mini-demo","messages":[{"role":"user","content":"What is 37 * 41?"}],"tools":[{"type":"function","function":{"name":"calculator","description":"Evaluate an arithmetic expression and return the result.","parameters":{"type":"object","properties":{"expression":{"type":"string","description":"for example 12 * 7"}},"required":["expression"]}}}]}' | tee "$OUT/serve_tool_call.json"
echo
curl -sN localhost:8011/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":"north-mini-demo","messages":[{"role":"user","content":"Who are you?"}],"stream":true,"stream_options":{"include_usage":true}}' | tail -4
$M bench serve --base-url http://127.0.0.1:8011 --model north-mini-demo --num-prompts 64 --max-concurrency 8 \
  --input-len 128 --output-len 64 --prompt-kind words --result-json "$OUT/serve_bench.json" 2>&1 | tail -24
curl -s localhost:8011/metrics | grep -E "^megaserve_(kv_blocks|num_|prefix_cache_hit_rate|healthy)" | head
kill $srv; wait $srv 2>/dev/null
tail -3 "$OUT/serve.log"
