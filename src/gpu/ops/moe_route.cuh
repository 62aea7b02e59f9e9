// Top-k routing of one token by one warp, shared by the layered route
// kernels (moe.cu) and the megakernel's kRoute: the CPU reference's function
// (softmax over all then top-k [qwen3_moe], or top-k then softmax / sigmoid
// over the chosen [cohere2_moe], optional renormalisation), ties to the
// lower expert id. Device code only.
#pragma once

#include <cmath>
#include <cstdint>

#include "gpu/common/bf16.cuh"

namespace ms::gpu {

constexpr int kRouteMaxPerLane = 8;  // E <= 256
constexpr int kRouteMaxK = 32;

// One warp per token. Lane holds scores of experts lane + 32 j. Top-k by k
// rounds of warp argmax (ties to the lower id, as the reference); lane 0 then
// applies the post-top-k function serially in the reference's order.
// ids_only: the chosen experts in sel_id[0, K) (selection order) and nothing
// else (ids and weights are not written; the megakernel's gate/up loop
// needs no weights: round 16 took lane 0's serial weight loops off its
// critical chain).
__device__ __forceinline__ void route_token(const float* __restrict__ logits, int t, int E, int K, int sigmoid,
                                            int softmax_over_topk, int norm_topk, int32_t* __restrict__ ids,
                                            float* __restrict__ weights, float* sel_val, int* sel_id,
                                            bool ids_only = false) {
  const int lane = threadIdx.x & 31;
  float sc[kRouteMaxPerLane];
#pragma unroll
  for (int j = 0; j < kRouteMaxPerLane; ++j) {
    const int e = lane + 32 * j;
    sc[j] = e < E ? __ldcg(logits + int64_t(t) * E + e) : -INFINITY;  // L2: may be another block's
  }
  if (!softmax_over_topk && !sigmoid) {  // qwen3_moe: softmax over all experts first
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kRouteMaxPerLane; ++j) mx = fmaxf(mx, sc[j]);
    mx = warp_max(mx);
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kRouteMaxPerLane; ++j) {
      sc[j] = lane + 32 * j < E ? expf(sc[j] - mx) : 0.f;
      sum += sc[j];
    }
    sum = warp_sum(sum);
#pragma unroll
    for (int j = 0; j < kRouteMaxPerLane; ++j) sc[j] = lane + 32 * j < E ? sc[j] / sum : -INFINITY;
  }
  // k rounds of a warp argmax with ties to the lower expert id. Scores map
  // to order-preserving unsigned keys (-0 as +0, so they tie like floats), so
  // a round is two single-instruction warp reductions (redux.sync max of the
  // keys, then min of the ids holding the max) instead of five dependent
  // pairs of shuffles. A lane's candidate is its first (lowest id) maximum.
  unsigned key[kRouteMaxPerLane];
#pragma unroll
  for (int j = 0; j < kRouteMaxPerLane; ++j) {
    const float v = sc[j] == 0.f ? 0.f : sc[j];
    const unsigned u = __float_as_uint(v);
    key[j] = u & 0x80000000u ? ~u : u | 0x80000000u;  // 0 is below every float's key (-inf: 0x007fffff)
  }
  unsigned taken = 0;  // bit j: expert lane + 32 j already chosen
  for (int k = 0; k < K; ++k) {
    unsigned bk = 0;
    int bj = -1;
#pragma unroll
    for (int j = 0; j < kRouteMaxPerLane; ++j) {
      if (lane + 32 * j < E && !(taken >> j & 1u) && (bj < 0 || key[j] > bk)) {
        bk = key[j];
        bj = j;
      }
    }
    const unsigned mk = __reduce_max_sync(0xffffffffu, bk);
    const unsigned bi = __reduce_min_sync(0xffffffffu, bj >= 0 && bk == mk ? unsigned(lane + 32 * bj) : 0xffffffffu);
    if ((bi & 31u) == unsigned(lane)) taken |= 1u << (bi >> 5);
    if (lane == 0) {
      sel_val[k] = __uint_as_float(mk & 0x80000000u ? mk & 0x7fffffffu : ~mk);
      sel_id[k] = static_cast<int>(bi);
    }
  }
  __syncwarp();
  if (ids_only || lane != 0) return;
  // Lane 0's loops stay rolled (#pragma unroll 1): serial work either way,
  // and unrolled with the expf expansions they were ~900 instructions of
  // the megakernel's code (run once a layer on one SM: instruction-cache
  // misses, docs/megakernel.md round 9).
  float* w = sel_val;
  if (softmax_over_topk) {
    if (!sigmoid) {
      float mx = -INFINITY;
#pragma unroll 1
      for (int k = 0; k < K; ++k) mx = fmaxf(mx, w[k]);
      float sum = 0.f;
#pragma unroll 1
      for (int k = 0; k < K; ++k) sum += (w[k] = expf(w[k] - mx));
#pragma unroll 1
      for (int k = 0; k < K; ++k) w[k] /= sum;
    } else {
#pragma unroll 1
      for (int k = 0; k < K; ++k) w[k] = 1.0f / (1.0f + expf(-w[k]));
    }
  }
  if (norm_topk && !(softmax_over_topk && !sigmoid)) {
    float sum = 0.f;
#pragma unroll 1
    for (int k = 0; k < K; ++k) sum += w[k];
#pragma unroll 1
    for (int k = 0; k < K; ++k) w[k] /= sum;
  }
#pragma unroll 1
  for (int k = 0; k < K; ++k) {
    ids[int64_t(t) * K + k] = sel_id[k];
    weights[int64_t(t) * K + k] = w[k];
  }
}

}  // namespace ms::gpu
