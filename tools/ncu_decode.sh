#!/usr/bin/env bash
# Nsight Compute on the hot decode kernels of the full NMC shape (bs 1, 8K):
# the first matching kernel launches (layer 0 = full attention, layer 1 =
# sliding), sections that say whether each is bandwidth-, latency- or
# occupancy-bound. On the device machine: OUT=/dir tools/ncu_decode.sh
set -uo pipefail
OUT="${OUT:-$PWD/ncu_out}"
mkdir -p "$OUT"
[ -d .deps/lib ] && export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
extra=()
[ -d .deps ] && extra+=(-DCMAKE_PREFIX_PATH="$PWD/.deps")
cmake -S . -B build-gpu -G Ninja -DMEGASERVE_CUDA=ON "${extra[@]}" > "$OUT/configure.log" 2>&1
ninja -C build-gpu -j16 megaserve > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
"$NCU" --graph-profiling node -k regex:"${NCU_KERNELS:-paged_attention_decode|moe_gate_up|moe_down|gemv|moe_route|moe_router|add_norm|rope_kv}" \
  -c 16 --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
  --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables \
  build-gpu/megaserve bench decode --random nmc-full --batch 1 --context 8K --iters 1 --warmup 0 > "$OUT/ncu.txt" 2>&1
echo "ncu exit: $?"
grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|Waves Per SM|Stall|One or More|Theoretical Occ" "$OUT/ncu.txt" | head -150
