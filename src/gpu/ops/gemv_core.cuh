// The decode GEMV inner loop shared by the dense GEMV and the MoE expert
// kernels: one warp computes the dot products of NW bf16 weight rows with up
// to kGemvMaxRows bf16 activation rows. Each lane streams 16 bytes (8 bf16)
// of each weight row per chunk; U chunks of all NW rows are issued (predicated
// at the row end) before the first is used, so a lane has up to NW * U
// independent 16-byte loads in flight for every K, including K = 768 (the
// expert width), which the first version ran one load at a time (HOPPER.md:
// several independent 16-byte loads per thread; ~40 KB in flight per SM to
// reach HBM bandwidth). Activations are small and re-read by every warp, so
// they go through the caches.
#pragma once

#include "gpu/common/bf16.cuh"

namespace ms::gpu {

constexpr int kGemvMaxRows = 8;

// acc[j][r] (lane partials) += w[j][0:K] . x[r][0:K] for j < NW, r < rows.
// K % 8 == 0 and every pointer 16-byte aligned. Call warp_sum on each
// acc[j][r] afterwards. NW * U <= 16 keeps the weight registers at <= 64.
// MR: compile-time bound on rows (<= kGemvMaxRows); MR = 1 for one
// activation row keeps the accumulators (and registers) 8x smaller, so more
// warps fit on an SM.
template <int NW, int U, int MR = kGemvMaxRows>
__device__ __forceinline__ void warp_dot_multi(const bf16* const (&w)[NW], const bf16* const (&x)[MR], int rows, int K,
                                               float (&acc)[NW][MR]) {
  const int lane = threadIdx.x & 31;
  for (int k0 = lane * 8; k0 < K; k0 += U * 256) {
    uint4 wv[NW][U];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < NW; ++j)
        wv[j][u] = k0 + u * 256 < K ? ld_stream(w[j] + k0 + u * 256) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = k0 + u * 256;
      if (k >= K) break;
#pragma unroll
      for (int r = 0; r < MR; ++r) {
        if (r < rows) {
          float xf[8];
          bf16x8_to_f32(*reinterpret_cast<const uint4*>(x[r] + k), xf);
#pragma unroll
          for (int j = 0; j < NW; ++j) {
            float wf[8];
            bf16x8_to_f32(wv[j][u], wf);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[j][r] = fmaf(wf[i], xf[i], acc[j][r]);
          }
        }
      }
    }
  }
}

}  // namespace ms::gpu
