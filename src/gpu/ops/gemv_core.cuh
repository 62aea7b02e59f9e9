// The decode GEMV inner loop shared by the dense GEMV and the MoE expert
// kernels: one warp computes the dot product of one bf16 weight row with up
// to kGemvMaxRows bf16 activation rows. Each lane streams 16 bytes (8 bf16)
// of the weight row per chunk, four chunks in flight before their first use
// (HOPPER.md: several independent 16-byte loads per thread); activations are
// small and re-read by every warp, so they go through the caches.
#pragma once

#include "gpu/common/bf16.cuh"

namespace ms::gpu {

constexpr int kGemvMaxRows = 8;

// acc[r] (lane partials) += w[0:K] . x[r][0:K] for r < rows. K % 8 == 0 and
// every pointer 16-byte aligned. Call warp_sum on each acc[r] afterwards.
__device__ __forceinline__ void warp_dot_rows(const bf16* __restrict__ w, const bf16* const (&x)[kGemvMaxRows],
                                              int rows, int K, float (&acc)[kGemvMaxRows]) {
  const int lane = threadIdx.x & 31;
  int k = lane * 8;
  for (; k + 3 * 256 < K; k += 4 * 256) {
    uint4 wv[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) wv[u] = ld_stream(w + k + u * 256);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float wf[8];
      bf16x8_to_f32(wv[u], wf);
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r) {
        if (r < rows) {
          float xf[8];
          bf16x8_to_f32(*reinterpret_cast<const uint4*>(x[r] + k + u * 256), xf);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[r] = fmaf(wf[i], xf[i], acc[r]);
        }
      }
    }
  }
  for (; k < K; k += 256) {
    float wf[8];
    bf16x8_to_f32(ld_stream(w + k), wf);
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r) {
      if (r < rows) {
        float xf[8];
        bf16x8_to_f32(*reinterpret_cast<const uint4*>(x[r] + k), xf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[r] = fmaf(wf[i], xf[i], acc[r]);
      }
    }
  }
}

}  // namespace ms::gpu
