// kNorm / kFinalNorm (the residual update of one row and its norm) and
// kRoute (top-k of every row and the routing plan the claim queues read).
#pragma once

#include "gpu/mk/consumer_ctx.cuh"
#include "gpu/ops/moe_route.cuh"

namespace ms::gpu::mk {

// A thread's columns: quads q = tid + j * kConsumerThreads, columns
// [4 q, 4 q + 4) (hidden is a multiple of 16: mk::check_supported).
constexpr int kNormQuads = kMaxActCols / 4 / kConsumerThreads;
// A norm's source rows in flight at once (op_norm): by cp.async into the
// activation buffer (4 rows) and the scratch after the rows' addresses (1),
// and into registers (3; 4 spilled the kernel).
constexpr int kNormActRows = 4;
constexpr int kNormSmemRows = kNormActRows + 1;
constexpr int kNormRegRows = 3;
constexpr int kNormScratchRow = kClaimPlanOffset + ::ms::mk::kMaxNormSources * 8;
static_assert(kNormActRows * kMaxActCols * 4 <= kActBytes, "the cp.async rows fit the activation buffer");
static_assert(kNormScratchRow + kMaxActCols * 4 <= kScratchBytes - 128, "a row fits below block_sum's words");

__device__ __forceinline__ float4 ldcg4(const float* p) { return __ldcg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ void add4(float4& a, const float4 b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

// Whether kNorm sums x and the O-projection's partials (wait[0]) before it
// waits for the FFN's outputs (wait[1]): a parallel block's first norm after
// layer 0 (consumer_main then waits on wait[0] alone). Measured in one
// process at round 10 (bs 1 / 2 / 8 at 8K): 3.198 / 4.316 / 10.620 ->
// 3.165 / 4.303 / 10.532 ms against waiting for both first.
__device__ __forceinline__ bool norm_split_waits(const Params&, const Instruction& in) {
  return in.op == Opcode::kNorm && !(in.flags & ::ms::mk::kFlagNormSecond) &&
         in.wait[1].counter != ::ms::mk::kNoCounter;
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
  float* x = p.x + int64_t(r) * H;
  const bool embed = !final && in.layer == 0 && !second;
  const bool prev_moe = prev >= 0 && p.layer_info[prev].moe;
  const float* w = final ? p.final_norm : (second ? p.layers[in.layer].ffn_norm : p.layers[in.layer].attn_norm);
  // The weights' lines into L1 first, with the sources' loads (read after
  // the sums: one L2 round trip less on the critical path; loads held in
  // registers that long spilled the kernel).
  for (int q = c.tid() * 8; q < Q; q += kConsumerThreads * 8) prefetch_l1(w + 4 * q);
  // The updated residual row, quad q at vs[q] (each thread reads back only
  // its own quads: no barrier): the source loop below runs quad by quad
  // without a register array indexed by the quad.
  float4* vs = reinterpret_cast<float4*>(c.s.scratch);
  static_assert(kMaxActCols * 4 <= kClaimPlanOffset, "the row fits below the claim plan");
  if (embed) {
    const int tok = p.meta->tokens[r];
#pragma unroll
    for (int j = 0; j < kNormQuads; ++j) {
      const int q = c.tid() + j * kConsumerThreads;
      if (q < Q) {
        const uint2 b = __ldg(reinterpret_cast<const uint2*>(p.embed + int64_t(tok) * H) + q);
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&b.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&b.y));
        vs[q] = make_float4(lo.x, lo.y, hi.x, hi.y);
      }
    }
  } else {
    // The sources as one list of rows: [0, na) the O-projection's per-group
    // partials (attention), [na, na + nf) the previous layer's FFN (expert
    // outputs per selection, or the dense FFN's down slices), [na + nf, n)
    // the shared expert's down slices (in groups, every load of a group in
    // flight at once: below). The sums keep the interpreter's order per
    // column (mk_vm.cpp norm_row).
    const int na = (second || d.parallel_block) ? d.n_kv_heads : 0;
    const int nf = second ? 0 : (prev_moe ? d.top_k : ::ms::mk::down_slices(d.dense_ffn));
    const int ns = (!second && prev_moe && d.shared_ffn > 0) ? ::ms::mk::down_slices(d.shared_ffn) : 0;
    const int n = na + nf + ns;
    // The rows' addresses in shared memory (read back as a broadcast per
    // load: 64-bit addresses held in registers for a whole batch spilled
    // the kernel), where a claim loop keeps its plan (rebuilt by each
    // claim instruction).
    const float** rows = reinterpret_cast<const float**>(c.s.scratch + kClaimPlanOffset);
    static_assert(::ms::mk::kMaxNormSources * sizeof(float*) <= sizeof(ClaimPlan), "the rows' addresses fit");
    for (int sidx = c.tid(); sidx < n; sidx += kConsumerThreads) {  // n <= kMaxNormSources (check_supported)
      const float* a;
      if (sidx < na)
        a = p.o_part + (int64_t(sidx) * R + r) * H;
      else if (sidx < na + nf)
        a = prev_moe ? p.ybuf + (int64_t(r) * d.top_k + (sidx - na)) * H
                     : p.dense_part + (int64_t(sidx - na) * R + r) * H;
      else
        a = p.shared_part + (int64_t(sidx - na - nf) * R + r) * H;
      rows[sidx] = a;
    }
    consumer_sync();
    // Split waits (norm_split_waits): x and the O-projection's partials are
    // summed after wait[0], the FFN's after wait[1] (the FFN's down tiles
    // finish last at bs 1: only their loads stay after the last wait). The
    // per-column order of the sums is the same either way (v = x; v += a;
    // v += f), so the two phases compute the same bits as one.
    // The sources go in groups of up to kNormSmemRows + kNormRegRows rows,
    // every load of a group in flight at once: the first rows by cp.async
    // into the activation buffer (free here: the waits' barrier is behind
    // every reader of the previous instruction; its tag is dropped) and a
    // row of scratch, the others into registers. At NMC (4 O-projection
    // partials, 8 experts) each phase is one round trip.
    const bool split = norm_split_waits(p, in);
    const int act_rows = min(kNormActRows, kActBytes / (H * 4)), smem_rows = act_rows + 1;
    auto srow = [&](int i) {  // smem source row i of a group
      return reinterpret_cast<float*>(i < act_rows ? c.s.act + i * H * 4 : c.s.scratch + kNormScratchRow);
    };
    c.act = 0;
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    float4 v[kNormQuads], a[kNormQuads], f[kNormQuads], y[kNormQuads];  // x; attention, FFN, shared expert
#pragma unroll 1
    for (int phase = split ? 0 : 1; phase < 2; ++phase) {
      const int lo = phase == 0 ? 0 : (split ? na : 0), hi = phase == 0 ? na : n;
      if (phase == 1 && split) {
        const uint64_t t0 = p.timeline && c.tid() == 0 ? global_timer() : 0;
        c.wait(in.wait[1].counter, in.wait[1].target);
        if (p.timeline && c.tid() == 0) c.t_stall = uint32_t(global_timer() - t0);  // timeline: the FFN's wait
      }
#pragma unroll
      for (int j = 0; j < kNormQuads; ++j) {
        const int q = c.tid() + j * kConsumerThreads;
        v[j] = q >= Q ? z : lo == 0 ? ldcg4(x + 4 * q) : vs[q];
        a[j] = f[j] = y[j] = z;
      }
#pragma unroll 1
      for (int g0 = lo; g0 < hi; g0 += kNormSmemRows + kNormRegRows) {
        const int gs = min(smem_rows, hi - g0), gr = min(kNormRegRows, hi - g0 - gs);
#pragma unroll 1
        for (int i = 0; i < gs; ++i)
#pragma unroll
          for (int j = 0; j < kNormQuads; ++j) {
            const int q = c.tid() + j * kConsumerThreads;
            if (q < Q)
              cp_async_16(static_cast<uint32_t>(__cvta_generic_to_shared(srow(i) + 4 * q)), rows[g0 + i] + 4 * q);
          }
        float4 t[kNormRegRows][kNormQuads];
#pragma unroll
        for (int i = 0; i < kNormRegRows; ++i)
#pragma unroll
          for (int j = 0; j < kNormQuads; ++j) {
            const int q = c.tid() + j * kConsumerThreads;
            t[i][j] = i < gr && q < Q ? ldcg4(rows[g0 + gs + i] + 4 * q) : z;
          }
        cp_async_wait_all();  // this thread's own copies: it reads back only its own quads
        auto add_src = [&](int sidx, int j, float4 val) {
          if (sidx < na)
            add4(a[j], val);
          else if (sidx < na + nf)
            add4(f[j], val);
          else
            add4(y[j], val);
        };
#pragma unroll 1
        for (int i = 0; i < gs; ++i)
#pragma unroll
          for (int j = 0; j < kNormQuads; ++j) {
            const int q = c.tid() + j * kConsumerThreads;
            if (q < Q) add_src(g0 + i, j, *reinterpret_cast<const float4*>(srow(i) + 4 * q));
          }
#pragma unroll
        for (int i = 0; i < kNormRegRows; ++i)
#pragma unroll
          for (int j = 0; j < kNormQuads; ++j)
            if (i < gr) add_src(g0 + gs + i, j, t[i][j]);
      }
#pragma unroll
      for (int j = 0; j < kNormQuads; ++j) {
        const int q = c.tid() + j * kConsumerThreads;
        if (q >= Q) continue;
        if (ns > 0 && hi == n) {
          add4(f[j], y[j]);
          if (!d.shared_sum) f[j] = make_float4(f[j].x / 2, f[j].y / 2, f[j].z / 2, f[j].w / 2);
        }
        if (lo < na) add4(v[j], a[j]);  // na > 0: the second norm, or a parallel block's first
        if (hi > na && !second) add4(v[j], f[j]);
        vs[q] = v[j];
        if (hi == n) *reinterpret_cast<float4*>(x + 4 * q) = v[j];
      }
    }
  }
  if (p.timeline && c.tid() == 0) c.t_data = global_timer();  // timeline: the sources are summed
  float4 v[kNormQuads];
#pragma unroll
  for (int j = 0; j < kNormQuads; ++j) {
    const int q = c.tid() + j * kConsumerThreads;
    v[j] = q < Q ? vs[q] : make_float4(0.f, 0.f, 0.f, 0.f);
    if (embed && q < Q) *reinterpret_cast<float4*>(x + 4 * q) = v[j];
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
  if (p.route_fast && R == 1) {
    // Params::route_fast, batch 1: the row's K selections are K distinct
    // experts, so the plan is their ids ascending with one member each
    // (selection k at its id's rank): one warp, no counts, compaction or
    // member-rank passes and their barriers (the general plan below took
    // ~3.1 us at bs 1 / 8K: round 9's timeline).
    if (c.warp() == 0) {
      const int k = c.lane();
      const int id = k < K ? sel_id[k] : 0;
      int rank = 0;
      for (int j = 0; j < K; ++j) rank += sel_id[j] < id;
      if (k < K) {
        active[rank] = id;
        offset[rank] = rank;
        count[rank] = 1;
        members[rank] = k;
        if (p.routing_log) p.routing_log[int64_t(layer) * K + k] = id;
      }
      if (k == 0) plan[0] = K;
    }
    if (p.router_log)
      for (int i = c.tid(); i < E; i += kConsumerThreads)
        p.router_log[int64_t(layer) * E + i] = __ldcg(p.router_logits + i);
    if (c.tid() == 0 && !c.drain) {
      p.counters[p.ctr.n_active(layer)] = uint32_t(K);
      atomicAdd(p.counters + p.ctr.down_done(layer), uint32_t(1 - K * ::ms::mk::expert_down_tiles(d)));
    }
    return true;
  }
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
