#include "gpu/ops/moe.h"

#include <algorithm>
#include <cstdlib>

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"
#include "gpu/ops/gemv_core.cuh"
#include "gpu/ops/moe_route.cuh"

namespace ms::gpu {

__global__ void moe_route_kernel(const float* __restrict__ logits, int T, int E, int K, int sigmoid,
                                 int softmax_over_topk, int norm_topk, int32_t* __restrict__ ids,
                                 float* __restrict__ weights) {
  __shared__ float sel_val[4][kRouteMaxK];
  __shared__ int sel_id[4][kRouteMaxK];
  const int wl = threadIdx.x >> 5;
  const int t = blockIdx.x * 4 + wl;
  if (t >= T) return;
  route_token(logits, t, E, K, sigmoid, softmax_over_topk, norm_topk, ids, weights, sel_val[wl], sel_id[wl]);
}

Status launch_moe_route(const float* logits, int T, int E, int K, RouterFn fn, bool softmax_over_topk,
                        bool norm_topk_prob, int32_t* ids, float* weights, cudaStream_t stream) {
  if (T == 0) return Status::ok();
  if (E > 32 * kRouteMaxPerLane || K > kRouteMaxK || K > E)
    return invalid_argument("moe route: needs n_experts <= 256 and top_k <= min(32, n_experts)");
  moe_route_kernel<<<(T + 3) / 4, 128, 0, stream>>>(logits, T, E, K, fn == RouterFn::kSigmoid ? 1 : 0,
                                                    softmax_over_topk ? 1 : 0, norm_topk_prob ? 1 : 0, ids, weights);
  MS_CUDA_LAUNCH_CHECK("moe_route_kernel");
  return Status::ok();
}

// One block: histogram per expert, serial compaction by thread 0 (E is small),
// then members scattered with atomics (their order inside an expert does not
// change any result: every selection has its own output row).
__device__ __forceinline__ void plan_block(const int32_t* ids, int n_sel, int E, const MoePlan& plan,
                                           int32_t* plan_smem) {
  int32_t* cnt = plan_smem;       // (E)
  int32_t* cursor = cnt + E;      // (E)
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int s = threadIdx.x; s < n_sel; s += blockDim.x) atomicAdd(&cnt[ids[s]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0, run = 0;
    for (int e = 0; e < E; ++e) {
      if (cnt[e] == 0) continue;
      plan.active[n] = e;
      plan.offset[n] = run;
      plan.count[n] = cnt[e];
      cursor[e] = run;
      run += cnt[e];
      ++n;
    }
    *plan.n_active = n;
    if (plan.stat_active) *plan.stat_active = n;
  }
  __syncthreads();
  for (int s = threadIdx.x; s < n_sel; s += blockDim.x) {
    const int slot = atomicAdd(&cursor[ids[s]], 1);
    plan.members[slot] = s;
  }
}

__global__ void moe_plan_kernel(const int32_t* __restrict__ ids, int n_sel, int E, MoePlan plan) {
  extern __shared__ int32_t plan_smem[];
  plan_block(ids, n_sel, E, plan, plan_smem);
}

// Decode (T <= 8): route (warp t routes token t) and plan in one block, one
// launch instead of two per MoE layer. The plan reads the selections from
// shared memory (the first version re-read the ids just written to global:
// two L2 round trips) and compacts with one warp: lane l owns experts
// [l * per, (l + 1) * per), counts its active experts and members, and a warp
// exclusive scan gives each lane its first slot and member offset (the first
// version compacted serially in thread 0 over all E experts: ~E dependent
// shared-memory steps). Same plan: experts ascending, members grouped.
// Block of 32 * kMoeRoutePlanMaxT threads; plan_smem: 2 E ints.
__device__ __forceinline__ void route_plan_block(const float* logits, int T, int E, int K, int sigmoid,
                                                 int softmax_over_topk, int norm_topk, int32_t* ids,
                                                 float* __restrict__ weights, const MoePlan& plan,
                                                 int32_t* plan_smem) {
  __shared__ float sel_val[kMoeRoutePlanMaxT][kRouteMaxK];
  __shared__ int sel_id[kMoeRoutePlanMaxT][kRouteMaxK];
  int32_t* cnt = plan_smem;   // (E)
  int32_t* cursor = cnt + E;  // (E)
  const int wl = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  if (wl < T)
    route_token(logits, wl, E, K, sigmoid, softmax_over_topk, norm_topk, ids, weights, sel_val[wl], sel_id[wl]);
  __syncthreads();  // sel_id and the zeroed counts
  const int n_sel = T * K;
  for (int s = threadIdx.x; s < n_sel; s += blockDim.x) atomicAdd(&cnt[sel_id[s / K][s % K]], 1);
  __syncthreads();
  if (wl == 0) {
    const int per = (E + 31) / 32;  // <= kRouteMaxPerLane
    const int e0 = lane * per;
    int na = 0, run = 0;
    for (int i = 0; i < per; ++i) {
      const int e = e0 + i;
      if (e < E) {
        const int c = cnt[e];
        na += c > 0;
        run += c;
      }
    }
    int na_inc = na, run_inc = run;  // inclusive warp scans
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int a = __shfl_up_sync(0xffffffffu, na_inc, o), b = __shfl_up_sync(0xffffffffu, run_inc, o);
      if (lane >= o) {
        na_inc += a;
        run_inc += b;
      }
    }
    int n = na_inc - na, r = run_inc - run;
    for (int i = 0; i < per; ++i) {
      const int e = e0 + i;
      if (e < E) {
        const int c = cnt[e];
        if (c > 0) {
          plan.active[n] = e;
          plan.offset[n] = r;
          plan.count[n] = c;
          cursor[e] = r;
          r += c;
          ++n;
        }
      }
    }
    if (lane == 31) {
      *plan.n_active = na_inc;
      if (plan.stat_active) *plan.stat_active = na_inc;
    }
  }
  __syncthreads();
  for (int s = threadIdx.x; s < n_sel; s += blockDim.x) {
    const int slot = atomicAdd(&cursor[sel_id[s / K][s % K]], 1);
    plan.members[slot] = s;
  }
}

__global__ void moe_route_plan_kernel(const float* __restrict__ logits, int T, int E, int K, int sigmoid,
                                      int softmax_over_topk, int norm_topk, int32_t* ids, float* __restrict__ weights,
                                      MoePlan plan) {
  extern __shared__ int32_t plan_smem[];
  route_plan_block(logits, T, E, K, sigmoid, softmax_over_topk, norm_topk, ids, weights, plan, plan_smem);
}

// Decode (T <= 8, H % 8 == 0): router GEMV, route and plan in one launch.
// ceil(E / 8) blocks of 8 warps; warp w of block b computes expert e = 8 b + w
// for all T tokens, reading its weight row once (the separate router GEMV
// re-read it per token): 8 independent 16-byte loads per lane per round
// (H = 2048 is one round), the fp32 x from L1/L2, then the same per-lane
// order of fmaf (k ascending) and warp_sum as gemv_f32x_kernel, so the logits
// are bit-identical to the two-launch path. Each block stores its logits,
// fences, and takes a ticket; the last block (the one that sees
// gridDim.x - 1) resets the ticket for the next launch and runs
// route_plan_block on all logits (read through L2). Saves a launch and its
// gap per MoE layer (router 4.9 us + route_plan 7.65 us measured).
__device__ unsigned int g_moe_router_ticket = 0;

constexpr int kRouterFusedU = 8;

// MT: compile-time bound on the tokens (1, 2, 4 or 8; T <= MT). The first
// version had MT = 8 for every T: at one token the unrolled per-token code was
// issued predicated off, ~1.4K instructions per warp where ~200 do the work
// (Nsight Compute at 4a922c6: 17 us per launch, 10 cycles per issue).
template <int MT>
__global__ void __launch_bounds__(32 * kMoeRoutePlanMaxT) moe_router_route_plan_kernel(
    const float* __restrict__ x, const bf16* __restrict__ w, int T, int E, int H, int K, int sigmoid,
    int softmax_over_topk, int norm_topk, float* logits, int32_t* ids, float* __restrict__ weights, MoePlan plan) {
  extern __shared__ int32_t plan_smem[];
  __shared__ bool last_block;
  const int lane = threadIdx.x & 31, e = blockIdx.x * kMoeRoutePlanMaxT + (threadIdx.x >> 5);
  if (e < E) {
    const bf16* wr = w + int64_t(e) * H;
    float acc[MT];
#pragma unroll
    for (int t = 0; t < MT; ++t) acc[t] = 0.f;
    for (int k0 = lane * 8; k0 < H; k0 += kRouterFusedU * 256) {
      uint4 wv[kRouterFusedU];
#pragma unroll
      for (int u = 0; u < kRouterFusedU; ++u)
        wv[u] = k0 + u * 256 < H ? ld_weight(wr + k0 + u * 256) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < kRouterFusedU; ++u) {
        const int k = k0 + u * 256;
        if (k >= H) break;
        float wf[8];
        bf16x8_to_f32(wv[u], wf);
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          if (MT == 1 || t < T) {
            const float* xr = x + int64_t(t) * H + k;
            const float4 xa = *reinterpret_cast<const float4*>(xr), xb = *reinterpret_cast<const float4*>(xr + 4);
            float a = acc[t];
            a = fmaf(wf[0], xa.x, a);
            a = fmaf(wf[1], xa.y, a);
            a = fmaf(wf[2], xa.z, a);
            a = fmaf(wf[3], xa.w, a);
            a = fmaf(wf[4], xb.x, a);
            a = fmaf(wf[5], xb.y, a);
            a = fmaf(wf[6], xb.z, a);
            a = fmaf(wf[7], xb.w, a);
            acc[t] = a;
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      const float sum = warp_sum(acc[t]);
      if (t < T && lane == 0) logits[int64_t(t) * E + e] = sum;
    }
  }
  __threadfence();  // this block's logits visible device-wide before its ticket
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int ticket = atomicAdd(&g_moe_router_ticket, 1u);
    last_block = ticket == gridDim.x - 1;
    if (last_block) g_moe_router_ticket = 0;  // no other block of this launch touches it again
  }
  __syncthreads();
  if (!last_block) return;
  __threadfence();  // acquire side: the logits are read through L2 (__ldcg in route_token)
  route_plan_block(logits, T, E, K, sigmoid, softmax_over_topk, norm_topk, ids, weights, plan, plan_smem);
}

Status launch_moe_route_plan(const float* logits, int T, int E, int K, RouterFn fn, bool softmax_over_topk,
                             bool norm_topk_prob, int32_t* ids, float* weights, const MoePlan& plan,
                             cudaStream_t stream) {
  if (T == 0) return Status::ok();
  if (T > kMoeRoutePlanMaxT) return invalid_argument("moe route+plan: more than 8 tokens");
  if (E > 32 * kRouteMaxPerLane || K > kRouteMaxK || K > E)
    return invalid_argument("moe route: needs n_experts <= 256 and top_k <= min(32, n_experts)");
  moe_route_plan_kernel<<<1, 32 * kMoeRoutePlanMaxT, size_t(2) * E * sizeof(int32_t), stream>>>(
      logits, T, E, K, fn == RouterFn::kSigmoid ? 1 : 0, softmax_over_topk ? 1 : 0, norm_topk_prob ? 1 : 0, ids,
      weights, plan);
  MS_CUDA_LAUNCH_CHECK("moe_route_plan_kernel");
  return Status::ok();
}

Status launch_moe_router_route_plan(const float* x, const void* router_w, int T, int E, int H, int K, RouterFn fn,
                                    bool softmax_over_topk, bool norm_topk_prob, float* logits, int32_t* ids,
                                    float* weights, const MoePlan& plan, cudaStream_t stream) {
  if (T == 0) return Status::ok();
  if (T > kMoeRoutePlanMaxT) return invalid_argument("moe router+route+plan: more than 8 tokens");
  if (H % 8 != 0) return invalid_argument("moe router+route+plan: hidden % 8 != 0");
  if (E > 32 * kRouteMaxPerLane || K > kRouteMaxK || K > E)
    return invalid_argument("moe route: needs n_experts <= 256 and top_k <= min(32, n_experts)");
  const int blocks = (E + kMoeRoutePlanMaxT - 1) / kMoeRoutePlanMaxT;
  auto kernel = T == 1 ? moe_router_route_plan_kernel<1>
                : T == 2 ? moe_router_route_plan_kernel<2>
                : T <= 4 ? moe_router_route_plan_kernel<4>
                         : moe_router_route_plan_kernel<kMoeRoutePlanMaxT>;
  kernel<<<blocks, 32 * kMoeRoutePlanMaxT, size_t(2) * E * sizeof(int32_t), stream>>>(
      x, static_cast<const bf16*>(router_w), T, E, H, K, fn == RouterFn::kSigmoid ? 1 : 0, softmax_over_topk ? 1 : 0,
      norm_topk_prob ? 1 : 0, logits, ids, weights, plan);
  MS_CUDA_LAUNCH_CHECK("moe_router_route_plan_kernel");
  return Status::ok();
}

Status launch_moe_plan(const int32_t* ids, int T, int K, int E, const MoePlan& plan, cudaStream_t stream) {
  if (T == 0) return Status::ok();
  if (E > 4096) return invalid_argument("moe plan: more than 4096 experts");
  moe_plan_kernel<<<1, 1024, size_t(2) * E * sizeof(int32_t), stream>>>(ids, T * K, E, plan);
  MS_CUDA_LAUNCH_CHECK("moe_plan_kernel");
  return Status::ok();
}

constexpr int kMoeWarps = 8;

// Round 3: both expert kernels treat the routed experts' rows as one flat list
// of warp work items q = u * per_expert + j (routed expert u, row group j),
// spread over a persistent grid (resident blocks x SMs, at most the items'
// blocks) with a grid stride over all warps: every SM gets the same number
// of items to within one, whatever the number of routed experts, and no
// partial second wave of blocks (the (expert, y) grids were 1.45 waves at one
// token). Consecutive warps take consecutive rows of one expert (contiguous
// weight bytes). The loop runs to the host bound max_active * per_expert;
// the plan entry of item q (n_active, active[u], offset[u], count[u]) is read
// in one round trip, u clamped below max_active so the speculative read stays
// in bounds, and a warp stops at the first item of an unrouted slot (u only
// grows along a warp's items). MR = 1 when every expert has at most one
// member per chunk (one token): 8x fewer accumulators, more resident warps.
struct MoeItem {
  int u, e, off, cnt;
  bool valid;
};

__device__ __forceinline__ MoeItem moe_item(const MoePlan& plan, int q, int per_expert, int max_active) {
  MoeItem it;
  it.u = min(q / per_expert, max_active - 1);
  const int n_active = *plan.n_active;
  it.e = plan.active[it.u];
  it.off = plan.offset[it.u];
  it.cnt = plan.count[it.u];
  it.valid = q / per_expert < n_active;
  return it;
}

// Items: (routed expert u, intermediate column i), I per expert. The warp
// streams gate row i and up row i together (8 loads in flight per lane) and
// dots them with the members' h rows, MR members at a time.
template <int MR>
__global__ void __launch_bounds__(kMoeWarps * 32) moe_gate_up_kernel(const bf16* __restrict__ h,
                                                                     const bf16* __restrict__ gate_up, int H, int I,
                                                                     int K, MoePlan plan, int max_active,
                                                                     bf16* __restrict__ act) {
  const int n_items = max_active * I, stride = gridDim.x * kMoeWarps;
  for (int q = blockIdx.x * kMoeWarps + (threadIdx.x >> 5); q < n_items; q += stride) {
    const MoeItem it = moe_item(plan, q, I, max_active);
    if (!it.valid) break;
    const int i = q - (q / I) * I;
    const bf16* const w[2] = {gate_up + (int64_t(it.e) * 2 * I + i) * H,
                              gate_up + (int64_t(it.e) * 2 * I + I + i) * H};
    for (int c0 = 0; c0 < it.cnt; c0 += MR) {
      const int rows = min(MR, it.cnt - c0);
      const bf16* xr[MR];
      int sel[MR];
#pragma unroll
      for (int r = 0; r < MR; ++r) {
        sel[r] = plan.members[it.off + c0 + (r < rows ? r : 0)];
        xr[r] = h + int64_t(sel[r] / K) * H;
      }
      float acc[2][MR];  // [0]: gate, [1]: up
#pragma unroll
      for (int r = 0; r < MR; ++r) acc[0][r] = acc[1][r] = 0.f;
      warp_dot_multi<2, 4, MR>(w, xr, rows, H, acc);
#pragma unroll
      for (int r = 0; r < MR; ++r) {
        const float gs = warp_sum(acc[0][r]), us = warp_sum(acc[1][r]);
        if (r < rows && (threadIdx.x & 31) == 0)
          act[int64_t(sel[r]) * I + i] = __float2bfloat16_rn(gs / (1.0f + expf(-gs)) * us);
      }
    }
  }
}

// Decode (T <= kMoeRowKernelMaxT): the same flat item list walked as a
// stream of rounds (stream_rows, gemv_core.cuh) so the next round's weights
// are in flight while the current one is used, across item boundaries. A step
// is one round (U chunks of 8 per lane) of rows w[0..NW) of item q for member
// c of its expert; an expert with several members re-streams its rows once
// per member (the repeats hit L2). The walker reads n_active once, in the
// same round trip as its first plan entry.
struct MoeWalkerBase {
  MoePlan plan;
  int per_expert, max_active, n_items, stride, rounds, round_len;
  struct Entry {
    int q, u, e, off, cnt, c, r, sel;
  };
  // Entry of item q, member c, round r (e, off, cnt reused when q is unchanged).
  __device__ __forceinline__ void load_entry(int q, Entry& en) const {
    en.q = q;
    en.u = min(q / per_expert, max_active - 1);
    en.e = plan.active[en.u];
    en.off = plan.offset[en.u];
    en.cnt = plan.count[en.u];
  }
  __device__ __forceinline__ bool first_entry(Entry& en) {
    const int q = blockIdx.x * kMoeWarps + (threadIdx.x >> 5);
    if (q >= n_items) return false;
    load_entry(q, en);  // speculative: issued with the n_active read below
    const int n_active = *plan.n_active;
    n_items = min(n_active, max_active) * per_expert;
    if (q >= n_items) return false;
    en.c = 0;
    en.r = 0;
    en.sel = plan.members[en.off];
    return true;
  }
  __device__ __forceinline__ bool next_entry(const Entry& cur, Entry& en) const {
    en = cur;
    if (cur.r + 1 < rounds) {
      ++en.r;
      return true;
    }
    en.r = 0;
    if (cur.c + 1 < cur.cnt) {
      ++en.c;
      en.sel = plan.members[en.off + en.c];
      return true;
    }
    const int q = cur.q + stride;
    if (q >= n_items) return false;
    if (q / per_expert != cur.q / per_expert) load_entry(q, en);
    en.q = q;
    en.c = 0;
    en.sel = plan.members[en.off];
    return true;
  }
};

// first / next for stream_rows: the walk's entries (MoeWalkerBase), each
// step's row pointers from the walker's make(Step&).
template <class W>
struct MoeWalkerSteps : MoeWalkerBase {
  template <class Step>
  __device__ __forceinline__ bool first(Step& s) {
    if (!this->first_entry(s.en)) return false;
    static_cast<const W*>(this)->make(s);
    return true;
  }
  template <class Step>
  __device__ __forceinline__ bool next(const Step& c, Step& s) const {
    if (!this->next_entry(c.en, s.en)) return false;
    static_cast<const W*>(this)->make(s);
    return true;
  }
};

struct MoeGateUpWalker : MoeWalkerSteps<MoeGateUpWalker> {
  static constexpr int kU = 4;
  const bf16* h;
  const bf16* gate_up;
  bf16* act;
  int H, I, K;
  struct Step {
    const bf16* w[2];
    const bf16* x;
    int len;
    bool last;
    Entry en;
  };
  __device__ __forceinline__ void make(Step& s) const {
    const int i = s.en.q - (s.en.q / I) * I, k = s.en.r * round_len;
    s.w[0] = gate_up + (int64_t(s.en.e) * 2 * I + i) * H + k;
    s.w[1] = gate_up + (int64_t(s.en.e) * 2 * I + I + i) * H + k;
    s.x = h + int64_t(s.en.sel / K) * H + k;
    s.len = H - k;
    s.last = s.en.r == rounds - 1;
  }
  __device__ __forceinline__ void emit(const Step& s, float (&acc)[2]) const {
    const float gs = warp_sum(acc[0]), us = warp_sum(acc[1]);
    const int i = s.en.q - (s.en.q / I) * I;
    if ((threadIdx.x & 31) == 0) act[int64_t(s.en.sel) * I + i] = __float2bfloat16_rn(gs / (1.0f + expf(-gs)) * us);
  }
};

__global__ void __launch_bounds__(kMoeWarps * 32, 2) moe_gate_up_row_kernel(const bf16* __restrict__ h,
                                                                            const bf16* __restrict__ gate_up, int H,
                                                                            int I, int K, MoePlan plan,
                                                                            int max_active, bf16* __restrict__ act) {
  MoeGateUpWalker wk;
  wk.plan = plan;
  wk.per_expert = I;
  wk.max_active = max_active;
  wk.n_items = max_active * I;
  wk.stride = gridDim.x * kMoeWarps;
  wk.round_len = MoeGateUpWalker::kU * 256;
  wk.rounds = (H + wk.round_len - 1) / wk.round_len;
  wk.h = h;
  wk.gate_up = gate_up;
  wk.act = act;
  wk.H = H;
  wk.I = I;
  wk.K = K;
  stream_rows<2, MoeGateUpWalker::kU>(wk);
}


template <int MR>
Status launch_moe_gate_up_t(const bf16* h, const bf16* gate_up, int H, int I, int K, const MoePlan& plan,
                            int max_active, bf16* act, cudaStream_t stream) {
  const int64_t items = int64_t(max_active) * I;
  if (items > INT32_MAX / 2) return invalid_argument("moe gate_up: too many expert rows");
  MS_ASSIGN_OR_RETURN(const int blocks, persistent_blocks(moe_gate_up_kernel<MR>, kMoeWarps * 32,
                                                          int((items + kMoeWarps - 1) / kMoeWarps)));
  moe_gate_up_kernel<MR><<<blocks, kMoeWarps * 32, 0, stream>>>(h, gate_up, H, I, K, plan, max_active, act);
  MS_CUDA_LAUNCH_CHECK("moe_gate_up_kernel");
  return Status::ok();
}

Status launch_moe_gate_up(const void* h, const void* gate_up, int H, int I, int T, int K, const MoePlan& plan,
                          int max_active, void* act, cudaStream_t stream) {
  if (max_active <= 0 || I <= 0) return Status::ok();
  if (H % 8 != 0) return invalid_argument("moe gate_up: hidden % 8 != 0");
  const bf16* hb = static_cast<const bf16*>(h);
  const bf16* gb = static_cast<const bf16*>(gate_up);
  bf16* ab = static_cast<bf16*>(act);
  if (T <= kMoeRowKernelMaxT) {  // decode: the streaming one-row kernel, rows re-read per extra member
    if (int64_t(max_active) * I > INT32_MAX / 2) return invalid_argument("moe gate_up: too many expert rows");
    const int items = max_active * I;
    MS_ASSIGN_OR_RETURN(const int blocks, persistent_blocks(moe_gate_up_row_kernel, kMoeWarps * 32,
                                                            (items + kMoeWarps - 1) / kMoeWarps));
    moe_gate_up_row_kernel<<<blocks, kMoeWarps * 32, 0, stream>>>(hb, gb, H, I, K, plan, max_active, ab);
    MS_CUDA_LAUNCH_CHECK("moe_gate_up_row_kernel");
    return Status::ok();
  }
  return launch_moe_gate_up_t<kGemvMaxRows>(hb, gb, H, I, K, plan, max_active, ab, stream);
}

// Items: (routed expert u, column group g), ceil(H / kDownCols) per expert:
// the warp owns the kDownCols output columns n = kDownCols g + j. Rows of
// W_down are only I = 768 long (3 chunks per lane): several rows per warp
// keep 12 loads in flight per lane and amortise the act reads. Minimum 3
// blocks per SM for MR = 1 (was 102 registers, 2 blocks: 16 warps per SM).
constexpr int kDownCols = 4;

template <int MR>
__global__ void __launch_bounds__(kMoeWarps * 32, MR == 1 ? 3 : 2) moe_down_kernel(
    const bf16* __restrict__ act, const bf16* __restrict__ down, const float* __restrict__ weights, int H, int I,
    MoePlan plan, int max_active, float* __restrict__ ybuf) {
  const int groups = (H + kDownCols - 1) / kDownCols;
  const int n_items = max_active * groups, stride = gridDim.x * kMoeWarps;
  for (int q = blockIdx.x * kMoeWarps + (threadIdx.x >> 5); q < n_items; q += stride) {
    const MoeItem it = moe_item(plan, q, groups, max_active);
    if (!it.valid) break;
    const int n0 = (q - (q / groups) * groups) * kDownCols;
    const bf16* w[kDownCols];
#pragma unroll
    for (int j = 0; j < kDownCols; ++j) w[j] = down + (int64_t(it.e) * H + min(n0 + j, H - 1)) * I;  // clamped, unused
    for (int c0 = 0; c0 < it.cnt; c0 += MR) {
      const int rows = min(MR, it.cnt - c0);
      const bf16* xr[MR];
      int sel[MR];
#pragma unroll
      for (int r = 0; r < MR; ++r) {
        sel[r] = plan.members[it.off + c0 + (r < rows ? r : 0)];
        xr[r] = act + int64_t(sel[r]) * I;
      }
      float y[kDownCols][MR];
#pragma unroll
      for (int j = 0; j < kDownCols; ++j)
#pragma unroll
        for (int r = 0; r < MR; ++r) y[j][r] = 0.f;
      warp_dot_multi<kDownCols, 3, MR>(w, xr, rows, I, y);  // U = 3: I = 768 is one round of 12 loads
#pragma unroll
      for (int j = 0; j < kDownCols; ++j)
#pragma unroll
        for (int r = 0; r < MR; ++r) {
          const float s = warp_sum(y[j][r]);
          if (r < rows && n0 + j < H && (threadIdx.x & 31) == 0)
            ybuf[int64_t(sel[r]) * H + n0 + j] = weights[sel[r]] * s;
        }
    }
  }
}

// One token (MR = 1 path) of moe_down: items (routed expert u, column pair),
// ceil(H / 2) per expert, walked as a stream of rounds of 2 rows x 3 chunks
// per lane (I = 768 is one round; 12 loads in flight per lane with the next
// item's) instead of 4 rows x 3 chunks one-shot at 102 registers.
constexpr int kDownRowCols = 2;

struct MoeDownWalker : MoeWalkerSteps<MoeDownWalker> {
  static constexpr int kU = 3;
  const bf16* act;
  const bf16* down;
  const float* weights;
  float* ybuf;
  int H, I;
  struct Step {
    const bf16* w[kDownRowCols];
    const bf16* x;
    int len;
    bool last;
    Entry en;
  };
  __device__ __forceinline__ void make(Step& s) const {
    const int n0 = (s.en.q - (s.en.q / per_expert) * per_expert) * kDownRowCols, k = s.en.r * round_len;
#pragma unroll
    for (int j = 0; j < kDownRowCols; ++j)
      s.w[j] = down + (int64_t(s.en.e) * H + min(n0 + j, H - 1)) * I + k;  // clamped, unused
    s.x = act + int64_t(s.en.sel) * I + k;
    s.len = I - k;
    s.last = s.en.r == rounds - 1;
  }
  __device__ __forceinline__ void emit(const Step& s, float (&acc)[kDownRowCols]) const {
    const int n0 = (s.en.q - (s.en.q / per_expert) * per_expert) * kDownRowCols;
    const float wt = weights[s.en.sel];
#pragma unroll
    for (int j = 0; j < kDownRowCols; ++j) {
      const float sum = warp_sum(acc[j]);
      if (n0 + j < H && (threadIdx.x & 31) == 0) ybuf[int64_t(s.en.sel) * H + n0 + j] = wt * sum;
    }
  }
};

__global__ void __launch_bounds__(kMoeWarps * 32, 2) moe_down_row_kernel(const bf16* __restrict__ act,
                                                                         const bf16* __restrict__ down,
                                                                         const float* __restrict__ weights, int H,
                                                                         int I, MoePlan plan, int max_active,
                                                                         float* __restrict__ ybuf) {
  MoeDownWalker wk;
  wk.plan = plan;
  wk.per_expert = (H + kDownRowCols - 1) / kDownRowCols;
  wk.max_active = max_active;
  wk.n_items = max_active * wk.per_expert;
  wk.stride = gridDim.x * kMoeWarps;
  wk.round_len = MoeDownWalker::kU * 256;
  wk.rounds = (I + wk.round_len - 1) / wk.round_len;
  wk.act = act;
  wk.down = down;
  wk.weights = weights;
  wk.ybuf = ybuf;
  wk.H = H;
  wk.I = I;
  stream_rows<kDownRowCols, MoeDownWalker::kU>(wk);
}

template <int MR>
Status launch_moe_down_t(const bf16* act, const bf16* down, const float* weights, int H, int I, const MoePlan& plan,
                         int max_active, float* ybuf, cudaStream_t stream) {
  const int64_t items = int64_t(max_active) * ((H + kDownCols - 1) / kDownCols);
  if (items > INT32_MAX / 2) return invalid_argument("moe down: too many expert rows");
  MS_ASSIGN_OR_RETURN(const int blocks, persistent_blocks(moe_down_kernel<MR>, kMoeWarps * 32,
                                                          int((items + kMoeWarps - 1) / kMoeWarps)));
  moe_down_kernel<MR><<<blocks, kMoeWarps * 32, 0, stream>>>(act, down, weights, H, I, plan, max_active, ybuf);
  MS_CUDA_LAUNCH_CHECK("moe_down_kernel");
  return Status::ok();
}

Status launch_moe_down(const void* act, const void* down, const float* weights, int H, int I, int T,
                       const MoePlan& plan, int max_active, float* ybuf, cudaStream_t stream) {
  if (max_active <= 0 || H <= 0) return Status::ok();
  if (I % 8 != 0) return invalid_argument("moe down: expert width % 8 != 0");
  const bf16* ab = static_cast<const bf16*>(act);
  const bf16* db = static_cast<const bf16*>(down);
  if (T <= kMoeRowKernelMaxT) {  // decode: the streaming one-row kernel (chunks of one member)
    const int64_t items = int64_t(max_active) * ((H + kDownRowCols - 1) / kDownRowCols);
    if (items > INT32_MAX / 2) return invalid_argument("moe down: too many expert rows");
    MS_ASSIGN_OR_RETURN(const int blocks, persistent_blocks(moe_down_row_kernel, kMoeWarps * 32,
                                                            int((items + kMoeWarps - 1) / kMoeWarps)));
    moe_down_row_kernel<<<blocks, kMoeWarps * 32, 0, stream>>>(ab, db, weights, H, I, plan, max_active, ybuf);
    MS_CUDA_LAUNCH_CHECK("moe_down_row_kernel");
    return Status::ok();
  }
  return launch_moe_down_t<kGemvMaxRows>(ab, db, weights, H, I, plan, max_active, ybuf, stream);
}

__global__ void moe_combine_kernel(const float* __restrict__ ybuf, const float* __restrict__ shared, int shared_sum,
                                   int K, int H, float* __restrict__ out) {
  const int t = blockIdx.x;
  for (int n = threadIdx.x; n < H; n += blockDim.x) {
    float o = 0.f;
    for (int k = 0; k < K; ++k) o += ybuf[(int64_t(t) * K + k) * H + n];
    if (shared) {
      const float y = shared[int64_t(t) * H + n];
      o = shared_sum ? o + y : (o + y) / 2;
    }
    out[int64_t(t) * H + n] = o;
  }
}

Status launch_moe_combine(const float* ybuf, const float* shared, bool shared_sum, int T, int K, int H, float* out,
                          cudaStream_t stream) {
  if (T == 0) return Status::ok();
  moe_combine_kernel<<<T, 256, 0, stream>>>(ybuf, shared, shared_sum ? 1 : 0, K, H, out);
  MS_CUDA_LAUNCH_CHECK("moe_combine_kernel");
  return Status::ok();
}

}  // namespace ms::gpu
