#!/usr/bin/env bash
# Prefill A/B on the device machine: builds megaserve (build-gpu, configured
# by tools/gpu_check.sh or here), then `bench prefill --random nmc-full` once
# per variant. A variant is NAME or NAME:VAR=V,VAR=V (environment overrides),
# e.g. base attn_simt:MEGASERVE_ATTN_PREFILL=simt. TOKENS (default 512,2K,8K) and
# ITERS (default 3) apply to all, EXTRA adds bench flags (e.g. --max-step-tokens
# 4096); JSON per variant in $OUT/prefill_NAME.json.
# Usage: OUT=/dir tools/prefill_ab.sh VARIANT...
set -uo pipefail
OUT="${OUT:-$PWD/prefill_ab_out}"
mkdir -p "$OUT"
[ -f build-gpu/build.ninja ] || tools/configure_gpu.sh "$OUT/configure.log"
ninja -C build-gpu -j16 megaserve > "$OUT/build_megaserve.log" 2>&1 || { tail -30 "$OUT/build_megaserve.log"; exit 1; }
for v in "$@"; do
  name="${v%%:*}"
  envs=()
  if [ "$name" != "$v" ]; then IFS=',' read -ra envs <<< "${v#*:}"; fi
  echo "== $name ${envs[*]:-}"
  env "${envs[@]}" timeout "${LIMIT:-200}" build-gpu/megaserve bench prefill --random nmc-full \
    --tokens "${TOKENS:-512,2K,8K}" --iters "${ITERS:-3}" ${PROFILE:+--profile} ${EXTRA:-} --json "$OUT/prefill_$name.json" 2>&1 |
    grep -v "^bench prefill:" | tail -"${TAIL:-8}"
done
