#include "gpu/ops/elementwise.h"

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"

namespace ms::gpu {

__global__ void embedding_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ ids, int H,
                                 float* __restrict__ x) {
  const int t = blockIdx.x;
  const bf16* row = table + int64_t(ids[t]) * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) x[int64_t(t) * H + i] = __bfloat162float(row[i]);
}

Status launch_embedding(const void* table, const int32_t* ids, int T, int H, float* x, cudaStream_t stream) {
  if (T == 0) return Status::ok();
  embedding_kernel<<<T, 256, 0, stream>>>(static_cast<const bf16*>(table), ids, H, x);
  MS_CUDA_LAUNCH_CHECK("embedding_kernel");
  return Status::ok();
}

// One block per row. Pass 1 applies the residual adds (same order as the CPU
// reference: (x + add0) + add1) and accumulates the statistics; pass 2
// re-reads the row (own writes, same thread) and normalises.
__global__ void add_norm_kernel(float* __restrict__ x, const float* __restrict__ add0,
                                const float* __restrict__ add1, const int32_t* __restrict__ in_rows,
                                const float* __restrict__ w, int layer_norm, float eps, int H,
                                bf16* __restrict__ out, float* __restrict__ out_f32, MoeSum moe) {
  __shared__ float red[32];
  const int r = blockIdx.x;
  const int64_t in_row = in_rows ? in_rows[r] : r;
  float* xr = x + in_row * H;
  float s = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    float v = xr[i];
    if (add0) v = v + add0[in_row * H + i];
    if (moe.ysel) {  // as moe_combine_kernel
      float o = 0.f;
      for (int k = 0; k < moe.K; ++k) o += moe.ysel[(in_row * moe.K + k) * H + i];
      if (moe.shared) {
        const float y = moe.shared[in_row * H + i];
        o = moe.shared_sum ? o + y : (o + y) / 2;
      }
      v = v + o;
    } else if (add1) {
      v = v + add1[in_row * H + i];
    }
    if (add0 || add1 || moe.ysel) xr[i] = v;
    s += layer_norm ? v : v * v;
  }
  s = block_sum(s, red);
  float mean = 0.f, rstd;
  if (layer_norm) {
    mean = s / float(H);
    float var = 0.f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) var += (xr[i] - mean) * (xr[i] - mean);
    var = block_sum(var, red);
    rstd = 1.0f / sqrtf(var / float(H) + eps);
  } else {
    rstd = 1.0f / sqrtf(s / float(H) + eps);
  }
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float y = w[i] * ((xr[i] - mean) * rstd);
    out[int64_t(r) * H + i] = __float2bfloat16_rn(y);
    if (out_f32) out_f32[int64_t(r) * H + i] = y;
  }
}

Status launch_add_norm(float* x, const float* add0, const float* add1, const int32_t* in_rows, const float* w,
                       NormKind kind, float eps, int R, int H, void* out, float* out_f32, cudaStream_t stream,
                       const MoeSum& moe) {
  if (R == 0) return Status::ok();
  if (moe.ysel && (add1 || moe.K <= 0)) return invalid_argument("add_norm: a deferred MoE sum needs add1 null, K > 0");
  add_norm_kernel<<<R, 256, 0, stream>>>(x, add0, add1, in_rows, w, kind == NormKind::kLayer ? 1 : 0, eps, H,
                                         static_cast<bf16*>(out), out_f32, moe);
  MS_CUDA_LAUNCH_CHECK("add_norm_kernel");
  return Status::ok();
}

__global__ void swiglu_kernel(const float* __restrict__ gu, int ld_gu, int F, bf16* __restrict__ out) {
  const int t = blockIdx.x;
  const float* row = gu + int64_t(t) * ld_gu;
  for (int i = threadIdx.x; i < F; i += blockDim.x) {
    const float g = row[i], u = row[F + i];
    out[int64_t(t) * F + i] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
  }
}

Status launch_swiglu(const float* gu, int ld_gu, int T, int F, void* out, cudaStream_t stream) {
  if (T == 0) return Status::ok();
  swiglu_kernel<<<T, 256, 0, stream>>>(gu, ld_gu, F, static_cast<bf16*>(out));
  MS_CUDA_LAUNCH_CHECK("swiglu_kernel");
  return Status::ok();
}

__global__ void add_bias_kernel(float* __restrict__ y, int ld, const float* __restrict__ bias, int N) {
  const int t = blockIdx.x;
  for (int i = threadIdx.x; i < N; i += blockDim.x) y[int64_t(t) * ld + i] += bias[i];
}

Status launch_add_bias(float* y, int ld, const float* bias, int T, int N, cudaStream_t stream) {
  if (T == 0) return Status::ok();
  add_bias_kernel<<<T, 256, 0, stream>>>(y, ld, bias, N);
  MS_CUDA_LAUNCH_CHECK("add_bias_kernel");
  return Status::ok();
}

}  // namespace ms::gpu
