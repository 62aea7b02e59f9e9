// "Wide" decode GEMVs for one activation row: every 16-byte weight load of a
// warp's rows is issued before any is used, so the whole matrix is in flight
// across the grid at once. Measured on the H200 (Nsight Compute, revision
// 6dc1fe9): the pipelined row kernels reached only 32-43% of DRAM bandwidth
// with 112 registers at 25% occupancy, stalled on load latency (~2 loads in
// flight per lane); these hold 8-16 per lane at 2-4 blocks per SM.
// Used when K (or the hidden size for MoE gate/up, the expert width for MoE
// down) is 256 * C with C in {3, 4, 8, 12, 16}; MEGASERVE_GEMV_WIDE=0 turns
// them off (debugging / A-B timing).
#pragma once

#include <cuda_runtime.h>

#include "core/status.h"
#include "gpu/ops/moe.h"

namespace ms::gpu {

bool gemv_wide_enabled();
// Whether a K qualifies (256 * C, C in the supported set).
bool gemv_wide_supports(int K);

// y (N) = alpha * w (N, K) . x (K) [+ bias]; x bf16 16-byte aligned, y fp32.
Status launch_gemv_wide(const void* x, const void* w, const float* bias, float alpha, float* y, int N, int K,
                        cudaStream_t stream);

// MoE expert gate/up + SwiGLU for routed experts (any member count; fast for
// one token): act (T*K, I) bf16 as launch_moe_gate_up.
Status launch_moe_gate_up_wide(const void* h, const void* gate_up, int H, int I, int K, const MoePlan& plan,
                               int max_active, void* act, cudaStream_t stream);
// MoE expert down projection times the routing weight: ybuf (T*K, H) fp32 as launch_moe_down.
Status launch_moe_down_wide(const void* act, const void* down, const float* weights, int H, int I,
                            const MoePlan& plan, int max_active, float* ybuf, cudaStream_t stream);

}  // namespace ms::gpu
