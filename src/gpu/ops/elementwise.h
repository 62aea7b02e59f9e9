// Small row-wise ops of the layered backend: embedding gather, residual add +
// RMSNorm / LayerNorm, SwiGLU, bias add. One kernel each, one block per row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"
#include "model/config.h"

namespace ms::gpu {

// x (T, H) fp32 = table (V, H) bf16 rows ids (T) int32.
Status launch_embedding(const void* table, const int32_t* ids, int T, int H, float* x, cudaStream_t stream);

// A deferred MoE combine folded into the next add_norm (one launch fewer per
// MoE layer): add1 := sum_k ysel[in_row * K + k] in k order, then the shared
// expert's row added (shared_sum) or averaged in, exactly launch_moe_combine's
// arithmetic, so the result is bit-identical to combine then add_norm.
struct MoeSum {
  const float* ysel = nullptr;    // (rows * K, H) fp32; null: no deferred combine
  int K = 0;
  const float* shared = nullptr;  // (rows, H) fp32 or null
  bool shared_sum = true;
};

// For each output row r (R rows): in = x row (in_rows ? in_rows[r] : r);
// if add0/add1: in = (in + add0) + add1, written back to x (residual update);
// out (R, H) bf16 = norm(in) * w, norm per `kind` (RMS or mean-centred LayerNorm, no bias);
// out_f32 (R, H) fp32: the same values unrounded (may be null).
// x, add0, add1: (., H) fp32; w: (H) fp32. moe.ysel set: it takes add1's
// place (add1 must be null).
Status launch_add_norm(float* x, const float* add0, const float* add1, const int32_t* in_rows, const float* w,
                       NormKind kind, float eps, int R, int H, void* out, float* out_f32, cudaStream_t stream,
                       const MoeSum& moe = {});

// out (T, F) bf16 = silu(gate) * up, where gu (T, ld_gu) fp32 holds gate in
// columns [0, F) and up in [F, 2F).
Status launch_swiglu(const float* gu, int ld_gu, int T, int F, void* out, cudaStream_t stream);

// out (n) fp32 = in (n) bf16, exactly.
Status launch_bf16_to_f32(const void* in, size_t n, float* out, cudaStream_t stream);

// y (T, ld) fp32 columns [0, N) += bias (N) fp32.
Status launch_add_bias(float* y, int ld, const float* bias, int T, int N, cudaStream_t stream);

}  // namespace ms::gpu
