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
#include <cstdlib>

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
//
// MEGASERVE_PERSISTENT_SHARE=P (percent, 1..100, default 100) sizes the grid
// to P% of the resident blocks: with two branches of a parallel block running
// at once, a full-device persistent grid of one kernel leaves no block slot to
// the other until it drains (perf experiments; read once per process).
inline int persistent_share_pct() {
  static const int pct = [] {
    const char* e = std::getenv("MEGASERVE_PERSISTENT_SHARE");
    const int v = e ? std::atoi(e) : 100;
    return v >= 1 && v <= 100 ? v : 100;
  }();
  return pct;
}

template <class Kernel>
Result<int> persistent_blocks(Kernel kernel, int threads, int want) {
  int dev = 0, sms = 0, per_sm = 0;
  MS_CUDA_RETURN(cudaGetDevice(&dev));
  MS_CUDA_RETURN(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MS_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  const int resident = std::max(1, sms * std::max(per_sm, 1) * persistent_share_pct() / 100);
  return std::max(1, std::min(want, resident));
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

namespace ms::gpu {

// ---- One-row GEMV streams with the next round of loads always in flight ----
//
// A warp's work is a sequence of steps ("rounds"); a step is NW weight rows x
// U chunks per lane (8 bf16 each, 256 elements apart) from the row pointers
// w[j], dotted with one activation row x over `len` elements (predicated at
// len; len <= 0 loads nothing). The weights of step s + 1 are requested before
// step s is computed, into the other of two register buffers, so a warp keeps
// up to 2 * NW * U 16-byte loads in flight across row, member and item
// boundaries (the one-shot warps waited for their last round, reduced and
// exited before the next block's first load; the second, partial wave of
// blocks then ran at a fraction of the SM's bytes in flight).
//
// Walker: struct Step { const bf16* w[NW]; const bf16* x; int len; bool last;
// ... }; bool first(Step&); bool next(const Step& cur, Step& nxt);
// void emit(const Step&, float (&acc)[NW]) with the lane partials of a
// finished dot product (step.last), reset afterwards. All lanes of a warp run
// the same steps; a walker that synchronises the block in emit must give all
// warps of the block the same step sequence length and last flags.
template <int NW, int U>
__device__ __forceinline__ void load_round(const bf16* const (&w)[NW], int len, uint4 (&v)[NW][U]) {
  const int k = (threadIdx.x & 31) * 8;
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int j = 0; j < NW; ++j) v[j][u] = k + u * 256 < len ? ld_weight(w[j] + k + u * 256) : make_uint4(0, 0, 0, 0);
}

template <int NW, int U>
__device__ __forceinline__ void dot_round(const uint4 (&v)[NW][U], const bf16* x, int len, float (&acc)[NW]) {
  const int k0 = (threadIdx.x & 31) * 8;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int k = k0 + u * 256;
    if (k < len) {
      float xf[8];
      bf16x8_to_f32(*reinterpret_cast<const uint4*>(x + k), xf);
#pragma unroll
      for (int j = 0; j < NW; ++j) {
        float wf[8];
        bf16x8_to_f32(v[j][u], wf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[j] = fmaf(wf[i], xf[i], acc[j]);
      }
    }
  }
}

template <int NW, int U, class Walker>
__device__ __forceinline__ void stream_step(Walker& wk, typename Walker::Step& st, bool& have, const uint4 (&cur)[NW][U],
                                            uint4 (&nxt)[NW][U], float (&acc)[NW]) {
  typename Walker::Step nx;
  const bool has_next = wk.next(st, nx);
  if (has_next) load_round<NW, U>(nx.w, nx.len, nxt);
  dot_round<NW, U>(cur, st.x, st.len, acc);
  if (st.last) {
    wk.emit(st, acc);
#pragma unroll
    for (int j = 0; j < NW; ++j) acc[j] = 0.f;
  }
  if (has_next) st = nx;
  have = has_next;
}

template <int NW, int U, class Walker>
__device__ __forceinline__ void stream_rows(Walker& wk) {
  typename Walker::Step st;
  uint4 a[NW][U], b[NW][U];
  float acc[NW];
#pragma unroll
  for (int j = 0; j < NW; ++j) acc[j] = 0.f;
  bool have = wk.first(st);
  if (have) load_round<NW, U>(st.w, st.len, a);
  while (have) {  // unrolled by two: the buffers swap roles without register copies
    stream_step<NW, U>(wk, st, have, a, b, acc);
    if (!have) break;
    stream_step<NW, U>(wk, st, have, b, a, acc);
  }
}

}  // namespace ms::gpu
