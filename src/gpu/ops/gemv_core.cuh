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

#include <cuda_runtime.h>

#include <algorithm>

#include "core/status.h"
#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"

namespace ms::gpu {

constexpr int kGemvMaxRows = 8;

// 16-byte weight load through the non-coherent path, not allocated in L1
// (weights are read once per kernel and never written by it; the activations
// and the MoE plan keep the default cached loads).
__device__ __forceinline__ uint4 ld_weight(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Persistent grid: the number of blocks of `kernel` (`threads` per block, no
// dynamic shared memory) resident on the whole device at once, at most
// `want` (the blocks the work needs) and at least 1. Kernels launched with
// it loop over their work items with a grid stride, so there is never a
// partial second wave of blocks, each paying its own launch and first
// round trip. Host only; valid during graph capture (no stream work).
template <class Kernel>
Result<int> persistent_blocks(Kernel kernel, int threads, int want) {
  int dev = 0, sms = 0, per_sm = 0;
  MS_CUDA_RETURN(cudaGetDevice(&dev));
  MS_CUDA_RETURN(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MS_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  return std::max(1, std::min(want, sms * std::max(per_sm, 1)));
}

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
        wv[j][u] = k0 + u * 256 < K ? ld_weight(w[j] + k0 + u * 256) : make_uint4(0, 0, 0, 0);
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
