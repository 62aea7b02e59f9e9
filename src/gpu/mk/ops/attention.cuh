// kAttention and kAttnCombine: paged decode attention of one (row, KV head,
// split) over K/V stages that the loader streamed before the QKV tiles of
// the head were done (the past keys do not depend on this step); the new
// token's key and value come from this step's QKV output instead of the
// cache, substituted per lane in the ldmatrix row addresses.
//
// The score and value math is the layered decode kernel's
// (attention_mma.cuh): the GQA group's G <= 16 query heads are the M of
// mma.sync m16n8k16, q split into bf16 hi + lo (q = hi + lo to ~2^-17), P
// rounded to bf16 for P V, online softmax in the log2 domain. Eight warps:
// warp w takes keys [16 (w % 4), + 16) of every stage and the output
// dimensions of half w / 4 (warps w and w + 4 compute the same scores: the
// QK^T mma is cheap, and half of O's accumulators per thread keeps the
// split inside the 168 registers a thread has with the rest of the
// consumer state live: 64 accumulators spilled); the four key ranges'
// states merge in a tree through shared memory (deterministic). One split's
// partial (o, lse) goes to the workspace; kAttnCombine merges the splits by
// log-sum-exp.
//
// Two kernels (megakernel.cu's template parameter kPack, chosen by G at
// launch): where G <= 8 (NMC, Qwen3-MoE, Llama) half of the mma's 16 rows
// would be padding, so head h's hi half sits in row h and its lo half in
// row h + 8 of one A fragment: one mma computes both products, and the
// thread that holds row h's accumulators holds row h + 8's, so S is their
// sum with no shuffle: half the Q K^T mma and q fragment loads, one softmax
// row a thread instead of two (P's rows 8-15 are zero). Round 13, in one
// process against the unpacked kernel: on the H200 bs 1 / 8K -0.4 to -1.9%,
// 128K -6.3 to -6.6%, bs 8 / 8K -1.7 to -2.5%, 128K -11.2 to -11.4% (three
// processes: the long contexts were the consumers' time); on an H100 bs 1 /
// 8K -1.1%, 64K -0.5%, bs 8 / 8K 0, 64K +1.3% (there the step is
// bandwidth-bound and a faster attention only moves its KV reads earlier:
// with no stage math at all it is 4.6% slower).
#pragma once

#include "gpu/common/mma.cuh"
#include "gpu/mk/consumer_ctx.cuh"

namespace ms::gpu::mk {

// Which kernel a model runs (megakernel.cu): q's hi / lo halves packed into
// one mma where the G query heads of a KV head fit its 16 rows twice.
__host__ __device__ constexpr bool attention_packed(int group) { return group <= 8; }

// Shared memory during kAttention (the activation buffer is borrowed: its
// tag is cleared). The q fragments live in shared memory rather than in
// registers: with 9 warps per CTA one SM sub-partition holds 3 warps, so a
// thread has at most 168 registers, and 64 of them for q spilled the
// accumulators (ptxas: 268 bytes of spills).
constexpr int kQfragOffset = 0;      // scratch: (hd / 16 k-steps, hi / lo, 32 lanes) uint4 A fragments
constexpr int kFreshOffset = 8192;   // scratch: new key (hd bf16), new value (hd bf16), a zero row (hd bf16)
constexpr int kStatOffset = 9216;    // scratch: m and l per (warp, row): 2 x 8 x 16 fp32
// act: (G, hd) fp32 prepared q (normed, roped, log2-scaled); later the merge's (4, 16, hd) fp32
// act + kRawOffset: (G + 2, hd) fp32, this step's q, k and v of the group as QKV wrote them
constexpr int kRawOffset = 16 * 128 * 4;
static_assert(kRawOffset + 18 * 128 * 4 <= kActBytes, "the raw q / k / v of G <= 16 heads at hd <= 128");

// q of the group's heads and the new key / value: QK-norm, RoPE at the row's
// position, q scaled into the log2 domain, K / V rounded to bf16 (and written
// into the cache by the split that owns the new key). Warp w prepares heads
// w, w + 8, ... of the G + 2 vectors (q heads, k, v); lane l the RoPE pairs
// l + 32 j.
template <int HD, bool kPack>
__device__ __forceinline__ void attention_prep(Ctx& c, const Instruction& in, int pos, bool owner) {
  const Params& p = c.p;
  const Dims& d = p.dims;
  const LayerPtrs& L = p.layers[in.layer];
  const int G = d.group, r = in.attn.row, g = in.attn.kv_head;
  const bool rope = p.layer_info[in.layer].rope;
  float* qs = reinterpret_cast<float*>(c.s.act);
  c.act = 0;
  uint16_t* fresh = reinterpret_cast<uint16_t*>(c.s.scratch + kFreshOffset);
  constexpr int kPairs = HD / 2, kPerLane = (kPairs + 31) / 32;
  const float qscale = d.attn_scale * 1.4426950408889634f;  // log2(e)
  // The G + 2 vectors from L2 into shared memory first, every 16-byte piece
  // in flight at once: with more vectors than warps (G + 2 = 10 at NMC's
  // G = 8) the warps that prepare two vectors paid a second L2 round trip
  // (~0.7-1 us under the weight stream) on the attention's critical path.
  float* raw = reinterpret_cast<float*>(c.s.act + kRawOffset);
  constexpr int kPieces = HD / 4;
#pragma unroll 1
  for (int e = c.tid(); e < (G + 2) * kPieces; e += kConsumerThreads) {
    const int v = e / kPieces, q = e % kPieces;
    const float* src = p.qkv + int64_t(r) * d.qkv_width +
                       (v < G ? (g * G + v) * HD : d.q_width + (v == G ? 0 : d.kv_width) + g * HD);
    cp_async_16(smem_u32(raw + v * HD + q * 4), src + q * 4);
  }
  cp_async_wait_all();
  consumer_sync();
  for (int v = c.warp(); v < G + 2; v += kConsumerWarps) {
    const float* src = raw + v * HD;
    float x[kPerLane][2];
    int ia[kPerLane], ib[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int pi = c.lane() + 32 * j;
      ia[j] = d.rope_neox ? pi : 2 * pi;
      ib[j] = d.rope_neox ? pi + HD / 2 : 2 * pi + 1;
      x[j][0] = pi < kPairs ? src[ia[j]] : 0.f;
      x[j][1] = pi < kPairs ? src[ib[j]] : 0.f;
    }
    const bool is_v = v == G + 1;
    if (d.qk_norm && !is_v) {
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) ss += x[j][0] * x[j][0] + x[j][1] * x[j][1];
      ss = warp_sum(ss);
      const float rinv = 1.0f / sqrtf(ss / static_cast<float>(HD) + d.norm_eps);
      const float* w = v < G ? L.q_norm : L.k_norm;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (c.lane() + 32 * j < kPairs) {
          x[j][0] = w[ia[j]] * (x[j][0] * rinv);
          x[j][1] = w[ib[j]] * (x[j][1] * rinv);
        }
    }
    if (rope && !is_v) {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int pi = c.lane() + 32 * j;
        if (pi < kPairs) {
          const float ang = p.inv_freq[pi] * static_cast<float>(pos);
          float sn, cs;
          sincosf(ang, &sn, &cs);  // one range reduction (its slow path is ~180 instructions a copy)
          const float a = x[j][0], b = x[j][1];
          x[j][0] = a * cs - b * sn;
          x[j][1] = b * cs + a * sn;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (c.lane() + 32 * j >= kPairs) continue;
      if (v < G) {
        qs[v * HD + ia[j]] = x[j][0] * qscale;
        qs[v * HD + ib[j]] = x[j][1] * qscale;
      } else {
        uint16_t* dst = fresh + (is_v ? HD : 0);
        dst[ia[j]] = __bfloat16_as_ushort(__float2bfloat16_rn(x[j][0]));
        dst[ib[j]] = __bfloat16_as_ushort(__float2bfloat16_rn(x[j][1]));
      }
    }
  }
  // A zero V row for keys outside [lo, pos]: their P is 0, but 0 times a
  // non-finite value left in the stage by another sequence would be NaN.
  for (int i = c.tid(); i < HD; i += kConsumerThreads) fresh[2 * HD + i] = 0;
  consumer_sync();
  // q as mma A fragments, hi and lo bf16 halves: entry (k-step ks, lane) of
  // every warp's fragments, one per thread. Packed (G <= 8): one fragment a
  // k-step, head h's hi half in the mma's row h and its lo half in row h + 8.
  uint4* qfrag = reinterpret_cast<uint4*>(c.s.scratch + kQfragOffset);
  if (kPack) {
    for (int e = c.tid(); e < (HD / 16) * 32; e += kConsumerThreads) {
      const int ks = e / 32, ln = e % 32, g = ln >> 2, t = ln & 3;
      uint32_t hl[4];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int dd = ks * 16 + j * 8 + 2 * t;
        const float2 v = g < G ? make_float2(qs[g * HD + dd], qs[g * HD + dd + 1]) : make_float2(0.f, 0.f);
        q_hilo(v, hl[2 * j], hl[2 * j + 1]);
      }
      qfrag[ks * 32 + ln] = make_uint4(hl[0], hl[1], hl[2], hl[3]);
    }
  }
  for (int e = c.tid(); !kPack && e < (HD / 16) * 32; e += kConsumerThreads) {
    const int ks = e / 32, ln = e % 32, g = ln >> 2, t = ln & 3;
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = g + (i & 1) * 8, dd = ks * 16 + (i >> 1) * 8 + 2 * t;
      const float2 v = row < G ? make_float2(qs[row * HD + dd], qs[row * HD + dd + 1]) : make_float2(0.f, 0.f);
      q_hilo(v, hi[i], lo[i]);
    }
    qfrag[(ks * 2 + 0) * 32 + ln] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    qfrag[(ks * 2 + 1) * 32 + ln] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
  consumer_sync();
  if (owner && !c.drain) {  // the new token's K and V into the paged cache (read from the next step on)
    const int bs = d.block_size;
    const int32_t* table = p.tables + (int64_t(r) * p.n_groups + L.kv_group) * p.table_stride;
    const int32_t blk = table[pos / bs];
    const int64_t off = ((int64_t(blk) * d.n_kv_heads + g) * bs + pos % bs) * HD;
    for (int i = c.tid(); i < 2 * HD; i += kConsumerThreads)
      (i < HD ? L.k_cache : L.v_cache)[off + (i % HD)] = fresh[i];
  }
}

// S += q K^T over the head dimension for one warp's 16 keys (two n-tiles of
// 8), q's bf16 hi and lo halves into the same accumulator (two dependent
// chains: NKS mma packed, 2 NKS unpacked). Lane rows: key kj of the stage
// (or the new key, fresh_k), chunk kst * 2 + (mi & 1). Round 13 measured
// a second accumulator pair (chains half as long) as a build of its own:
// on an H100 bs 1 / 8K -2.9%, on the H200 within the spread between
// processes (bs 1 / 8K +2.8% against the median of three default runs,
// 128K +1.0%, bs 8 -0.4 / -0.6%), so it was removed.
template <int HD, bool kPack>
__device__ __forceinline__ void attention_scores(float (&s0)[4], float (&s1)[4], const unsigned char* krow,
                                                 bool fresh_k, int kj, int mi, const uint4* qfrag, int lane) {
  constexpr int NKS = HD / 16;
  if (kPack) {
    // One mma a k-step and n-tile: rows 0-7 accumulate q_hi K^T, rows 8-15
    // q_lo K^T (the same thread holds both: c0 / c1 and c2 / c3).
#pragma unroll
    for (int kst = 0; kst < NKS; ++kst) {
      const int chunk = kst * 2 + (mi & 1);
      const unsigned char* addr = fresh_k ? krow + chunk * 16 : krow + kv_chunk_offset(HD, kj, chunk);
      uint32_t b[4];
      ldmatrix_x4(b, addr);
      const uint4 a4 = qfrag[kst * 32 + lane];
      const uint32_t a[4] = {a4.x, a4.y, a4.z, a4.w};
      mma_bf16_16816(s0, a, b[0], b[1]);
      mma_bf16_16816(s1, a, b[2], b[3]);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      s0[i] += s0[i + 2];
      s1[i] += s1[i + 2];
    }
    return;
  }
#pragma unroll
  for (int kst = 0; kst < NKS; ++kst) {
    const int chunk = kst * 2 + (mi & 1);
    const unsigned char* addr = fresh_k ? krow + chunk * 16 : krow + kv_chunk_offset(HD, kj, chunk);
    uint32_t b[4];  // (keys 0-7, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 0-7), (keys 8-15, dims 8-15)
    ldmatrix_x4(b, addr);
    const uint4 h4 = qfrag[(kst * 2) * 32 + lane], l4 = qfrag[(kst * 2 + 1) * 32 + lane];
    const uint32_t qh[4] = {h4.x, h4.y, h4.z, h4.w}, ql[4] = {l4.x, l4.y, l4.z, l4.w};
    mma_bf16_16816(s0, qh, b[0], b[1]);
    mma_bf16_16816(s0, ql, b[0], b[1]);
    mma_bf16_16816(s1, qh, b[2], b[3]);
    mma_bf16_16816(s1, ql, b[2], b[3]);
  }
}

template <int HD, bool kPack>
__device__ __forceinline__ bool attention_split(Ctx& c, const Instruction& in) {
  constexpr int NKS = HD / 16, NT = HD / 8;
  static_assert((HD / 16) * 32 * 2 * 16 <= kFreshOffset, "q fragments fit the scratch");
  static_assert(kFreshOffset + 3 * HD * 2 <= kStatOffset, "new K / V and the zero row fit the scratch");
  const Params& p = c.p;
  const Dims& d = p.dims;
  const int G = d.group, r = in.attn.row, split = in.attn.split;
  const int pos = p.meta->pos[r];
  const int window = p.layer_info[in.layer].sliding ? d.sliding_window : 0;
  const ::ms::mk::SplitRange sr = ::ms::mk::split_range(pos, window, split, in.attn.n_splits);
  attention_prep<HD, kPack>(c, in, pos, split == sr.last_split);
  if (sr.stage_end <= sr.stage_begin) return true;  // empty split: the combine reads splits <= last_split

  const int g = c.lane() >> 2, t = c.lane() & 3;
  const unsigned char* fresh = c.s.scratch + kFreshOffset;
  const uint4* qfrag = reinterpret_cast<const uint4*>(c.s.scratch + kQfragOffset);
  constexpr int NH = NT / 2;  // this warp's n-tiles of O: dimensions [half * HD / 2, + HD / 2)
  const int half = c.warp() >> 2, kw = c.warp() & 3;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[NH][4];
#pragma unroll
  for (int nt = 0; nt < NH; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
  const int kb = kw * 16, mi = c.lane() >> 3;
  const int ablate = p.attn_ablate;
  for (int stg = sr.stage_begin; stg < sr.stage_end; ++stg) {
    const bool have = c.acquire(0, stg);
    if (have && ablate != 3) {
      const unsigned char* ks_base = c.stage();
      const unsigned char* vs_base = ks_base + kv_half_bytes(HD);
      const int key0 = stg * kStageKeys;
      // S (16 heads x 16 keys) = Q K^T: n-tile 0 keys kb..kb+7, n-tile 1 kb+8..kb+15.
      float s0[4] = {0.f, 0.f, 0.f, 0.f}, s1[4] = {0.f, 0.f, 0.f, 0.f};
      if (ablate != 1) {
        const int kj = kb + (c.lane() & 7) + (mi >> 1) * 8;
        const bool fresh_k = key0 + kj == pos;
        const unsigned char* krow = fresh_k ? fresh : ks_base;
        attention_scores<HD, kPack>(s0, s1, krow, fresh_k, kj, mi, qfrag, c.lane());
      }
      {  // keys outside [lo, pos] do not count
        const int k0 = key0 + kb + 2 * t;
        auto out = [&](int k) { return k < sr.lo || k > pos; };
        if (out(k0)) s0[0] = s0[2] = -INFINITY;
        if (out(k0 + 1)) s0[1] = s0[3] = -INFINITY;
        if (out(k0 + 8)) s1[0] = s1[2] = -INFINITY;
        if (out(k0 + 9)) s1[1] = s1[3] = -INFINITY;
      }
      uint32_t pa[4] = {0u, 0u, 0u, 0u};  // P as the A fragment (packed: rows 8-15 zero)
#pragma unroll
      for (int rr = 0; rr < (kPack ? 1 : 2); ++rr) {
        float* x0 = s0 + 2 * rr;
        float* x1 = s1 + 2 * rr;
        float mx = fmaxf(fmaxf(x0[0], x0[1]), fmaxf(x1[0], x1[1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[rr], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float corr = exp2f(m[rr] - m_use);
        m[rr] = m_new;
        const __nv_bfloat162 p0 = __floats2bfloat162_rn(exp2f(x0[0] - m_use), exp2f(x0[1] - m_use));
        const __nv_bfloat162 p1 = __floats2bfloat162_rn(exp2f(x1[0] - m_use), exp2f(x1[1] - m_use));
        const float2 f0 = __bfloat1622float2(p0), f1 = __bfloat1622float2(p1);
        l[rr] = l[rr] * corr + ((f0.x + f0.y) + (f1.x + f1.y));
        pa[rr] = *reinterpret_cast<const uint32_t*>(&p0);
        pa[2 + rr] = *reinterpret_cast<const uint32_t*>(&p1);
#pragma unroll
        for (int nt = 0; nt < NH; ++nt) {
          o[nt][2 * rr] *= corr;
          o[nt][2 * rr + 1] *= corr;
        }
      }
      if (ablate != 2) {  // O (16 heads x this warp's HD / 2) += P (16 x 16 keys) V (16 keys x HD / 2)
        const int kv = kb + (c.lane() & 7) + (mi & 1) * 8, kabs = key0 + kv;
        // The row this lane's ldmatrix reads: the new value, a zero row for
        // keys that do not count, or the stage.
        const unsigned char* vrow = kabs == pos ? fresh + HD * 2 : (kabs < sr.lo || kabs > pos) ? fresh + HD * 4 : nullptr;
#pragma unroll
        for (int np = 0; np < NH / 2; ++np) {
          const int chunk = half * (NT / 2) + np * 2 + (mi >> 1);
          const unsigned char* addr = vrow ? vrow + chunk * 16 : vs_base + kv_chunk_offset(HD, kv, chunk);
          uint32_t b[4];  // (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 8-15)
          ldmatrix_x4_trans(b, addr);
          mma_bf16_16816(o[2 * np], pa, b[0], b[1]);
          mma_bf16_16816(o[2 * np + 1], pa, b[2], b[3]);
        }
      }
    }
    c.release();
  }

  // Merge the 4 key ranges (warps kw = 0..3 of each half; both halves hold
  // the same m and l): a common max per row, then the rescaled O summed in a
  // tree (2 + 1 senders per half) through the activation buffer.
  float* mw = reinterpret_cast<float*>(c.s.scratch + kStatOffset);  // (4, 16)
  float* lw = mw + 4 * 16;                                           // (4, 16)
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
    if (t == 0 && half == 0) {
      mw[kw * 16 + g + 8 * rr] = m[rr];
      lw[kw * 16 + g + 8 * rr] = l[rr];
    }
  }
  consumer_sync();
  float M[2], Ls[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = g + 8 * rr;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) mx = fmaxf(mx, mw[w * 16 + row]);
    M[rr] = mx;
    float sum = 0.f;
    if (mx != -INFINITY)
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float mw_w = mw[w * 16 + row];
        if (mw_w != -INFINITY) sum += lw[w * 16 + row] * exp2f(mw_w - mx);
      }
    Ls[rr] = sum;
    const float corr = (m[rr] == -INFINITY || mx == -INFINITY) ? 0.f : exp2f(m[rr] - mx);
#pragma unroll
    for (int nt = 0; nt < NH; ++nt) {
      o[nt][2 * rr] *= corr;
      o[nt][2 * rr + 1] *= corr;
    }
  }
  float* obuf = reinterpret_cast<float*>(c.s.act);  // (2 halves, 2 senders, 16 rows, HD / 2)
  c.act = 0;
  constexpr int HH = HD / 2;
  for (int step = 2; step >= 1; step /= 2) {
    if (kw >= step && kw < 2 * step) {
      float* dst = obuf + (half * 2 + (kw - step)) * 16 * HH;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int row = g + 8 * rr;
        if (row < G)
#pragma unroll
          for (int nt = 0; nt < NH; ++nt)
            *reinterpret_cast<float2*>(dst + row * HH + nt * 8 + 2 * t) = make_float2(o[nt][2 * rr], o[nt][2 * rr + 1]);
      }
    }
    consumer_sync();
    if (kw < step) {
      const float* src = obuf + (half * 2 + kw) * 16 * HH;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int row = g + 8 * rr;
        if (row < G)
#pragma unroll
          for (int nt = 0; nt < NH; ++nt) {
            const float2 v = *reinterpret_cast<const float2*>(src + row * HH + nt * 8 + 2 * t);
            o[nt][2 * rr] += v.x;
            o[nt][2 * rr + 1] += v.y;
          }
      }
    }
    consumer_sync();
  }
  if (kw == 0) {  // warps 0 and 4: their half of the dimensions
    const int S = p.max_splits;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int row = g + 8 * rr;
      if (row >= G) continue;
      const int head = in.attn.kv_head * G + row;
      const int64_t base = (int64_t(r) * d.n_heads + head) * S + split;
      const float inv = Ls[rr] > 0.f ? 1.0f / Ls[rr] : 0.f;
#pragma unroll
      for (int nt = 0; nt < NH; ++nt)
        *reinterpret_cast<float2*>(p.part_o + base * HD + half * HH + nt * 8 + 2 * t) =
            make_float2(o[nt][2 * rr] * inv, o[nt][2 * rr + 1] * inv);
      if (t == 0 && half == 0)
        p.part_lse[base] = Ls[rr] > 0.f ? (M[rr] + log2f(Ls[rr])) * 0.6931471805599453f : -INFINITY;
    }
  }
  return true;
}

template <bool kPack>
__device__ __forceinline__ bool op_attention(Ctx& c, const Instruction& in) {
  switch (c.p.dims.head_dim) {
    case 32: return attention_split<32, kPack>(c, in);
    case 64: return attention_split<64, kPack>(c, in);
    case 128: return attention_split<128, kPack>(c, in);
  }
  return false;
}

// kAttnCombine: the splits 0..last_split of (row, KV head) merged by
// log-sum-exp into attn_out (bf16), the O-projection's input. It sits on
// the attention chain's critical path and is all L2 round trips, so it is
// written to have few of them in turn: the splits' lse are read for every
// slot at once with the row's position (which says how many splits count),
// warp h turns head h's into weights (max and sum over the lanes, already
// divided by the sum), then a thread takes 4 adjacent dimensions of one
// head (16-byte loads) with 8 splits' loads in flight (12 or 16 spill the
// kernel: tools/check_mk_ptxas.sh). At 9268f8a (a thread's serial max /
// exp / sum per head, a loop unrolled by 12) it took ~9 us after its wait at
// batch 1 / 8K, 33 splits.
__device__ __forceinline__ bool op_combine(Ctx& c, const Instruction& in) {
  static_assert(::ms::mk::kMaxSplits <= 64, "two splits per lane");
  const Params& p = c.p;
  const Dims& d = p.dims;
  const int G = d.group, HD = d.head_dim, r = in.attn.row, g = in.attn.kv_head, S = p.max_splits;
  float* wgt = reinterpret_cast<float*>(c.s.scratch);  // (G, n): split s's share of head h
  const bool sliding = p.layer_info[in.layer].sliding;
  const int pos = p.meta->pos[r];
  // Every slot's lse (the ones past the last split are stale and masked
  // below): the loads do not wait for the position.
  float l0[2], l1[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int h = c.warp() + i * kConsumerWarps;
    const float* src = p.part_lse + (int64_t(r) * d.n_heads + g * G + min(h, G - 1)) * S;
    l0[i] = c.lane() < S ? __ldcg(src + c.lane()) : -INFINITY;
    l1[i] = c.lane() + 32 < S ? __ldcg(src + c.lane() + 32) : -INFINITY;
  }
  const int n = ::ms::mk::split_range(pos, sliding ? d.sliding_window : 0, 0, in.attn.n_splits).last_split + 1;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int h = c.warp() + i * kConsumerWarps;  // G <= 16 (check_supported)
    if (h >= G) continue;
    const float a = c.lane() < n ? l0[i] : -INFINITY, b = c.lane() + 32 < n ? l1[i] : -INFINITY;
    const float mx = warp_max(fmaxf(a, b));
    const float wa = a == -INFINITY ? 0.f : expf(a - mx), wb = b == -INFINITY ? 0.f : expf(b - mx);
    const float den = warp_sum(wa + wb);
    const float inv = den > 0.f ? 1.f / den : 0.f;
    if (c.lane() < n) wgt[h * n + c.lane()] = wa * inv;
    if (c.lane() + 32 < n) wgt[h * n + c.lane() + 32] = wb * inv;
  }
  consumer_sync();
  constexpr int kInFlight = 8;
  for (int e = c.tid(); e < G * HD / 4; e += kConsumerThreads) {
    const int h = (4 * e) / HD, dd = (4 * e) % HD;
    const float* w = wgt + h * n;
    const float* po = p.part_o + (int64_t(r) * d.n_heads + g * G + h) * S * HD + dd;
    float4 num = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < n; s0 += kInFlight) {
      float4 v[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j)
        v[j] = s0 + j < n ? __ldcg(reinterpret_cast<const float4*>(po + int64_t(s0 + j) * HD))
                          : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        const float ws = s0 + j < n ? w[s0 + j] : 0.f;
        num.x += ws * v[j].x;
        num.y += ws * v[j].y;
        num.z += ws * v[j].z;
        num.w += ws * v[j].w;
      }
    }
    const __nv_bfloat162 lo = __floats2bfloat162_rn(num.x, num.y), hi = __floats2bfloat162_rn(num.z, num.w);
    *reinterpret_cast<uint2*>(p.attn_out + int64_t(r) * d.q_width + (g * G + h) * HD + dd) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  }
  return true;
}

}  // namespace ms::gpu::mk
