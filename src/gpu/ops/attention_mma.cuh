// Tensor-core paged attention, included by attention.cu only: the decode
// kernel (one query row per block) and the prefill kernel (a tile of
// consecutive tokens per block). Written from the PTX ISA semantics of
// mma.sync.m16n8k16 (bf16 in, fp32 accumulate), ldmatrix and cp.async.
//
// Decode: block = (row, KV head, split), 4 warps. The GQA group's G <= 16 query heads
// are the M = 16 rows of the MMA (rows >= G are zero); keys are N for
// S = Q K^T and K for O += P V. Keys stream through kMmaStages shared-memory
// stages of kMmaStageKeys keys (K and V, rows padded by 16 B so the 8 rows of
// an ldmatrix hit 8 different 4-bank groups), loaded with 16-byte cp.async.cg
// (L2 only: decode reads each byte once). Warp w owns keys [16w, 16w + 16) of
// every stage and keeps its own online-softmax state; the 4 warps merge once
// at the end of the split. Splits are merged by attention_decode_combine_kernel
// (a grid of (row, head) blocks, so no SM combines all splits alone).
//
// Rounding (both kernels): q is split into bf16 hi + lo (q = hi + lo to ~2^-17), so scores
// are as exact as fp32 q against bf16 K; P is rounded to bf16 for P V (what
// flash-decoding kernels do) and the row sum l adds the same rounded values,
// so the output is an exact convex combination of V rows with weights within
// 2^-9 relative of the fp32 softmax.
#pragma once

#include <climits>
#include <cstdint>

#include "gpu/common/bf16.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/ops/attention.h"

namespace ms::gpu {

constexpr int kMmaThreads = 128;      // 4 warps
constexpr int kMmaStageKeys = 64;     // 16 keys per warp per stage
constexpr int kMmaStages = 3;         // 2 stages in flight while one is computed
constexpr int kMmaTabEnt = 512;       // block-table entries staged in shared memory (else read from global)
constexpr int kMmaMinSplitKeys = 128; // 2 stages: a split still overlaps its loads

__host__ __device__ constexpr int mma_kv_stride(int hd) { return hd + 8; }  // bf16 per smem row
__host__ __device__ constexpr size_t mma_smem_bytes(int hd) {
  return size_t(kMmaStages) * 2 * kMmaStageKeys * mma_kv_stride(hd) * 2 + kMmaTabEnt * sizeof(int32_t);
}

// Keys per split of a row with len keys, for a grid of max_splits splits;
// the combine kernel recomputes it the same way.
__device__ __forceinline__ int mma_split_chunk(int len, int max_splits) {
  int chunk = max((len + max_splits - 1) / max_splits, kMmaMinSplitKeys);
  return (chunk + kMmaStageKeys - 1) / kMmaStageKeys * kMmaStageKeys;
}

// One K/V stage of kMmaStageKeys keys starting at t0 into shared memory
// (V rows KST = mma_kv_stride(HD) bf16 apart at vs; K rows the same at ks, or
// with kSwizzleK in wgmma's K-major 128-byte-swizzled layout: HD / 64 slices
// of 64 keys x 128 bytes, chunk c of key j's slice at chunk c ^ (j % 8); ks
// 1024-byte aligned), a thread per 16-byte piece; keys past s_hi (and unmapped
// blocks) are zero-filled so P V never meets garbage. tab: the block-table slice starting at page tab_base
// (staged in shared memory or in global); bs_shift = log2(block size) or -1.
// Page and slot by shift and mask for power-of-two block sizes (the
// runtime-divisor division and modulo were ~40 instructions of each of the 8
// pieces a thread issues per stage).
template <int HD, int THREADS, bool kSwizzleK = false>
__device__ __forceinline__ void issue_kv_stage(bf16* ks, bf16* vs, const AttnArgs& a, const bf16* kc, const bf16* vc,
                                               int bs, int kh, const int32_t* tab, int tab_base, int bs_shift, int t0,
                                               int s_hi, int tid) {
  constexpr int KST = mma_kv_stride(HD), LPK = HD / 8;
  const int c = tid % LPK;
#pragma unroll
  for (int j = tid / LPK; j < kMmaStageKeys; j += THREADS / LPK) {
    const int p = t0 + j;
    int64_t off = 0;
    bool ok = false;
    if (p < s_hi) {
      const int pg = bs_shift >= 0 ? p >> bs_shift : p / bs, slot = bs_shift >= 0 ? p & (bs - 1) : p % bs;
      const int32_t blk = tab[pg - tab_base];
      if (blk >= 0) {
        off = ((int64_t(blk) * a.nkv + kh) * bs + slot) * HD + c * 8;
        ok = true;
      }
    }
    if (kSwizzleK)
      cp_async_16(ks + (c >> 3) * kMmaStageKeys * 64 + j * 64 + (((c & 7) ^ (j & 7)) << 3), kc + off, ok);
    else
      cp_async_16(ks + j * KST + c * 8, kc + off, ok);
    cp_async_16(vs + j * KST + c * 8, vc + off, ok);
  }
}

// Grid (rows * nkv, max_splits), kMmaThreads threads, mma_smem_bytes(HD) of
// dynamic shared memory. Requires G = nh / nkv <= 16, ldq even.
template <int HD>
__global__ void __launch_bounds__(kMmaThreads) paged_attention_decode_mma_kernel(AttnArgs a, int max_splits) {
  constexpr int KST = mma_kv_stride(HD), NKS = HD / 16, NT = HD / 8;
  constexpr int STAGE = 2 * kMmaStageKeys * KST;  // bf16 per stage: K (64, KST) then V (64, KST)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* stages = reinterpret_cast<bf16*>(smem_raw);                                      // (kMmaStages, STAGE)
  int32_t* tab_s = reinterpret_cast<int32_t*>(smem_raw + size_t(kMmaStages) * STAGE * 2);  // (kMmaTabEnt)

  const int G = a.nh / a.nkv;
  const int row = blockIdx.x / a.nkv, kh = blockIdx.x % a.nkv, split = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;

  const int my_pos = a.row_pos[row], seq = a.row_seq[row];
  const int lo = a.window > 0 ? max(0, my_pos - a.window + 1) : 0, hi = my_pos + 1, len = hi - lo;
  const int chunk = mma_split_chunk(len, max_splits), nsplit = (len + chunk - 1) / chunk;
  if (split >= nsplit) return;  // whole block, before any barrier
  const int s_lo = lo + split * chunk, s_hi = min(hi, s_lo + chunk);
  const int bs = a.block_size;
  const int bs_shift = (bs & (bs - 1)) == 0 ? __ffs(bs) - 1 : -1;  // log2(bs), -1 if not a power of two
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks;
  const int tab_base = s_lo / bs, n_tab = (s_hi - 1) / bs - tab_base + 1;
  const bool staged = n_tab <= kMmaTabEnt;  // block-uniform
  if (staged)
    for (int i = tid; i < n_tab; i += kMmaThreads) tab_s[i] = table[tab_base + i];

  // q of rows g and g + 8 (heads kh * G + r), pre-scaled into the log2 domain,
  // split into bf16 hi + lo A fragments: k-step ks covers dims [16 ks, 16 ks + 16).
  uint32_t qh[NKS][4], ql[NKS][4];
  {
    const float qscale = a.scale * 1.4426950408889634f;  // log2(e)
    const float* qrow = a.q + int64_t(row) * a.ldq + int64_t(kh) * G * HD;
#pragma unroll
    for (int ks = 0; ks < NKS; ++ks) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = g + (i & 1) * 8, d = ks * 16 + (i >> 1) * 8 + 2 * t;
        float2 v = make_float2(0.f, 0.f);
        if (r < G) v = *reinterpret_cast<const float2*>(qrow + r * HD + d);
        v.x *= qscale;
        v.y *= qscale;
        q_hilo(v, qh[ks][i], ql[ks][i]);
      }
    }
  }
  __syncthreads();  // tab_s
  const int32_t* tab = staged ? tab_s : table + tab_base;

  const bf16* kc = static_cast<const bf16*>(a.k_cache);
  const bf16* vc = static_cast<const bf16*>(a.v_cache);
  auto issue = [&](int buf, int t0) {
    bf16* kst = stages + buf * STAGE;
    issue_kv_stage<HD, kMmaThreads>(kst, kst + kMmaStageKeys * KST, a, kc, vc, bs, kh, tab, tab_base, bs_shift, t0,
                                    s_hi, tid);
  };

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g, g + 8 (log2 domain); l: this lane's columns
  float o[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;

  const int n_st = (s_hi - s_lo + kMmaStageKeys - 1) / kMmaStageKeys;
#pragma unroll
  for (int s = 0; s < kMmaStages - 1; ++s) {
    if (s < n_st) issue(s, s_lo + s * kMmaStageKeys);
    cp_async_commit();  // empty groups keep the wait counts uniform
  }
  const int kb = warp * 16;  // this warp's keys within a stage
  for (int it = 0; it < n_st; ++it) {
    cp_async_wait<kMmaStages - 2>();  // this thread's pieces of stage `it` landed
    __syncthreads();                  // everyone's did; stage it - 1 is consumed
    {
      const int nx = it + kMmaStages - 1;
      if (nx < n_st) issue(nx % kMmaStages, s_lo + nx * kMmaStageKeys);
      cp_async_commit();
    }
    const bf16* ks = stages + (it % kMmaStages) * STAGE;
    const bf16* vs = ks + kMmaStageKeys * KST;
    const int t0 = s_lo + it * kMmaStageKeys;

    // S (16 heads x 16 keys) = Q K^T: n-tile 0 keys kb..kb+7, n-tile 1 kb+8..kb+15.
    float s0[4] = {0.f, 0.f, 0.f, 0.f}, s1[4] = {0.f, 0.f, 0.f, 0.f};
    {
      const int mi = lane >> 3;
      const bf16* kaddr = ks + (kb + (lane & 7) + (mi >> 1) * 8) * KST + (mi & 1) * 8;
#pragma unroll
      for (int kst = 0; kst < NKS; ++kst) {
        uint32_t b[4];  // (keys 0-7, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 0-7), (keys 8-15, dims 8-15)
        ldmatrix_x4(b, kaddr + kst * 16);
        mma_bf16_16816(s0, qh[kst], b[0], b[1]);
        mma_bf16_16816(s0, ql[kst], b[0], b[1]);
        mma_bf16_16816(s1, qh[kst], b[2], b[3]);
        mma_bf16_16816(s1, ql[kst], b[2], b[3]);
      }
    }
    // Mask keys past the split (the stage tail), then the online softmax per row.
    {
      const int k0 = t0 + kb + 2 * t;
      if (k0 >= s_hi) s0[0] = s0[2] = -INFINITY;
      if (k0 + 1 >= s_hi) s0[1] = s0[3] = -INFINITY;
      if (k0 + 8 >= s_hi) s1[0] = s1[2] = -INFINITY;
      if (k0 + 9 >= s_hi) s1[1] = s1[3] = -INFINITY;
    }
    uint32_t pa[4];  // P as the A fragment: (g, keys 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float* x0 = s0 + 2 * rr;
      float* x1 = s1 + 2 * rr;
      float mx = fmaxf(fmaxf(x0[0], x0[1]), fmaxf(x1[0], x1[1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[rr], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // nothing seen yet: exp2(-inf) = 0 below
      const float corr = exp2f(m[rr] - m_use);
      m[rr] = m_new;
      const __nv_bfloat162 p0 = __floats2bfloat162_rn(exp2f(x0[0] - m_use), exp2f(x0[1] - m_use));
      const __nv_bfloat162 p1 = __floats2bfloat162_rn(exp2f(x1[0] - m_use), exp2f(x1[1] - m_use));
      const float2 f0 = __bfloat1622float2(p0), f1 = __bfloat1622float2(p1);
      l[rr] = l[rr] * corr + ((f0.x + f0.y) + (f1.x + f1.y));
      pa[rr] = *reinterpret_cast<const uint32_t*>(&p0);
      pa[2 + rr] = *reinterpret_cast<const uint32_t*>(&p1);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        o[nt][2 * rr] *= corr;
        o[nt][2 * rr + 1] *= corr;
      }
    }
    // O (16 heads x HD) += P (16 x 16 keys) V (16 keys x HD), 16 dims per ldmatrix.trans.
    {
      const int mi = lane >> 3;
      const bf16* vaddr = vs + (kb + (lane & 7) + (mi & 1) * 8) * KST + (mi >> 1) * 8;
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t b[4];  // (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 8-15)
        ldmatrix_x4_trans(b, vaddr + np * 16);
        mma_bf16_16816(o[2 * np], pa, b[0], b[1]);
        mma_bf16_16816(o[2 * np + 1], pa, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are free: re-used for the merge

  // Merge the 4 warps: (m, l, O) per warp and row into shared memory.
  float* ow = reinterpret_cast<float*>(smem_raw);  // (4 warps, 16 rows, HD)
  float* mw = ow + 4 * 16 * HD;                     // (4, 16)
  float* lw = mw + 4 * 16;                          // (4, 16)
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
    if (t == 0) {
      mw[warp * 16 + g + 8 * rr] = m[rr];
      lw[warp * 16 + g + 8 * rr] = l[rr];
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    *reinterpret_cast<float2*>(ow + (warp * 16 + g) * HD + nt * 8 + 2 * t) = make_float2(o[nt][0], o[nt][1]);
    *reinterpret_cast<float2*>(ow + (warp * 16 + g + 8) * HD + nt * 8 + 2 * t) = make_float2(o[nt][2], o[nt][3]);
  }
  __syncthreads();

  bf16* out = static_cast<bf16*>(a.out);
  const int64_t head0 = int64_t(row) * a.nh + int64_t(kh) * G;
  for (int item = tid; item < G * HD / 4; item += kMmaThreads) {
    const int h = item / (HD / 4), d0 = (item % (HD / 4)) * 4;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) mx = fmaxf(mx, mw[w * 16 + h]);
    float L = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float c = exp2f(mw[w * 16 + h] - mx);  // 0 for a warp that saw no key
        const float4 v = *reinterpret_cast<const float4*>(ow + (w * 16 + h) * HD + d0);
        L += c * lw[w * 16 + h];
        acc.x += c * v.x;
        acc.y += c * v.y;
        acc.z += c * v.z;
        acc.w += c * v.w;
      }
    }
    const float inv = L > 0.f ? 1.0f / L : 0.f;
    const float4 r = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    if (nsplit == 1) {
      __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(out + (head0 + h) * HD + d0);
      dst[0] = __floats2bfloat162_rn(r.x, r.y);
      dst[1] = __floats2bfloat162_rn(r.z, r.w);
    } else {
      const int64_t base = (head0 + h) * a.splits + split;
      *reinterpret_cast<float4*>(a.part_o + base * HD + d0) = r;
      if (d0 == 0) a.part_lse[base] = L > 0.f ? (mx + log2f(L)) * 0.6931471805599453f : -INFINITY;  // natural log
    }
  }
}

// Grid (rows, nh), hd threads, max_splits floats of dynamic shared memory:
// merges the splits of rows that have more than one (rows with one were
// written by the main kernel). Same split arithmetic as the main kernel.
__global__ void attention_decode_combine_kernel(AttnArgs a, int max_splits) {
  extern __shared__ float lse_s[];  // (nsplit)
  const int row = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int my_pos = a.row_pos[row];
  const int lo = a.window > 0 ? max(0, my_pos - a.window + 1) : 0, len = my_pos + 1 - lo;
  const int chunk = mma_split_chunk(len, max_splits), nsplit = (len + chunk - 1) / chunk;
  if (nsplit == 1) return;
  const int64_t base = (int64_t(row) * a.nh + h) * a.splits;
  for (int s = d; s < nsplit; s += blockDim.x) lse_s[s] = a.part_lse[base + s];
  __syncthreads();
  float mx = -INFINITY;
  for (int s = 0; s < nsplit; ++s) mx = fmaxf(mx, lse_s[s]);
  float num = 0.f, den = 0.f;
  if (mx != -INFINITY) {
    const float* po = a.part_o + base * a.hd + d;
#pragma unroll 16
    for (int s = 0; s < nsplit; ++s) {
      const float lse = lse_s[s];
      const float w = lse == -INFINITY ? 0.f : expf(lse - mx);
      num += w * po[int64_t(s) * a.hd];  // every split < nsplit wrote its partial
      den += w;
    }
  }
  static_cast<bf16*>(a.out)[(int64_t(row) * a.nh + h) * a.hd + d] = __float2bfloat16_rn(den > 0.f ? num / den : 0.f);
}

// ---------------------------------------------------------------------------
// Prefill: a query tile (up to rows_per_tile consecutive tokens of one
// sequence) per block, so each K/V stage is loaded once for the tile's
// tokens x heads instead of once per 2 tokens (the CUDA-core kernel's 16 / G).
//
// Block = (tile, KV head kh, split), grid (n_tiles * nkv, splits), 4 warps.
// The block's M = kMmaPrefillRows = 64 rows are (token, head) pairs: row r is
// token tile.row0 + r / G (valid if r / G < tile.nrows) with head
// kh * G + r % G; rows past the tile are zero q and never written. Warp w owns
// rows [16w, 16w + 16) (its MMA M tile) with their own online-softmax state:
// warps own distinct rows, so nothing is merged across warps. All 4 warps
// share the stages, loaded exactly as in the decode kernel (block-table slice
// in shared memory when it fits). Per stage and warp: S (16 rows x 64 keys) =
// Q K^T as 8 n-tiles (two MMAs per k-step and n-tile: q hi and lo), a mask per
// row (key p is seen iff max(row's window start, split start) <= p <= the
// row's position and p < split end), the online softmax, then O (16 x HD) +=
// P V in 4 k-steps of 16 keys. A warp none of whose rows sees a key of the
// stage skips its compute (it still loads and passes the barriers).
//
// Key range of the block: [lo, hi) with lo the first token's window start
// and hi the last token's position + 1; split s takes
// [lo + s * chunk, lo + (s + 1) * chunk), chunk = ceil((hi - lo) / splits)
// rounded up to a stage. splits == 1 writes the bf16 output itself; else each
// split writes its normalised partial and natural-log LSE (zeros and -inf for
// rows that saw nothing, empty splits included) for attention_combine_kernel.
//
// Occupancy (ptxas -v, sm_90a): 246 registers for HD 128 (q hi/lo 64, O 64,
// S 32), 168 for HD 64, no spills; with 104 / 56 KB of shared memory that is
// 2 / 3 blocks per SM.
constexpr int kMmaPrefillRows = 64;      // (token, head) rows per block of 4 warps: 16 per warp
constexpr int kMmaPrefillMaxRows = 128;  // the 8-warp variant

// Grid (n_tiles * nkv, splits), 32 WARPS threads, mma_smem_bytes(HD) of
// dynamic shared memory. Requires G = nh / nkv in {1, 2, 4, 8, 16},
// rows_per_tile * G <= 16 WARPS, ldq even, every tile's nrows >= 1.
// WARPS = 4 (64 rows, 2 blocks per SM) or 8 (128 rows: each K/V stage serves
// twice the rows; 1 block per SM at 246 registers).
// kWg (WARPS = 4 only; MEGASERVE_ATTN_PREFILL=wgmma, NOT YET RUN ON A GPU):
// S = Q K^T as warpgroup wgmma m64n64k16 with q's hi / lo fragments from
// registers (the same A-fragment layout as mma.sync's) and K from shared
// memory in the 128-byte-swizzled K-major layout (issue_kv_stage kSwizzleK);
// one wgmma per k-step and half instead of eight mma.sync per warp. The whole
// warpgroup computes S for every stage (wgmma is collective), warps whose rows
// see none of its keys then skip softmax and P V as before. P V stays on
// mma.sync with ldmatrix.trans on the padded V rows.
template <int HD, int WARPS, bool kWg = false>
__global__ void __launch_bounds__(WARPS * 32, 8 / WARPS) paged_attention_prefill_mma_kernel(AttnArgs a) {
  static_assert(!kWg || WARPS == 4, "the wgmma variant is one warpgroup");
  constexpr int kThreads = WARPS * 32;
  constexpr int KST = mma_kv_stride(HD), NKS = HD / 16, NT = HD / 8;
  constexpr int SK = kMmaStageKeys, SNT = SK / 8;  // keys per stage; n-tiles of S
  constexpr int KEL = kWg ? SK * HD : SK * KST;    // bf16 of a stage's K rows (kWg: swizzled, unpadded)
  constexpr int STAGE = KEL + SK * KST;            // bf16 per stage: K then V (64, KST)
  static_assert(!kWg || (KEL * 2) % 1024 == 0 && (STAGE * 2) % 1024 == 0, "wgmma tiles need 1024-byte alignment");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem_base = smem_raw;
  if (kWg)  // launch_prefill_mma adds 1024 bytes of slack for this
    smem_base += (1024u - (static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) & 1023u)) & 1023u;
  bf16* stages = reinterpret_cast<bf16*>(smem_base);                                       // (kMmaStages, STAGE)
  int32_t* tab_s = reinterpret_cast<int32_t*>(smem_base + size_t(kMmaStages) * STAGE * 2);  // (kMmaTabEnt)

  const int G = a.nh / a.nkv;
  const int tile_idx = blockIdx.x / a.nkv, kh = blockIdx.x % a.nkv, split = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;

  const AttnTile tile = a.tiles[tile_idx];
  const int seq = a.row_seq[tile.row0];
  const int pos_first = a.row_pos[tile.row0], pos_last = a.row_pos[tile.row0 + tile.nrows - 1];
  const int lo = a.window > 0 ? max(0, pos_first - a.window + 1) : 0, hi = pos_last + 1;
  int chunk = (hi - lo + a.splits - 1) / a.splits;
  chunk = (chunk + SK - 1) / SK * SK;
  const int s_lo = lo + split * chunk, s_hi = min(hi, s_lo + chunk);
  if (s_lo >= s_hi) {  // empty split (splits > 1 only): the combine still reads its partials
    for (int i = tid; i < tile.nrows * G * (HD / 4); i += kThreads) {
      const int rh = i / (HD / 4), d0 = (i % (HD / 4)) * 4;  // rh = token * G + head in group
      const int64_t base = (int64_t(tile.row0 + rh / G) * a.nh + kh * G + rh % G) * a.splits + split;
      *reinterpret_cast<float4*>(a.part_o + base * HD + d0) = make_float4(0.f, 0.f, 0.f, 0.f);
      if (d0 == 0) a.part_lse[base] = -INFINITY;
    }
    return;  // whole block, before any barrier
  }
  const int bs = a.block_size;
  const int bs_shift = (bs & (bs - 1)) == 0 ? __ffs(bs) - 1 : -1;  // log2(bs), -1 if not a power of two
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks;
  const int tab_base = s_lo / bs, n_tab = (s_hi - 1) / bs - tab_base + 1;
  const bool staged = n_tab <= kMmaTabEnt;  // block-uniform
  if (staged)
    for (int i = tid; i < n_tab; i += kThreads) tab_s[i] = table[tab_base + i];

  // This lane's rows 16 warp + g + 8 rr: keys [klo, khi) of this split that
  // the row sees (empty for rows past the tile).
  int klo[2], khi[2];
  // q of those rows, pre-scaled into the log2 domain, split into bf16 hi + lo
  // A fragments: k-step ks covers dims [16 ks, 16 ks + 16).
  uint32_t qh[NKS][4], ql[NKS][4];
  {
    const float qscale = a.scale * 1.4426950408889634f;  // log2(e)
    const float* qrow[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int r = warp * 16 + g + 8 * rr, tr = r / G;
      qrow[rr] = nullptr;
      klo[rr] = INT_MAX;
      khi[rr] = 0;
      if (tr < tile.nrows) {
        const int pos = a.row_pos[tile.row0 + tr];
        klo[rr] = max(s_lo, a.window > 0 ? pos - a.window + 1 : 0);
        khi[rr] = min(s_hi, pos + 1);
        qrow[rr] = a.q + int64_t(tile.row0 + tr) * a.ldq + int64_t(kh * G + r % G) * HD;
      }
    }
#pragma unroll
    for (int ks = 0; ks < NKS; ++ks) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int rr = i & 1, d = ks * 16 + (i >> 1) * 8 + 2 * t;
        float2 v = make_float2(0.f, 0.f);
        if (qrow[rr] != nullptr) v = *reinterpret_cast<const float2*>(qrow[rr] + d);
        v.x *= qscale;
        v.y *= qscale;
        q_hilo(v, qh[ks][i], ql[ks][i]);
      }
    }
  }
  __syncthreads();  // tab_s
  const int32_t* tab = staged ? tab_s : table + tab_base;

  const bf16* kc = static_cast<const bf16*>(a.k_cache);
  const bf16* vc = static_cast<const bf16*>(a.v_cache);
  auto issue = [&](int buf, int t0) {
    bf16* kst = stages + buf * STAGE;
    issue_kv_stage<HD, kThreads, kWg>(kst, kst + KEL, a, kc, vc, bs, kh, tab, tab_base, bs_shift, t0, s_hi, tid);
  };

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g, g + 8 (log2 domain); l: this lane's columns
  float o[NT][4];  // O fragments: n-tile nt = dims [8 nt, 8 nt + 8)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;

  const int n_st = (s_hi - s_lo + SK - 1) / SK;
#pragma unroll
  for (int s = 0; s < kMmaStages - 1; ++s) {
    if (s < n_st) issue(s, s_lo + s * SK);
    cp_async_commit();  // empty groups keep the wait counts uniform
  }
  const int mi = lane >> 3;  // the ldmatrix matrix this lane addresses
  for (int it = 0; it < n_st; ++it) {
    cp_async_wait<kMmaStages - 2>();  // this thread's pieces of stage `it` landed
    if (kWg) fence_proxy_async_smem();  // ... and are visible to wgmma's (async proxy) reads
    __syncthreads();                  // everyone's did; stage it - 1 is consumed
    {
      const int nx = it + kMmaStages - 1;
      if (nx < n_st) issue(nx % kMmaStages, s_lo + nx * SK);
      cp_async_commit();
    }
    const int t0 = s_lo + it * SK;
    bool sees = false;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) sees |= max(klo[rr], t0) < min(khi[rr], t0 + SK);
    const bf16* ks = stages + (it % kMmaStages) * STAGE;
    const bf16* vs = ks + KEL;

    // S (16 rows x 64 keys) = Q K^T; n-tile nt = keys [8 nt, 8 nt + 8) of the stage.
    float s[SNT][4];
#pragma unroll
    for (int nt = 0; nt < SNT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
    if (kWg) {  // the warpgroup's 64 rows at once; s[nt][i] = d[4 nt + i] of the m64n64 accumulator
      float(&sd)[SNT * 4] = *reinterpret_cast<float(*)[SNT * 4]>(&s[0][0]);
      const unsigned kb = static_cast<unsigned>(__cvta_generic_to_shared(ks));
      wgmma_fence_operands(sd);
      wgmma_fence();
#pragma unroll
      for (int kst = 0; kst < NKS; ++kst) {
        const uint64_t desc = wgmma_desc_sw128(kb + unsigned((kst >> 2) * SK * 128 + (kst & 3) * 32));
        wgmma_m64n64k16_bf16_rs(sd, qh[kst], desc);
        wgmma_m64n64k16_bf16_rs(sd, ql[kst], desc);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(sd);
    }
    if (!__any_sync(0xffffffffu, sees)) continue;  // warp-uniform; the next barrier is at the loop top
    if (!kWg) {
      const bf16* kaddr = ks + ((lane & 7) + (mi >> 1) * 8) * KST + (mi & 1) * 8;
#pragma unroll
      for (int kst = 0; kst < NKS; ++kst) {
#pragma unroll
        for (int np = 0; np < SNT / 2; ++np) {
          uint32_t b[4];  // (keys 0-7, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 0-7), (keys 8-15, dims 8-15)
          ldmatrix_x4(b, kaddr + np * 16 * KST + kst * 16);
          mma_bf16_16816(s[2 * np], qh[kst], b[0], b[1]);
          mma_bf16_16816(s[2 * np], ql[kst], b[0], b[1]);
          mma_bf16_16816(s[2 * np + 1], qh[kst], b[2], b[3]);
          mma_bf16_16816(s[2 * np + 1], ql[kst], b[2], b[3]);
        }
      }
    }
    // Mask per row: s[nt][i] is row g + 8 (i >> 1), key t0 + 8 nt + 2 t + (i & 1).
#pragma unroll
    for (int nt = 0; nt < SNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int p = t0 + nt * 8 + 2 * t + (i & 1), rr = i >> 1;
        if (p < klo[rr] || p >= khi[rr]) s[nt][i] = -INFINITY;
      }
    }
    // Online softmax per row; P as A fragments of k-step kk (keys [16 kk, 16 kk + 16)):
    // (g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..) = n-tiles 2 kk (regs 0, 1) and 2 kk + 1 (regs 2, 3).
    uint32_t pa[SK / 16][4];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < SNT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * rr], s[nt][2 * rr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[rr], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // nothing seen yet: exp2(-inf) = 0 below
      const float corr = exp2f(m[rr] - m_use);
      m[rr] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < SNT; ++nt) {
        const __nv_bfloat162 p2 = __floats2bfloat162_rn(exp2f(s[nt][2 * rr] - m_use), exp2f(s[nt][2 * rr + 1] - m_use));
        const float2 f = __bfloat1622float2(p2);
        sum += f.x + f.y;
        pa[nt >> 1][(nt & 1) * 2 + rr] = *reinterpret_cast<const uint32_t*>(&p2);
      }
      l[rr] = l[rr] * corr + sum;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        o[nt][2 * rr] *= corr;
        o[nt][2 * rr + 1] *= corr;
      }
    }
    // O (16 rows x HD) += P (16 x 64 keys) V (64 keys x HD): 16 keys x 16 dims per ldmatrix.trans.
    {
      const bf16* vaddr = vs + ((lane & 7) + (mi & 1) * 8) * KST + (mi >> 1) * 8;
#pragma unroll
      for (int kk = 0; kk < SK / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t b[4];  // (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 8-15)
          ldmatrix_x4_trans(b, vaddr + kk * 16 * KST + np * 16);
          mma_bf16_16816(o[2 * np], pa[kk], b[0], b[1]);
          mma_bf16_16816(o[2 * np + 1], pa[kk], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();  // only empty groups can be pending; no block exits with copies in flight

  // Output: o[nt][2 rr + j] is row g + 8 rr, dim 8 nt + 2 t + j.
  bf16* out = static_cast<bf16*>(a.out);
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {  // the row sums over the quad, before any lane leaves
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = warp * 16 + g + 8 * rr, tr = r / G;
    if (tr >= tile.nrows) continue;
    const int64_t rh = int64_t(tile.row0 + tr) * a.nh + kh * G + r % G;  // (row, head)
    const float inv = l[rr] > 0.f ? 1.0f / l[rr] : 0.f;
    if (a.splits == 1) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        *reinterpret_cast<__nv_bfloat162*>(out + rh * HD + nt * 8 + 2 * t) =
            __floats2bfloat162_rn(o[nt][2 * rr] * inv, o[nt][2 * rr + 1] * inv);
    } else {
      const int64_t base = rh * a.splits + split;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        *reinterpret_cast<float2*>(a.part_o + base * HD + nt * 8 + 2 * t) =
            make_float2(o[nt][2 * rr] * inv, o[nt][2 * rr + 1] * inv);
      if (t == 0) a.part_lse[base] = l[rr] > 0.f ? (m[rr] + log2f(l[rr])) * 0.6931471805599453f : -INFINITY;  // natural log
    }
  }
}

}  // namespace ms::gpu
