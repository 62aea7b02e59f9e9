// kNorm / kFinalNorm (the residual update of one row and its norm) and
// kRoute (top-k of every row and the routing plan the claim queues read).
#pragma once

#include "gpu/mk/consumer_ctx.cuh"
#include "gpu/ops/moe_route.cuh"

namespace ms::gpu::mk {

// A thread's columns: quads q = tid + j * kConsumerThreads, columns
// [4 q, 4 q + 4) (hidden is a multiple of 16: mk::check_supported).
constexpr int kNormQuads = kMaxActCols / 4 / kConsumerThreads;

__device__ __forceinline__ float4 ldcg4(const float* p) { return __ldcg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ void add4(float4& a, const float4 b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

// x += the outputs the instruction adds (mk_vm.cpp norm_row gives the
// order), then h = norm(x) * w in bf16 (matmul input) and hf in fp32
// (router input). Layer 0's first norm starts from the token's embedding.
__device__ __forceinline__ bool op_norm(Ctx& c, const Instruction& in) {
  const Params& p = c.p;
  const Dims& d = p.dims;
  const int R = p.rows, H = d.hidden, r = in.rows.row, Q = H / 4;
  const bool final = in.op == Opcode::kFinalNorm, second = in.flags & ::ms::mk::kFlagNormSecond;
  const int prev = final ? d.n_layers - 1 : in.layer - 1;
  float4 v[kNormQuads];
  float* x = p.x + int64_t(r) * H;
  const bool embed = !final && in.layer == 0 && !second;
  const bool prev_moe = prev >= 0 && p.layer_info[prev].moe;
  // Every source's 16-byte loads are issued together (unrolled over the
  // sources): the norm is on every layer's critical path, where each L2
  // round trip in turn costs ~0.6 us (docs/megakernel.md). The sums keep
  // the interpreter's order per column.
  if (embed) {
    const int tok = p.meta->tokens[r];
#pragma unroll
    for (int j = 0; j < kNormQuads; ++j) {
      const int q = c.tid() + j * kConsumerThreads;
      if (q < Q) {
        const uint2 b = __ldg(reinterpret_cast<const uint2*>(p.embed + int64_t(tok) * H) + q);
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&b.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&b.y));
        v[j] = make_float4(lo.x, lo.y, hi.x, hi.y);
      }
    }
  } else {
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    float4 a[kNormQuads], f[kNormQuads], x0[kNormQuads];
#pragma unroll
    for (int j = 0; j < kNormQuads; ++j) {
      const int q = c.tid() + j * kConsumerThreads;
      a[j] = z;  // attention: the O-projection's per-group partials
      f[j] = z;  // FFN of the previous layer
      x0[j] = q < Q ? ldcg4(x + 4 * q) : z;
    }
    if (second || d.parallel_block) {
#pragma unroll 8
      for (int g = 0; g < d.n_kv_heads; ++g)
#pragma unroll
        for (int j = 0; j < kNormQuads; ++j) {
          const int q = c.tid() + j * kConsumerThreads;
          if (q < Q) add4(a[j], ldcg4(p.o_part + (int64_t(g) * R + r) * H + 4 * q));
        }
    }
    if (!second) {
      if (prev_moe) {
#pragma unroll 8
        for (int k = 0; k < d.top_k; ++k)
#pragma unroll
          for (int j = 0; j < kNormQuads; ++j) {
            const int q = c.tid() + j * kConsumerThreads;
            if (q < Q) add4(f[j], ldcg4(p.ybuf + (int64_t(r) * d.top_k + k) * H + 4 * q));
          }
        if (d.shared_ffn > 0) {
          float4 y[kNormQuads];
#pragma unroll
          for (int j = 0; j < kNormQuads; ++j) y[j] = z;
          for (int sl = 0; sl < ::ms::mk::down_slices(d.shared_ffn); ++sl)
#pragma unroll
            for (int j = 0; j < kNormQuads; ++j) {
              const int q = c.tid() + j * kConsumerThreads;
              if (q < Q) add4(y[j], ldcg4(p.shared_part + (int64_t(sl) * R + r) * H + 4 * q));
            }
#pragma unroll
          for (int j = 0; j < kNormQuads; ++j) {
            add4(f[j], y[j]);
            if (!d.shared_sum) f[j] = make_float4(f[j].x / 2, f[j].y / 2, f[j].z / 2, f[j].w / 2);
          }
        }
      } else {
        for (int sl = 0; sl < ::ms::mk::down_slices(d.dense_ffn); ++sl)
#pragma unroll
          for (int j = 0; j < kNormQuads; ++j) {
            const int q = c.tid() + j * kConsumerThreads;
            if (q < Q) add4(f[j], ldcg4(p.dense_part + (int64_t(sl) * R + r) * H + 4 * q));
          }
      }
    }
#pragma unroll
    for (int j = 0; j < kNormQuads; ++j) {
      v[j] = x0[j];
      if (second) {
        add4(v[j], a[j]);
      } else if (d.parallel_block) {
        add4(v[j], a[j]);
        add4(v[j], f[j]);
      } else {
        add4(v[j], f[j]);
      }
    }
  }
  if (p.timeline && c.tid() == 0) c.t_data = global_timer();  // timeline: the sources are summed
#pragma unroll
  for (int j = 0; j < kNormQuads; ++j) {
    const int q = c.tid() + j * kConsumerThreads;
    if (q < Q) *reinterpret_cast<float4*>(x + 4 * q) = v[j];
  }
  float mean = 0.f;
  if (d.norm_layer) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kNormQuads; ++j)
      if (c.tid() + j * kConsumerThreads < Q) s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    mean = c.block_sum(s) / static_cast<float>(H);
  }
  float ss = 0.f;
  auto sq = [mean](float t) { return (t - mean) * (t - mean); };
#pragma unroll
  for (int j = 0; j < kNormQuads; ++j)
    if (c.tid() + j * kConsumerThreads < Q) ss += (sq(v[j].x) + sq(v[j].y)) + (sq(v[j].z) + sq(v[j].w));
  const float rinv = 1.0f / sqrtf(c.block_sum(ss) / static_cast<float>(H) + d.norm_eps);
  const float* w = final ? p.final_norm : (second ? p.layers[in.layer].ffn_norm : p.layers[in.layer].attn_norm);
#pragma unroll
  for (int j = 0; j < kNormQuads; ++j) {
    const int q = c.tid() + j * kConsumerThreads;
    if (q >= Q) continue;
    const float4 wq = __ldg(reinterpret_cast<const float4*>(w) + q);
    const float4 y = make_float4(wq.x * ((v[j].x - mean) * rinv), wq.y * ((v[j].y - mean) * rinv),
                                 wq.z * ((v[j].z - mean) * rinv), wq.w * ((v[j].w - mean) * rinv));
    *reinterpret_cast<float4*>(p.hf + int64_t(r) * H + 4 * q) = y;
    const __nv_bfloat162 lo = __floats2bfloat162_rn(y.x, y.y), hi = __floats2bfloat162_rn(y.z, y.w);
    *reinterpret_cast<uint2*>(p.h + int64_t(r) * H + 4 * q) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  }
  return true;
}

// kRoute: warp n routes row n (route_token, the layered kernels' function);
// the plan lists the routed experts ascending with their members (selection
// ids n * K + k), the layout of moe_plan_view. Then "down done" gets
// 1 - routed experts x down tiles, so the next norm's static target holds.
__device__ __forceinline__ bool op_route(Ctx& c, int layer) {
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
  if (p.timeline && c.tid() == 0) c.t_data = global_timer();  // timeline: top-k done (the plan is the rest)
  for (int s = c.tid(); s < R * K; s += kConsumerThreads) {
    const int id = sel_id[(s / K) * kRouteMaxK + s % K];
    atomicAdd(&cnt[id], 1);
    if (p.routing_log) p.routing_log[(int64_t(layer) * R) * K + s] = id;
  }
  if (p.router_log)
    for (int i = c.tid(); i < R * E; i += kConsumerThreads)
      p.router_log[int64_t(layer) * R * E + i] = __ldcg(p.router_logits + i);
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
  // No fence here: the instruction's signal (consumer_main: a barrier, then
  // thread 0's red.release) orders the plan, n_active and the adjustment
  // before the claim loops see the routing, and so before any down tile's
  // tally reaches "down done" (which must not overtake the adjustment).
  if (c.tid() == 0 && !c.drain) {
    p.counters[p.ctr.n_active(layer)] = uint32_t(n_active);
    atomicAdd(p.counters + p.ctr.down_done(layer), uint32_t(1 - n_active * ::ms::mk::expert_down_tiles(d)));
  }
  return true;
}

}  // namespace ms::gpu::mk
