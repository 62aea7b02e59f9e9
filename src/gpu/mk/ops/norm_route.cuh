// kNorm / kFinalNorm (the residual update of one row and its norm) and
// kRoute (top-k of every row and the routing plan the claim queues read).
#pragma once

#include "gpu/mk/consumer_ctx.cuh"
#include "gpu/ops/moe_route.cuh"

namespace ms::gpu::mk {

constexpr int kNormPerThread = kMaxActCols / kConsumerThreads;  // H <= kMaxActCols

// x += the outputs the instruction adds (mk_vm.cpp norm_row gives the
// order), then h = norm(x) * w in bf16 (matmul input) and hf in fp32
// (router input). Layer 0's first norm starts from the token's embedding.
__device__ __forceinline__ bool op_norm(Ctx& c, const Instruction& in) {
  const Params& p = c.p;
  const Dims& d = p.dims;
  const int R = p.rows, H = d.hidden, r = in.rows.row;
  const bool final = in.op == Opcode::kFinalNorm, second = in.flags & ::ms::mk::kFlagNormSecond;
  const int prev = final ? d.n_layers - 1 : in.layer - 1;
  float v[kNormPerThread];
  float* x = p.x + int64_t(r) * H;
  const bool embed = !final && in.layer == 0 && !second;
  const bool prev_moe = prev >= 0 && p.layer_info[prev].moe;
  // The loads are issued source by source for all of a thread's columns at
  // once (and a few sources ahead): the norm is on every layer's critical
  // path, and one L2 round trip per load in turn made it ~30 us (timeline,
  // docs/megakernel.md). The sums keep the interpreter's order per column.
  if (embed) {
    const int tok = p.meta->tokens[r];
#pragma unroll
    for (int j = 0; j < kNormPerThread; ++j) {
      const int i = c.tid() + j * kConsumerThreads;
      if (i < H) v[j] = __bfloat162float(__ushort_as_bfloat16(p.embed[int64_t(tok) * H + i]));
    }
  } else {
    float a[kNormPerThread], f[kNormPerThread], x0[kNormPerThread];
#pragma unroll
    for (int j = 0; j < kNormPerThread; ++j) {
      const int i = c.tid() + j * kConsumerThreads;
      a[j] = 0.f;  // attention: the O-projection's per-group partials
      f[j] = 0.f;  // FFN of the previous layer
      x0[j] = i < H ? __ldcg(x + i) : 0.f;
    }
    if (second || d.parallel_block) {
#pragma unroll 4
      for (int g = 0; g < d.n_kv_heads; ++g)
#pragma unroll
        for (int j = 0; j < kNormPerThread; ++j) {
          const int i = c.tid() + j * kConsumerThreads;
          if (i < H) a[j] += __ldcg(p.o_part + (int64_t(g) * R + r) * H + i);
        }
    }
    if (!second) {
      if (prev_moe) {
#pragma unroll 4
        for (int k = 0; k < d.top_k; ++k)
#pragma unroll
          for (int j = 0; j < kNormPerThread; ++j) {
            const int i = c.tid() + j * kConsumerThreads;
            if (i < H) f[j] += __ldcg(p.ybuf + (int64_t(r) * d.top_k + k) * H + i);
          }
        if (d.shared_ffn > 0) {
          float y[kNormPerThread];
#pragma unroll
          for (int j = 0; j < kNormPerThread; ++j) y[j] = 0.f;
          for (int sl = 0; sl < ::ms::mk::down_slices(d.shared_ffn); ++sl)
#pragma unroll
            for (int j = 0; j < kNormPerThread; ++j) {
              const int i = c.tid() + j * kConsumerThreads;
              if (i < H) y[j] += __ldcg(p.shared_part + (int64_t(sl) * R + r) * H + i);
            }
#pragma unroll
          for (int j = 0; j < kNormPerThread; ++j) f[j] = d.shared_sum ? f[j] + y[j] : (f[j] + y[j]) / 2;
        }
      } else {
        for (int sl = 0; sl < ::ms::mk::down_slices(d.dense_ffn); ++sl)
#pragma unroll
          for (int j = 0; j < kNormPerThread; ++j) {
            const int i = c.tid() + j * kConsumerThreads;
            if (i < H) f[j] += __ldcg(p.dense_part + (int64_t(sl) * R + r) * H + i);
          }
      }
    }
#pragma unroll
    for (int j = 0; j < kNormPerThread; ++j) {
      if (second) v[j] = x0[j] + a[j];
      else if (d.parallel_block) v[j] = x0[j] + a[j] + f[j];
      else v[j] = x0[j] + f[j];
    }
  }
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) {
    const int i = c.tid() + j * kConsumerThreads;
    if (i < H) x[i] = v[j];
  }
  float mean = 0.f;
  if (d.norm_layer) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kNormPerThread; ++j)
      if (c.tid() + j * kConsumerThreads < H) s += v[j];
    mean = c.block_sum(s) / static_cast<float>(H);
  }
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j)
    if (c.tid() + j * kConsumerThreads < H) ss += (v[j] - mean) * (v[j] - mean);
  const float rinv = 1.0f / sqrtf(c.block_sum(ss) / static_cast<float>(H) + d.norm_eps);
  const float* w = final ? p.final_norm : (second ? p.layers[in.layer].ffn_norm : p.layers[in.layer].attn_norm);
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) {
    const int i = c.tid() + j * kConsumerThreads;
    if (i >= H) continue;
    const float y = w[i] * ((v[j] - mean) * rinv);
    p.hf[int64_t(r) * H + i] = y;
    p.h[int64_t(r) * H + i] = __bfloat16_as_ushort(__float2bfloat16_rn(y));
  }
  return true;
}

// kRoute: warp n routes row n (route_token, the layered kernels' function);
// the plan lists the routed experts ascending with their members (selection
// ids n * K + k), the layout of moe_plan_view. Then "down done" gets
// 1 - routed experts x down tiles, so the next norm's static target holds.
__device__ __forceinline__ bool op_route(Ctx& c, const Instruction& in) {
  const Params& p = c.p;
  const Dims& d = p.dims;
  const int R = p.rows, E = d.n_experts, K = d.top_k;
  int32_t* cnt = reinterpret_cast<int32_t*>(c.s.scratch);         // (E)
  int32_t* cursor = cnt + 256;                                     // (E)
  float* sel_val = reinterpret_cast<float*>(cursor + 256);         // (R, 32)
  int32_t* sel_id = reinterpret_cast<int32_t*>(sel_val + kMaxRows * kRouteMaxK);  // (R, 32)
  int32_t* plan = p.plan;
  int32_t *active = plan + 1, *offset = plan + 1 + E, *count = plan + 1 + 2 * E, *members = plan + 1 + 3 * E;
  for (int e = c.tid(); e < E; e += kConsumerThreads) cnt[e] = 0;
  if (c.warp() < R)
    route_token(p.router_logits, c.warp(), E, K, d.router_sigmoid, d.softmax_over_topk, d.norm_topk_prob, p.topk_ids,
                p.topk_w, sel_val + c.warp() * kRouteMaxK, sel_id + c.warp() * kRouteMaxK);
  consumer_sync();
  for (int s = c.tid(); s < R * K; s += kConsumerThreads) {
    const int id = sel_id[(s / K) * kRouteMaxK + s % K];
    atomicAdd(&cnt[id], 1);
    if (p.routing_log) p.routing_log[(int64_t(in.layer) * R) * K + s] = id;
  }
  if (p.router_log)
    for (int i = c.tid(); i < R * E; i += kConsumerThreads)
      p.router_log[int64_t(in.layer) * R * E + i] = __ldcg(p.router_logits + i);
  consumer_sync();
  if (c.warp() == 0) {  // compaction: lane l owns experts [l * per, (l + 1) * per)
    const int per = (E + 31) / 32;
    int na = 0, run = 0;
    for (int i = 0; i < per; ++i) {
      const int e = c.lane() * per + i;
      if (e < E) {
        na += cnt[e] > 0;
        run += cnt[e];
      }
    }
    int na_inc = na, run_inc = run;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int a = __shfl_up_sync(0xffffffffu, na_inc, o), b = __shfl_up_sync(0xffffffffu, run_inc, o);
      if (c.lane() >= o) {
        na_inc += a;
        run_inc += b;
      }
    }
    int n = na_inc - na, at = run_inc - run;
    for (int i = 0; i < per; ++i) {
      const int e = c.lane() * per + i;
      if (e < E && cnt[e] > 0) {
        active[n] = e;
        offset[n] = at;
        count[n] = cnt[e];
        cursor[e] = at;
        at += cnt[e];
        ++n;
      }
    }
    if (c.lane() == 31) {
      plan[0] = na_inc;
      c.s.flag = na_inc;
    }
  }
  consumer_sync();
  const int n_active = c.s.flag;
  // Members in selection order within each expert (the interpreter's plan):
  // selection s goes after the earlier selections of its expert.
  for (int s = c.tid(); s < R * K; s += kConsumerThreads) {
    const int id = sel_id[(s / K) * kRouteMaxK + s % K];
    int rank = 0;
    for (int q = 0; q < s; ++q) rank += sel_id[(q / K) * kRouteMaxK + q % K] == id;
    members[cursor[id] + rank] = s;
  }
  consumer_sync();
  if (c.tid() == 0 && !c.drain) {
    p.counters[p.ctr.n_active(in.layer)] = uint32_t(n_active);
    __threadfence();
    atomicAdd(p.counters + p.ctr.down_done(in.layer), uint32_t(1 - n_active * ::ms::mk::expert_down_tiles(d)));
  }
  return true;
}

}  // namespace ms::gpu::mk
