#!/usr/bin/env bash
# GPU serving A/B on the device machine: builds megaserve (build-gpu), then per
# variant serves the demo model with --backend layered and runs `bench serve`
# against it. A variant is NAME:ENV=V,ENV=V:SERVE FLAGS (both parts optional),
# e.g. "wgmma_c512:MEGASERVE_MOE_GEMM=wgmma:--prefill-chunk 512". PROMPTS
# (default 256), CONC (8), IN (128) and OUT_LEN (64) size the run; JSON per
# variant in $OUT/serve_NAME.json. Usage: OUT=/dir tools/serve_ab.sh VARIANT...
set -uo pipefail
OUT="${OUT:-$PWD/serve_ab_out}"
mkdir -p "$OUT"
[ -f build-gpu/build.ninja ] || tools/configure_gpu.sh "$OUT/configure.log"
ninja -C build-gpu -j16 megaserve > "$OUT/build_megaserve.log" 2>&1 || { tail -30 "$OUT/build_megaserve.log"; exit 1; }
M=build-gpu/megaserve
for v in "$@"; do
  IFS=':' read -r name envspec flags <<< "$v"
  envs=()
  [ -n "${envspec:-}" ] && IFS=',' read -ra envs <<< "$envspec"
  # shellcheck disable=SC2086
  env "${envs[@]}" $M serve --model models/north-mini-demo --backend layered --port 8011 ${flags:-} \
    > "$OUT/serve_$name.log" 2>&1 &
  srv=$!
  for _ in $(seq 1 120); do curl -sf localhost:8011/health > /dev/null && break; sleep 0.5; done
  $M bench serve --base-url http://127.0.0.1:8011 --model north-mini-demo --num-prompts "${PROMPTS:-256}" \
    --max-concurrency "${CONC:-8}" --input-len "${IN:-128}" --output-len "${OUT_LEN:-64}" --prompt-kind words \
    --result-json "$OUT/serve_$name.json" 2>&1 | grep -E "Failed|Output token|Median TTFT|P99 TTFT|Median TPOT" |
    tr -s ' ' | tr '\n' ';'
  echo " <- $name"
  kill "$srv"
  wait "$srv" 2> /dev/null
done
