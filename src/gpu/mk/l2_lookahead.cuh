// L2 lookahead of the claim queues (experiment kExpL2Claims): expert weights
// prefetched into L2 a fixed distance ahead of the claims, so that from the
// route on DRAM streams the routed experts at its own pace instead of at the
// pace each SM's five ring stages allow (docs/megakernel.md, round 4).
//
// The gate/up queue (Ngu tiles) and the down queue (Nd tiles) form one
// stream of "positions": position v < Ngu is gate/up tile v; position Ngu + q
// (q < Lg) is the down tiles [q Ld / Lg, (q + 1) Ld / Lg), so the Lg
// positions after the gate/up queue cover the first Ld down tiles (Lg, Ld:
// the lead in gate/up and in down tiles, the same bytes). Every tile is
// prefetched exactly once: the route prefetches positions [0, Lg), whoever
// claims gate/up tile t prefetches position t + Lg, whoever claims down tile
// u prefetches down tile u + Ld.
#pragma once

#include "gpu/mk/sync.cuh"

namespace ms::gpu::mk {

struct ClaimLookahead {
  const uint16_t* gate_up;  // the layer's (E, 2I, H) expert gate/up weights
  const uint16_t* down;     // (E, H, I)
  const int32_t* expert;    // slot -> expert (shared memory)
  int H, I, n_active;
  int gu_tpe, down_tpe;     // tiles per expert
  int lead_gu, lead_down;   // Lg, Ld

  __device__ __forceinline__ int n_gu() const { return n_active * gu_tpe; }
  __device__ __forceinline__ int n_down() const { return n_active * down_tpe; }

  // Gate/up pair tile t: intermediate columns [8 j, 8 j + 8) as 8 gate rows
  // and the 8 matching up rows, two contiguous row blocks.
  __device__ __forceinline__ void gate_up_tile(int t) const {
    const int slot = t / gu_tpe, j = t % gu_tpe, c0 = j * 8, n = min(8, I - c0);
    const uint16_t* w = gate_up + int64_t(expert[slot]) * 2 * I * H;
    prefetch_l2(w + int64_t(c0) * H, uint32_t(n) * H * 2);
    prefetch_l2(w + int64_t(I + c0) * H, uint32_t(n) * H * 2);
  }
  // Down tile u: output rows [16 j, 16 j + 16), contiguous.
  __device__ __forceinline__ void down_tile(int u) const {
    if (u < 0 || u >= n_down()) return;
    const int slot = u / down_tpe, j = u % down_tpe, r0 = j * 16, n = min(16, H - r0);
    prefetch_l2(down + (int64_t(expert[slot]) * H + r0) * I, uint32_t(n) * I * 2);
  }
  __device__ __forceinline__ void position(int v) const {
    if (v < 0) return;
    if (v < n_gu()) {
      gate_up_tile(v);
      return;
    }
    const int64_t q = v - n_gu();
    if (q >= lead_gu) return;  // the down claimers' part
    for (int64_t u = q * lead_down / lead_gu; u < (q + 1) * lead_down / lead_gu; ++u) down_tile(int(u));
  }
};

// Leads for `bytes` of lookahead (at least one tile each).
__device__ __forceinline__ void claim_leads(int H, int I, uint32_t bytes, int* lead_gu, int* lead_down) {
  *lead_gu = max(1, int(bytes / (16u * uint32_t(H) * 2u)));
  *lead_down = max(1, int(bytes / (16u * uint32_t(I) * 2u)));
}

}  // namespace ms::gpu::mk
