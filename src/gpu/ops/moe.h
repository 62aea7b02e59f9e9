// Mixture-of-experts on the GPU, with no host synchronisation (so the decode
// step can be captured in a CUDA graph):
//   1. launch_moe_route: router logits (T, E) fp32 -> top-k expert ids and
//      combine weights per token, exactly the CPU reference's function
//      (softmax over all then top-k [qwen3_moe], or top-k then softmax /
//      sigmoid over the chosen [cohere2_moe], optional renormalisation).
//   2. launch_moe_plan: groups the T*K selections by expert: the compact list
//      of experts actually routed to (ascending ids), each with its members
//      (selection ids s = t * K + k).
//   3. launch_moe_gate_up: per routed expert, act (T*K, I) bf16 =
//      silu(h W_gate^T) * (h W_up^T) for its members; only the routed experts'
//      weights are read, once per 8 members.
//   4. launch_moe_down: ybuf (T*K, H) fp32 = weight_s * act_s W_down^T.
//   5. launch_moe_combine: out (T, H) = sum_k ybuf[t*K + k] in k order (best
//      first, as the reference), plus the shared expert's output (sum or average).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"
#include "model/config.h"

namespace ms::gpu {

// logits (T, E) fp32 -> ids (T, K) int32, weights (T, K) fp32. E <= 256, K <= 32.
Status launch_moe_route(const float* logits, int T, int E, int K, RouterFn fn, bool softmax_over_topk,
                        bool norm_topk_prob, int32_t* ids, float* weights, cudaStream_t stream);

struct MoePlan {
  int32_t* n_active = nullptr;    // (1) number of routed experts
  int32_t* active = nullptr;      // (E) expert id of each routed expert, ascending
  int32_t* offset = nullptr;      // (E) first member of each routed expert
  int32_t* count = nullptr;       // (E) members of each routed expert
  int32_t* members = nullptr;     // (T*K) selection ids grouped by expert
  int32_t* stat_active = nullptr; // optional: n_active is also written here (benchmark byte counts)
};

// A plan laid out in one int32 buffer of moe_plan_ints(E, n_sel) elements:
// n_active, active (E), offset (E), count (E), members (n_sel = T * K).
inline size_t moe_plan_ints(int E, int64_t n_sel) { return 1 + 3 * size_t(E) + size_t(n_sel); }
inline MoePlan moe_plan_view(int32_t* buf, int E) {
  MoePlan p;
  p.n_active = buf;
  p.active = buf + 1;
  p.offset = buf + 1 + E;
  p.count = buf + 1 + 2 * E;
  p.members = buf + 1 + 3 * E;
  return p;
}

// E <= 4096.
Status launch_moe_plan(const int32_t* ids, int T, int K, int E, const MoePlan& plan, cudaStream_t stream);

// launch_moe_route then launch_moe_plan in one single-block launch, for
// decode steps: T <= kMoeRoutePlanMaxT, E <= 256, K <= 32.
constexpr int kMoeRoutePlanMaxT = 8;
Status launch_moe_route_plan(const float* logits, int T, int E, int K, RouterFn fn, bool softmax_over_topk,
                             bool norm_topk_prob, int32_t* ids, float* weights, const MoePlan& plan,
                             cudaStream_t stream);

// Decode: the router GEMV (x (T, H) fp32 . router_w (E, H) bf16 -> logits
// (T, E) fp32, bit-identical to launch_gemv_f32x), then launch_moe_route_plan,
// in one launch. T <= kMoeRoutePlanMaxT, H % 8 == 0, E <= 256, K <= 32. Uses a
// process-wide ticket: launches of it must not run concurrently on two streams.
Status launch_moe_router_route_plan(const float* x, const void* router_w, int T, int E, int H, int K, RouterFn fn,
                                    bool softmax_over_topk, bool norm_topk_prob, float* logits, int32_t* ids,
                                    float* weights, const MoePlan& plan, cudaStream_t stream);

// Expert kernels. Up to kMoeRowKernelMaxT tokens (decode) they are the
// one-row streaming kernels: a warp item is one weight row (group) of one
// routed expert, the next round's loads always in flight, and an expert with
// several members re-reads its rows once per extra member (from L2: they were
// just read). At decode batch sizes most routed experts have one member (bs 8,
// top-8 of 128: ~50 experts for 64 selections), and the 8-row kernels below
// spent their time on empty rows (measured on the H200, NMC bs 8 / 8K:
// 15.2 -> 12.6 ms per step). More tokens (prefill) use kernels that read each
// weight row once for up to 8 members.
constexpr int kMoeRowKernelMaxT = 8;

// h (T, H) bf16; gate_up (E, 2I, H) bf16 (rows [0, I) gate, [I, 2I) up);
// act (T*K, I) bf16. max_active: grid size, >= the number of routed experts
// (min(E, T*K)).
Status launch_moe_gate_up(const void* h, const void* gate_up, int H, int I, int T, int K, const MoePlan& plan,
                          int max_active, void* act, cudaStream_t stream);

// act (T*K, I) bf16; down (E, H, I) bf16; weights (T*K) fp32; ybuf (T*K, H) fp32.
Status launch_moe_down(const void* act, const void* down, const float* weights, int H, int I, int T,
                       const MoePlan& plan, int max_active, float* ybuf, cudaStream_t stream);

// Prefill experts on the tensor cores, no host synchronisation (moe_mma.cu):
// grouped GEMMs over the routed experts, one launch per projection, in the
// plan's gathered order (expert u owns rows [offset[u], offset[u] + count[u])).
// gate_up: act (T*K, I) bf16, row offset[u] + m = silu(g) * u of member
// members[offset[u] + m] (its token's row of h, (T, H) bf16). H % 8 == 0, I even.
// Which grouped GEMM kernel runs, process-wide: kWgmma (default: warpgroup
// wgmma m64n256k16, 64 x 256 tiles; NMC on the H200: gate_up ~270 TFLOP/s,
// 2K-token prompt 53 ms) or kMma (mma.sync m16n8k16, 64 x 128 tiles, 2
// blocks per SM: ~195 TFLOP/s, 65 ms). MEGASERVE_MOE_GEMM=mma sets kMma at
// start. Not synchronised with launches in flight: set it before a run.
enum class MoeGemmKernel { kMma, kWgmma };
void set_moe_gemm_kernel(MoeGemmKernel k);
MoeGemmKernel moe_gemm_kernel();

Status launch_moe_grouped_gate_up(const void* h, const void* gate_up, int H, int I, int T, int K, int E,
                                  const MoePlan& plan, void* act, cudaStream_t stream);
// down: ybuf (T*K, H) fp32, row members[r] = weights[members[r]] * act[r] W_down^T
// (the layout launch_moe_down writes, read by launch_moe_combine). I % 8 == 0, H even.
Status launch_moe_grouped_down(const void* act, const void* down, const float* weights, int H, int I, int T, int K,
                               int E, const MoePlan& plan, float* ybuf, cudaStream_t stream);

// out (T, H) fp32 = sum_k ybuf (T*K, H); shared (T, H) fp32 or null:
// out = shared_sum ? out + shared : (out + shared) / 2.
Status launch_moe_combine(const float* ybuf, const float* shared, bool shared_sum, int T, int K, int H, float* out,
                          cudaStream_t stream);

}  // namespace ms::gpu
