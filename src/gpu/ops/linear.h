// Linear layers y = alpha * x @ W^T (+ bias) with bf16 weights and
// activations, fp32 accumulation and fp32 output:
//  - launch_gemv: decode, 1..8 activation rows, weights streamed once at
//    close to HBM bandwidth (one warp per output column, see gemv_core.cuh);
//  - launch_gemm: prefill (more than 8 rows), cuBLAS bf16 tensor-core GEMM;
//  - launch_linear: picks one by the row count.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/status.h"

namespace ms::gpu {

// x (R, ldx) bf16, w (N, K) bf16, bias (N) fp32 or null, y (R, ldy) fp32.
// R <= 8, K % 8 == 0, ldx % 8 == 0, x and w 16-byte aligned.
Status launch_gemv(const void* x, int ldx, const void* w, const float* bias, float alpha, float* y, int ldy, int R,
                   int N, int K, cudaStream_t stream);

// Same contract for any R, through cuBLAS (the handle's stream is set here).
Status launch_gemm(cublasHandle_t handle, const void* x, int ldx, const void* w, const float* bias, float alpha,
                   float* y, int ldy, int R, int N, int K, cudaStream_t stream);

// Small fp32-activation matmul (the MoE router, which must see the unrounded
// normed input): x (R, K) fp32, w (N, K) bf16, y (R, N) fp32. Any R.
Status launch_gemv_f32x(const float* x, const void* w, float* y, int R, int N, int K, cudaStream_t stream);

// The router of prefill sub-steps: x (R, K) fp32, w (N, K) fp32 (the router
// weights widened from bf16, exactly), y (R, N) fp32, through cuBLAS in
// strict fp32 (CUBLAS_COMPUTE_32F_PEDANTIC: no TF32). launch_gemv_f32x takes
// ~8.7 ms per 2K-token NMC sub-step (it re-reads the weights per row).
Status launch_gemm_f32(cublasHandle_t handle, const float* x, const float* w, float* y, int R, int N, int K,
                       cudaStream_t stream);

inline Status launch_linear(cublasHandle_t handle, const void* x, int ldx, const void* w, const float* bias,
                            float alpha, float* y, int ldy, int R, int N, int K, cudaStream_t stream) {
  if (R <= 8) return launch_gemv(x, ldx, w, bias, alpha, y, ldy, R, N, K, stream);
  return launch_gemm(handle, x, ldx, w, bias, alpha, y, ldy, R, N, K, stream);
}

}  // namespace ms::gpu
