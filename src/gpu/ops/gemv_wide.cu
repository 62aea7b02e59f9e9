#include "gpu/ops/gemv_wide.h"

#include <cstdlib>
#include <cstring>

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"
#include "gpu/ops/gemv_core.cuh"

namespace ms::gpu {

namespace {

constexpr int kWarps = 8;  // per block

// Dot of C 16-byte chunks (lane-strided: chunk c covers elements 256 c + 8 lane ..)
// of a weight row already in registers with the same chunks of x.
template <int C>
__device__ __forceinline__ float dot_chunks(const uint4 (&wv)[C], const bf16* __restrict__ x, int lane) {
  float acc = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    float wf[8], xf[8];
    bf16x8_to_f32(wv[c], wf);
    bf16x8_to_f32(*reinterpret_cast<const uint4*>(x + c * 256 + lane * 8), xf);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = fmaf(wf[i], xf[i], acc);
  }
  return acc;
}

// Grid ceil(N / 8): a warp per output column; x staged in shared memory after
// the weight loads are issued (the loads do not depend on it).
template <int C>
__global__ void __launch_bounds__(kWarps * 32) gemv_wide_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                                const float* __restrict__ bias, float alpha,
                                                                float* __restrict__ y, int N) {
  constexpr int K = 256 * C;
  __shared__ __align__(16) bf16 xs[K];
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  uint4 wv[C];
  if (n < N) {
    const bf16* wr = w + int64_t(n) * K + lane * 8;
#pragma unroll
    for (int c = 0; c < C; ++c) wv[c] = ld_weight(wr + c * 256);
  }
  for (int i = threadIdx.x; i < K / 8; i += kWarps * 32)
    reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(x)[i];
  __syncthreads();
  if (n >= N) return;
  const float s = warp_sum(dot_chunks<C>(wv, xs, lane));
  if (lane == 0) y[n] = alpha * s + (bias ? bias[n] : 0.f);
}

// Grid (ceil(I / 8), max_active): block (y, u) serves routed expert u; a warp
// owns intermediate column i and issues gate row i and up row i (2 C loads per
// lane) before reading the plan's members; each member's h row is read
// through the caches (one member per expert for one token).
template <int C>
__global__ void __launch_bounds__(kWarps * 32) moe_gate_up_wide_kernel(const bf16* __restrict__ h,
                                                                       const bf16* __restrict__ gate_up, int I, int K,
                                                                       MoePlan plan, bf16* __restrict__ act) {
  constexpr int H = 256 * C;
  const int u = blockIdx.y, lane = threadIdx.x & 31;
  const int i = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (u >= *plan.n_active || i >= I) return;
  const int e = plan.active[u];
  uint4 g[C], up[C];
  const bf16* wg = gate_up + (int64_t(e) * 2 * I + i) * H + lane * 8;
  const bf16* wu = wg + int64_t(I) * H;
#pragma unroll
  for (int c = 0; c < C; ++c) g[c] = ld_weight(wg + c * 256);
#pragma unroll
  for (int c = 0; c < C; ++c) up[c] = ld_weight(wu + c * 256);
  const int off = plan.offset[u], cnt = plan.count[u];
  for (int m = 0; m < cnt; ++m) {
    const int sel = plan.members[off + m];
    const bf16* xr = h + int64_t(sel / K) * H;
    const float gs = warp_sum(dot_chunks<C>(g, xr, lane));
    const float us = warp_sum(dot_chunks<C>(up, xr, lane));
    if (lane == 0) act[int64_t(sel) * I + i] = __float2bfloat16_rn(gs / (1.0f + expf(-gs)) * us);
  }
}

// Grid (ceil(H / (8 R)), max_active): a warp owns R consecutive output
// columns n of routed expert u (R C loads per lane in flight).
template <int C, int R>
__global__ void __launch_bounds__(kWarps * 32) moe_down_wide_kernel(const bf16* __restrict__ act,
                                                                    const bf16* __restrict__ down,
                                                                    const float* __restrict__ weights, int H,
                                                                    MoePlan plan, float* __restrict__ ybuf) {
  constexpr int I = 256 * C;
  const int u = blockIdx.y, lane = threadIdx.x & 31;
  const int n0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * R;
  if (u >= *plan.n_active || n0 >= H) return;
  const int e = plan.active[u];
  uint4 wv[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const bf16* wr = down + (int64_t(e) * H + min(n0 + r, H - 1)) * I + lane * 8;  // clamped rows unused
#pragma unroll
    for (int c = 0; c < C; ++c) wv[r][c] = ld_weight(wr + c * 256);
  }
  const int off = plan.offset[u], cnt = plan.count[u];
  for (int m = 0; m < cnt; ++m) {
    const int sel = plan.members[off + m];
    const bf16* ar = act + int64_t(sel) * I;
    const float wsel = weights[sel];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float s = warp_sum(dot_chunks<C>(wv[r], ar, lane));
      if (lane == 0 && n0 + r < H) ybuf[int64_t(sel) * H + n0 + r] = wsel * s;
    }
  }
}

int chunks_of(int K) { return K % 256 == 0 ? K / 256 : 0; }

}  // namespace

bool gemv_wide_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MEGASERVE_GEMV_WIDE");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

bool gemv_wide_supports(int K) {
  switch (chunks_of(K)) {
    case 3: case 4: case 8: case 12: case 16: return true;
    default: return false;
  }
}

Status launch_gemv_wide(const void* x, const void* w, const float* bias, float alpha, float* y, int N, int K,
                        cudaStream_t stream) {
  if (N <= 0) return Status::ok();
  const dim3 grid((N + kWarps - 1) / kWarps);
  const bf16* xb = static_cast<const bf16*>(x);
  const bf16* wb = static_cast<const bf16*>(w);
  switch (chunks_of(K)) {
    case 3: gemv_wide_kernel<3><<<grid, kWarps * 32, 0, stream>>>(xb, wb, bias, alpha, y, N); break;
    case 4: gemv_wide_kernel<4><<<grid, kWarps * 32, 0, stream>>>(xb, wb, bias, alpha, y, N); break;
    case 8: gemv_wide_kernel<8><<<grid, kWarps * 32, 0, stream>>>(xb, wb, bias, alpha, y, N); break;
    case 12: gemv_wide_kernel<12><<<grid, kWarps * 32, 0, stream>>>(xb, wb, bias, alpha, y, N); break;
    case 16: gemv_wide_kernel<16><<<grid, kWarps * 32, 0, stream>>>(xb, wb, bias, alpha, y, N); break;
    default: return invalid_argument("gemv_wide: K = " + std::to_string(K) + " is not supported");
  }
  MS_CUDA_LAUNCH_CHECK("gemv_wide_kernel");
  return Status::ok();
}

Status launch_moe_gate_up_wide(const void* h, const void* gate_up, int H, int I, int K, const MoePlan& plan,
                               int max_active, void* act, cudaStream_t stream) {
  if (max_active <= 0 || I <= 0) return Status::ok();
  const dim3 grid((I + kWarps - 1) / kWarps, max_active);
  const bf16* hb = static_cast<const bf16*>(h);
  const bf16* gb = static_cast<const bf16*>(gate_up);
  bf16* ab = static_cast<bf16*>(act);
  switch (chunks_of(H)) {
    case 4: moe_gate_up_wide_kernel<4><<<grid, kWarps * 32, 0, stream>>>(hb, gb, I, K, plan, ab); break;
    case 8: moe_gate_up_wide_kernel<8><<<grid, kWarps * 32, 0, stream>>>(hb, gb, I, K, plan, ab); break;
    default: return invalid_argument("moe_gate_up_wide: hidden " + std::to_string(H) + " is not supported");
  }
  MS_CUDA_LAUNCH_CHECK("moe_gate_up_wide_kernel");
  return Status::ok();
}

Status launch_moe_down_wide(const void* act, const void* down, const float* weights, int H, int I,
                            const MoePlan& plan, int max_active, float* ybuf, cudaStream_t stream) {
  if (max_active <= 0 || H <= 0) return Status::ok();
  const bf16* ab = static_cast<const bf16*>(act);
  const bf16* db = static_cast<const bf16*>(down);
  switch (chunks_of(I)) {
    case 3: {  // NMC / Qwen3-MoE expert width 768: 4 rows per warp, 12 loads per lane
      const dim3 grid((H + kWarps * 4 - 1) / (kWarps * 4), max_active);
      moe_down_wide_kernel<3, 4><<<grid, kWarps * 32, 0, stream>>>(ab, db, weights, H, plan, ybuf);
      break;
    }
    case 4: {
      const dim3 grid((H + kWarps * 3 - 1) / (kWarps * 3), max_active);
      moe_down_wide_kernel<4, 3><<<grid, kWarps * 32, 0, stream>>>(ab, db, weights, H, plan, ybuf);
      break;
    }
    default: return invalid_argument("moe_down_wide: expert width " + std::to_string(I) + " is not supported");
  }
  MS_CUDA_LAUNCH_CHECK("moe_down_wide_kernel");
  return Status::ok();
}

}  // namespace ms::gpu
