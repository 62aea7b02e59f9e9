#!/usr/bin/env bash
# Where the megakernel's warps stall, per source line: Nsight Compute's warp
# state sampling (SourceCounters) of one decode step, the source view (CUDA
# lines with their SASS) as gzipped CSV in $OUT, and the lines with the most
# samples (tools/ncu_lines.py). The device tool returns at most 8 files from
# $OUT: with mk_speed.sh in the same call, tar $OUT into one.
#   OUT=/dir tools/mk_ncu.sh [BATCH] [CONTEXT]        (device machine, repo root)
# Needs build-gpu/megaserve (tools/gpu_build.sh builds it) and ncu on PATH or
# under /usr/local/cuda/bin. Under ncu the clocks are locked to base: the
# split between lines is what this is for, not the step time.
set -uo pipefail
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
B=${1:-1}
C=${2:-8K}
M=build-gpu/megaserve
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$M" ] || { echo "mk_ncu: no $M (build it first)"; exit 1; }
[ -x "$NCU" ] || { echo "mk_ncu: no ncu"; exit 1; }
# Warm-up steps run unprofiled: the fifth megakernel launch is the one sampled.
timeout 400 "$NCU" --section SourceCounters --section WarpStateStats --import-source yes -k regex:megakernel \
  --launch-skip 4 -c 1 -f -o "$OUT/mk" "$M" bench decode --random nmc-full --decode-backend megakernel \
  --batch "$B" --context "$C" --warmup 4 --iters 1 > "$OUT/ncu_run.log" 2>&1
rc=$?
tail -3 "$OUT/ncu_run.log"
[ $rc = 0 ] && [ -f "$OUT/mk.ncu-rep" ] || { echo "mk_ncu: ncu failed ($rc)"; exit 1; }
"$NCU" -i "$OUT/mk.ncu-rep" --page source --csv --print-source cuda,sass > "$OUT/ncu_source_cuda.csv" 2> "$OUT/ncu_export.log"
"$NCU" -i "$OUT/mk.ncu-rep" --page details --csv > "$OUT/ncu_details.csv" 2>> "$OUT/ncu_export.log"
python3 tools/ncu_lines.py "$OUT/ncu_source_cuda.csv" 45 | tee "$OUT/ncu_lines.txt"
gzip -f "$OUT/ncu_source_cuda.csv"
