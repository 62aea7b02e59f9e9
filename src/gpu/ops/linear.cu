#include "gpu/ops/linear.h"

#include "gpu/common/cuda_check.h"
#include "gpu/ops/elementwise.h"
#include "gpu/ops/gemv_core.cuh"

namespace ms::gpu {

constexpr int kGemvWarps = 8;  // output columns per block

// Grid: ceil(N / 8) blocks of 8 warps; warp w of block b owns column n = 8b + w.
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const bf16* __restrict__ x, int ldx,
                                                               const bf16* __restrict__ w,
                                                               const float* __restrict__ bias, float alpha,
                                                               float* __restrict__ y, int ldy, int R, int N, int K) {
  const int n = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  if (n >= N) return;
  const bf16* xr[kGemvMaxRows];
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) xr[r] = x + int64_t(r < R ? r : 0) * ldx;
  float acc[kGemvMaxRows];
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) acc[r] = 0.f;
  warp_dot_rows(w + int64_t(n) * K, xr, R, K, acc);
  const float b = bias ? bias[n] : 0.f;
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) {
    const float s = warp_sum(acc[r]);
    if (r < R && (threadIdx.x & 31) == 0) y[int64_t(r) * ldy + n] = alpha * s + b;
  }
}

Status launch_gemv(const void* x, int ldx, const void* w, const float* bias, float alpha, float* y, int ldy, int R,
                   int N, int K, cudaStream_t stream) {
  if (R <= 0 || N <= 0) return Status::ok();
  if (R > kGemvMaxRows) return invalid_argument("launch_gemv: more than 8 rows");
  if (K % 8 != 0 || ldx % 8 != 0) return invalid_argument("launch_gemv: K and ldx must be multiples of 8");
  gemv_kernel<<<(N + kGemvWarps - 1) / kGemvWarps, kGemvWarps * 32, 0, stream>>>(
      static_cast<const bf16*>(x), ldx, static_cast<const bf16*>(w), bias, alpha, y, ldy, R, N, K);
  MS_CUDA_LAUNCH_CHECK("gemv_kernel");
  return Status::ok();
}

// Grid (ceil(N / 8), R): warp owns column n of row blockIdx.y; plain loads.
__global__ void gemv_f32x_kernel(const float* __restrict__ x, const bf16* __restrict__ w, float* __restrict__ y,
                                 int N, int K) {
  const int n = blockIdx.x * kGemvWarps + (threadIdx.x >> 5), r = blockIdx.y, lane = threadIdx.x & 31;
  if (n >= N) return;
  const float* xr = x + int64_t(r) * K;
  const bf16* wr = w + int64_t(n) * K;
  float acc = 0.f;
  for (int k = lane; k < K; k += 32) acc = fmaf(__bfloat162float(wr[k]), xr[k], acc);
  acc = warp_sum(acc);
  if (lane == 0) y[int64_t(r) * N + n] = acc;
}

Status launch_gemv_f32x(const float* x, const void* w, float* y, int R, int N, int K, cudaStream_t stream) {
  if (R <= 0 || N <= 0) return Status::ok();
  if (R > 65535) return invalid_argument("launch_gemv_f32x: too many rows");
  gemv_f32x_kernel<<<dim3((N + kGemvWarps - 1) / kGemvWarps, R), kGemvWarps * 32, 0, stream>>>(
      x, static_cast<const bf16*>(w), y, N, K);
  MS_CUDA_LAUNCH_CHECK("gemv_f32x_kernel");
  return Status::ok();
}

Status launch_gemm(cublasHandle_t handle, const void* x, int ldx, const void* w, const float* bias, float alpha,
                   float* y, int ldy, int R, int N, int K, cudaStream_t stream) {
  if (R <= 0 || N <= 0) return Status::ok();
  MS_CUBLAS_RETURN(cublasSetStream(handle, stream));
  // Row-major y (R, N) is column-major y^T (N, R): y^T = W (N, K) . x^T (K, R),
  // where row-major W is column-major (K, N) (op T) and row-major x is
  // column-major (K, R) (op N).
  const float beta = 0.f;
  MS_CUBLAS_RETURN(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, R, K, &alpha, w, CUDA_R_16BF, K, x, CUDA_R_16BF,
                                ldx, &beta, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bias) MS_RETURN_IF_ERROR(launch_add_bias(y, ldy, bias, R, N, stream));
  return Status::ok();
}

}  // namespace ms::gpu
