#!/usr/bin/env bash
# The megakernel must not use local memory on its hot paths: compiles
# src/gpu/mk/megakernel.cu for sm_90a with ptxas -v and fails when the kernel
# spills or its stack frame exceeds MAX_FRAME bytes (default 32: sinf/cosf's
# slow-path scratch). A 208-byte frame (the consumer state in local memory)
# cost the kernel a third of its speed once (docs/megakernel.md, round 3).
#   [MK_FLAGS=-D...] tools/check_mk_ptxas.sh [NVCC]   (a ctest on machines with nvcc)
set -uo pipefail
NVCC=${1:-${NVCC:-/usr/local/cuda/bin/nvcc}}
MAX_FRAME=${MAX_FRAME:-32}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$NVCC" -DMEGASERVE_WITH_CUDA=1 -I"$root/src" --expt-relaxed-constexpr -O3 \
  -arch=sm_90a -cubin -std=c++20 ${MK_FLAGS:-} -x cu "$root/src/gpu/mk/megakernel.cu" \
  -o "$out/mk.cubin" -Xptxas -v > "$out/ptxas.log" 2>&1 || { cat "$out/ptxas.log"; exit 1; }
# The kernels' code size (informational; readelf from binutils): round 14
# measured the step 27% slower after a change that added 4% of code that
# did not even run (docs/megakernel.md), so a change's size is worth seeing.
if command -v readelf > /dev/null; then
  readelf -S -W "$out/mk.cubin" 2> /dev/null | awk '$2 ~ /^\.text\..*megakernel/ {print $2, $6}' |
    while read -r name size; do
      echo "megakernel<$(echo "$name" | sed -E 's/.*megakernelILb([01])E.*/\1/')>: $((16#$size / 16)) SASS instructions ($((16#$size / 1024)) KB)"
    done
fi
# Each entry's "Function properties" block (one kernel per attention
# q-fragment layout): "<F> bytes stack frame, <S> bytes spill stores, <L>
# bytes spill loads".
entries=$(grep -c "Function properties for .*megakernel.*Params" "$out/ptxas.log")
[ "$entries" -ge 1 ] || { echo "check_mk_ptxas: no function properties for the megakernel in:"; cat "$out/ptxas.log"; exit 1; }
rc=0
while read -r line; do
  frame=$(echo "$line" | sed -E 's/^ *([0-9]+) bytes stack frame.*/\1/')
  stores=$(echo "$line" | sed -E 's/.* ([0-9]+) bytes spill stores.*/\1/')
  loads=$(echo "$line" | sed -E 's/.* ([0-9]+) bytes spill loads.*/\1/')
  echo "megakernel: ${frame}-byte stack frame, ${stores} / ${loads} bytes of spill stores / loads"
  [ "$stores" = 0 ] && [ "$loads" = 0 ] || { echo "FAIL: the megakernel spills"; rc=1; }
  [ "$frame" -le "$MAX_FRAME" ] || { echo "FAIL: stack frame above $MAX_FRAME bytes"; rc=1; }
done < <(grep -A1 "Function properties for .*megakernel.*Params" "$out/ptxas.log" | grep "stack frame")
# Out-of-line functions allowed: the watchdog's cold report() (sync.cuh).
others=$(grep "Function properties for" "$out/ptxas.log" | grep -v "2mk6reportE" | grep -vc "megakernel.*Params")
echo "$entries kernel(s), $others other function(s)"
# A device function the inliner left out is called with its state in local memory.
[ "$others" = 0 ] || { echo "FAIL: functions not inlined into the kernel:"; grep "Function properties for" "$out/ptxas.log"; rc=1; }
exit $rc
