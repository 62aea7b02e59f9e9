#include "gpu/ops/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"
#include "gpu/ops/attention_mma.cuh"

namespace ms::gpu {

// Keys per shared-memory tile: K and V tiles together stay at 32 KB.
__host__ __device__ constexpr int attn_tile_keys(int hd) { return hd >= 128 ? 8192 / hd : 64; }

// The CUDA-core kernel's block is a warp per (row of the tile, head of the
// group): at most kAttnMaxWarps (its registers allow 512 threads per block).
constexpr int kAttnMaxWarps = 16;

// Lanes split a key's head_dim in 8-element (16-byte) pieces: lpk = hd / 8
// lanes per key, 32 / lpk keys in flight per warp; each lane group keeps its
// own online-softmax state (m, l, acc[8]) and the groups merge at the end.
__global__ void __launch_bounds__(kAttnMaxWarps * 32) paged_attention_kernel(AttnArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int hd = a.hd, tk = attn_tile_keys(hd);
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);  // (tk, hd)
  bf16* vs = ks + tk * hd;                        // (tk, hd)
  const int group = a.nh / a.nkv;
  const int tile_idx = blockIdx.x / a.nkv, kh = blockIdx.x % a.nkv, split = blockIdx.y;
  const AttnTile tile = a.tiles[tile_idx];
  const int seq = a.row_seq[tile.row0];
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks;
  // Key range of the whole tile, then this split's share of it.
  const int pos_first = a.row_pos[tile.row0], pos_last = a.row_pos[tile.row0 + tile.nrows - 1];
  const int lo = a.window > 0 ? max(0, pos_first - a.window + 1) : 0, hi = pos_last + 1;
  const int chunk = (hi - lo + a.splits - 1) / a.splits;
  const int s_lo = lo + split * chunk, s_hi = min(hi, s_lo + chunk);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = warp / group, h = kh * group + warp % group;
  const bool active = r < tile.nrows;
  const int row = tile.row0 + (active ? r : 0);
  const int my_pos = a.row_pos[row];
  const int my_first = a.window > 0 ? max(0, my_pos - a.window + 1) : 0;
  const int lpk = hd / 8, ng = 32 / lpk, lg = lane / lpk, sl = lane % lpk;

  float qf[8];
  {
    const float* qp = a.q + int64_t(row) * a.ldq + int64_t(h) * hd + sl * 8;
#pragma unroll
    for (int i = 0; i < 8; ++i) qf[i] = qp[i];
  }
  float m = -INFINITY, l = 0.f, acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.f;

  const bf16* kc = static_cast<const bf16*>(a.k_cache);
  const bf16* vc = static_cast<const bf16*>(a.v_cache);
  for (int t0 = s_lo; t0 < s_hi; t0 += tk) {
    const int tn = min(tk, s_hi - t0);
    __syncthreads();  // the previous tile is consumed
    // kFillBatch pieces of K and of V per thread are loaded before any is
    // stored: 2 * kFillBatch independent 16-byte loads in flight per thread
    // (the first version had 2; HOPPER.md: ~40 KB in flight per SM).
    constexpr int kFillBatch = 4;
    const int n_pieces = tn * lpk;
    for (int base = threadIdx.x; base < n_pieces; base += kFillBatch * blockDim.x) {
      uint4 kv[kFillBatch], vv[kFillBatch];
#pragma unroll
      for (int b = 0; b < kFillBatch; ++b) {
        const int idx = base + b * blockDim.x;
        kv[b] = vv[b] = make_uint4(0, 0, 0, 0);
        if (idx < n_pieces) {
          const int j = idx / lpk, c = idx % lpk, p = t0 + j;
          const int32_t blk = table[p / a.block_size];
          if (blk >= 0) {
            const int64_t off = ((int64_t(blk) * a.nkv + kh) * a.block_size + p % a.block_size) * hd + c * 8;
            kv[b] = *reinterpret_cast<const uint4*>(kc + off);  // plain: prefill tiles re-read K/V from L2
            vv[b] = *reinterpret_cast<const uint4*>(vc + off);
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kFillBatch; ++b) {
        const int idx = base + b * blockDim.x;
        if (idx < n_pieces) {
          const int j = idx / lpk, c = idx % lpk;
          *reinterpret_cast<uint4*>(ks + j * hd + c * 8) = kv[b];
          *reinterpret_cast<uint4*>(vs + j * hd + c * 8) = vv[b];
        }
      }
    }
    __syncthreads();
    if (!active) continue;
    for (int j0 = 0; j0 < tn; j0 += ng) {  // warp-uniform trip count (shuffles below)
      const int j = j0 + lg, p = t0 + j;
      float kf[8];
      if (j < tn) bf16x8_to_f32(*reinterpret_cast<const uint4*>(ks + j * hd + sl * 8), kf);
      else
#pragma unroll
        for (int i = 0; i < 8; ++i) kf[i] = 0.f;
      float d = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) d = fmaf(qf[i], kf[i], d);
      for (int o = lpk / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
      if (j < tn && p >= my_first && p <= my_pos) {
        const float s = d * a.scale;
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new), e = expf(s - m_new);
        float vf[8];
        bf16x8_to_f32(*reinterpret_cast<const uint4*>(vs + j * hd + sl * 8), vf);
        l = l * corr + e;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] = acc[i] * corr + e * vf[i];
        m = m_new;
      }
    }
  }
  if (!active) return;  // no barrier follows
  // Merge the lane groups (lanes with equal sl hold the same dims).
  for (int o = lpk; o < 32; o <<= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
    float a2[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) a2[i] = __shfl_xor_sync(0xffffffffu, acc[i], o);
    const float m_new = fmaxf(m, m2);
    if (m_new != -INFINITY) {
      const float c1 = expf(m - m_new), c2 = expf(m2 - m_new);
      l = l * c1 + l2 * c2;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = acc[i] * c1 + a2[i] * c2;
      m = m_new;
    }
  }
  if (lg == 0) {
    const int64_t base = (int64_t(row) * a.nh + h) * a.splits + split;
    const float inv = l > 0.f ? 1.0f / l : 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) a.part_o[base * hd + sl * 8 + i] = acc[i] * inv;
    if (sl == 0) a.part_lse[base] = l > 0.f ? m + logf(l) : -INFINITY;
  }
}

// Grid (rows, nh), hd threads: out = sum_s w_s o_s / sum_s w_s, w_s = exp(lse_s - max).
// The split LSEs are staged in shared memory once (one coalesced load per
// thread), so the per-split loop only streams part_o, 16 loads unrolled; the
// first version re-read part_lse serially from global in two loops, a chain
// of L2 round trips that grows with the split count.
__global__ void attention_combine_kernel(const float* __restrict__ part_o, const float* __restrict__ part_lse,
                                         int nh, int splits, int hd, bf16* __restrict__ out) {
  extern __shared__ float lse_s[];  // (splits)
  const int row = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int64_t base = (int64_t(row) * nh + h) * splits;
  for (int s = d; s < splits; s += blockDim.x) lse_s[s] = part_lse[base + s];
  __syncthreads();
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, lse_s[s]);
  float num = 0.f, den = 0.f;
  if (mx != -INFINITY) {
#pragma unroll 16
    for (int s = 0; s < splits; ++s) {
      const float lse = lse_s[s];
      const float w = lse == -INFINITY ? 0.f : expf(lse - mx);
      num += w * part_o[(base + s) * hd + d];  // empty splits wrote 0
      den += w;
    }
  }
  out[(int64_t(row) * nh + h) * hd + d] = __float2bfloat16_rn(den > 0.f ? num / den : 0.f);
}

// ---------------------------------------------------------------------------
// Decode kernel (one query row per tile): the fixed-latency path.
//
// The general kernel above spends most of a decode step in latency, not
// bandwidth (measured 45.8 us per layer at bs 1 / 8K against ~2.3 us of KV
// traffic): a chain of four dependent global loads before the first K byte
// (tiles -> row_seq -> block table -> K), a serial online softmax of 32
// dependent steps per 64-key tile (4 shuffles + 2 expf each), and a second
// launch for the combine. This kernel:
//  - takes the row from blockIdx (rows_per_tile == 1: tile i is row i), reads
//    row_pos / row_seq and stages q in the same round trip, then the whole
//    split's block-table slice into shared memory in one more;
//  - streams K/V tiles through registers one tile ahead (the loads of tile
//    t + 1 are in flight while tile t is computed);
//  - per 64-key tile: all G x 64 scores in parallel (a thread per (head, key)),
//    one max / exp / sum per head and tile (a warp per head), then P.V with a
//    thread per (head, 4 dims);
//  - sizes splits from the context length (>= kDecodeMinSplitKeys keys each,
//    at most a.splits), so a 1K context is not cut into 8-key slivers;
//  - merges the splits in the same launch: each split block takes a ticket
//    after writing its partial; the last one of a (row, KV head) combines
//    (threadfence-reduction pattern, CUDA programming guide).
// Same math as the general kernel + combine: fp32 scores, softmax with a
// running max, partials merged by log-sum-exp, one bf16 rounding at the end.
constexpr int kDecodeThreads = 256;
constexpr int kDecodeMinSplitKeys = 128;  // two 64-key tiles: the second tile's loads overlap the first's compute
constexpr int kDecodeTabEnt = 256;        // block-table entries staged per refill (>= tk / block_size + 2)
constexpr int kDecodeMaxTickets = 4096;   // rows * nkv of a fused-combine launch
constexpr int kDecodeFill = 4;            // K and V 16-byte pieces per thread per tile: covers tk * hd / 8 <= 1024

// Tickets of the fused combine, one per (row, KV head); every launch leaves
// them at zero (the last block of each (row, head) resets its own). Launches
// sharing them must be stream-ordered (one stream per backend).
__device__ unsigned int g_attn_tickets[kDecodeMaxTickets];

__host__ __device__ constexpr int decode_kv_stride(int hd) { return hd + 8; }  // +16 B per row: no bank conflicts

template <int ITEMS>
__global__ void __launch_bounds__(kDecodeThreads) paged_attention_decode_kernel(AttnArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int hd = a.hd, tk = attn_tile_keys(hd), kst = decode_kv_stride(hd);
  const int G = a.nh / a.nkv, lpk = hd / 8;
  const int row = blockIdx.x / a.nkv, kh = blockIdx.x % a.nkv, split = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Shared memory: K tile, V tile (tk, kst) bf16 | q (G, hd) f32 | scores (G, tk) f32 | table slice.
  // The combine re-uses the K/V region for the split LSEs.
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);
  bf16* vs = ks + tk * kst;
  const size_t kv_tiles = size_t(2) * tk * kst * sizeof(bf16), lse_bytes = size_t(G) * a.splits * sizeof(float);
  const size_t kv_bytes = kv_tiles > lse_bytes ? kv_tiles : lse_bytes;
  float* qs = reinterpret_cast<float*>(smem_raw + ((kv_bytes + 15) & ~size_t(15)));
  float* sc = qs + G * hd;
  int32_t* tab_s = reinterpret_cast<int32_t*>(sc + G * tk);
  __shared__ float m_s[32], l_s[32], corr_s[32];
  __shared__ int last_s;

  // Round trip 1: the row's position and sequence, and q (independent loads).
  const int my_pos = a.row_pos[row], seq = a.row_seq[row];
  {
    const float4* qg = reinterpret_cast<const float4*>(a.q + int64_t(row) * a.ldq + int64_t(kh) * G * hd);
    for (int i = tid; i < G * hd / 4; i += kDecodeThreads) reinterpret_cast<float4*>(qs)[i] = qg[i];
  }
  const int lo = a.window > 0 ? max(0, my_pos - a.window + 1) : 0, hi = my_pos + 1, len = hi - lo;
  int chunk = max((len + a.splits - 1) / a.splits, kDecodeMinSplitKeys);
  chunk = (chunk + tk - 1) / tk * tk;
  const int nsplit = (len + chunk - 1) / chunk;
  if (split >= nsplit) return;  // whole block: no barrier passed yet
  const int s_lo = lo + split * chunk, s_hi = min(hi, s_lo + chunk);
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks;
  const int bs = a.block_size;

  // Round trip 2: the block-table entries of the first kDecodeTabEnt blocks of the split.
  int tab_base = s_lo / bs;
  auto stage_table = [&](int base) {
    const int n = min(kDecodeTabEnt, (s_hi - 1) / bs - base + 1);
    for (int i = tid; i < n; i += kDecodeThreads) tab_s[i] = table[base + i];
  };
  stage_table(tab_base);
  if (tid < G) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
  }
  __syncthreads();

  const bf16* kc = static_cast<const bf16*>(a.k_cache);
  const bf16* vc = static_cast<const bf16*>(a.v_cache);
  uint4 kv[kDecodeFill], vv[kDecodeFill];
  auto issue = [&](int t0) {  // tile at t0: loads into registers, nothing stored
    const int n_pieces = min(tk, s_hi - t0) * lpk;
#pragma unroll
    for (int b = 0; b < kDecodeFill; ++b) {
      const int idx = tid + b * kDecodeThreads;
      kv[b] = vv[b] = make_uint4(0, 0, 0, 0);
      if (idx < n_pieces) {
        const int j = idx / lpk, c = idx - j * lpk, p = t0 + j;
        const int32_t blk = tab_s[p / bs - tab_base];
        if (blk >= 0) {
          const int64_t off = ((int64_t(blk) * a.nkv + kh) * bs + p % bs) * hd + c * 8;
          kv[b] = ld_stream(kc + off);  // decode reads each K/V byte once
          vv[b] = ld_stream(vc + off);
        }
      }
    }
  };
  auto store = [&](int t0) {
    const int n_pieces = min(tk, s_hi - t0) * lpk;
#pragma unroll
    for (int b = 0; b < kDecodeFill; ++b) {
      const int idx = tid + b * kDecodeThreads;
      if (idx < n_pieces) {
        const int j = idx / lpk, c = idx - j * lpk;
        *reinterpret_cast<uint4*>(ks + j * kst + c * 8) = kv[b];
        *reinterpret_cast<uint4*>(vs + j * kst + c * 8) = vv[b];
      }
    }
  };

  float4 acc[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  const int n_items = G * hd / 4, tph = hd / 4;

  issue(s_lo);
  for (int t0 = s_lo; t0 < s_hi; t0 += tk) {
    const int tn = min(tk, s_hi - t0), t1 = t0 + tk;
    __syncthreads();  // the previous tile's K/V, scores and table reads are done
    store(t0);
    const bool restage = t1 < s_hi && (min(t1 + tk, s_hi) - 1) / bs - tab_base >= kDecodeTabEnt;  // block-uniform
    if (restage) {
      tab_base = t1 / bs;
      stage_table(tab_base);
    }
    __syncthreads();
    if (t1 < s_hi) issue(t1);  // in flight during this tile's compute

    // Scores: a thread per (head, key); the lanes of a warp share the head (tk % 32 == 0).
    for (int p = tid; p < G * tk; p += kDecodeThreads) {
      const int h = p / tk, j = p - h * tk;
      float s = -INFINITY;
      if (j < tn) {
        const float* qh = qs + h * hd;
        const bf16* kr = ks + j * kst;
        float d0 = 0.f, d1 = 0.f;
#pragma unroll 4
        for (int c = 0; c < hd; c += 8) {
          float kf[8];
          bf16x8_to_f32(*reinterpret_cast<const uint4*>(kr + c), kf);
          const float4 qa = *reinterpret_cast<const float4*>(qh + c), qb = *reinterpret_cast<const float4*>(qh + c + 4);
          d0 = fmaf(qa.x, kf[0], d0);
          d1 = fmaf(qa.y, kf[1], d1);
          d0 = fmaf(qa.z, kf[2], d0);
          d1 = fmaf(qa.w, kf[3], d1);
          d0 = fmaf(qb.x, kf[4], d0);
          d1 = fmaf(qb.y, kf[5], d1);
          d0 = fmaf(qb.z, kf[6], d0);
          d1 = fmaf(qb.w, kf[7], d1);
        }
        s = (d0 + d1) * a.scale;
      }
      sc[p] = s;
    }
    __syncthreads();
    // Softmax update per head: one max, one sum, one rescale factor per tile.
    for (int h = warp; h < G; h += kDecodeThreads / 32) {
      float* sh = sc + h * tk;
      float sv[2];
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        sv[i] = lane + 32 * i < tk ? sh[lane + 32 * i] : -INFINITY;
        mx = fmaxf(mx, sv[i]);
      }
      mx = warp_max(mx);
      const float m_old = m_s[h], m_new = fmaxf(m_old, mx);
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float e = m_new == -INFINITY ? 0.f : expf(sv[i] - m_new);
        if (lane + 32 * i < tk) sh[lane + 32 * i] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float corr = m_new == -INFINITY ? 1.f : expf(m_old - m_new);
        corr_s[h] = corr;
        l_s[h] = l_s[h] * corr + sum;
        m_s[h] = m_new;
      }
    }
    __syncthreads();
    // P.V: a thread per (head, 4 consecutive dims).
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int item = tid + i * kDecodeThreads;
      if (item < n_items) {
        const int h = item / tph, d0 = (item - h * tph) * 4;
        const float corr = corr_s[h];
        const float* ph = sc + h * tk;
        float4 o = make_float4(acc[i].x * corr, acc[i].y * corr, acc[i].z * corr, acc[i].w * corr);
#pragma unroll 4
        for (int j = 0; j < tn; ++j) {
          const float pj = ph[j];
          const uint2 v = *reinterpret_cast<const uint2*>(vs + j * kst + d0);
          const float2 v01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
          const float2 v23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
          o.x = fmaf(pj, v01.x, o.x);
          o.y = fmaf(pj, v01.y, o.y);
          o.z = fmaf(pj, v23.x, o.z);
          o.w = fmaf(pj, v23.y, o.w);
        }
        acc[i] = o;
      }
    }
  }

  // Finalise: normalised partial (or the output itself when the row has one split).
  bf16* out = static_cast<bf16*>(a.out);
  const int64_t head0 = int64_t(row) * a.nh + int64_t(kh) * G;  // (row, first head of the group)
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int item = tid + i * kDecodeThreads;
    if (item < n_items) {
      const int h = item / tph, d0 = (item - h * tph) * 4;
      const float l = l_s[h], inv = l > 0.f ? 1.0f / l : 0.f;
      const float4 o = make_float4(acc[i].x * inv, acc[i].y * inv, acc[i].z * inv, acc[i].w * inv);
      if (nsplit == 1) {
        __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(out + (head0 + h) * hd + d0);
        dst[0] = __floats2bfloat162_rn(o.x, o.y);
        dst[1] = __floats2bfloat162_rn(o.z, o.w);
      } else {
        const int64_t base = (head0 + h) * a.splits + split;
        *reinterpret_cast<float4*>(a.part_o + base * hd + d0) = o;
        if (d0 == 0) a.part_lse[base] = l > 0.f ? m_s[h] + logf(l) : -INFINITY;
      }
    }
  }
  if (nsplit == 1) return;

  // Ticket: the last split block of this (row, KV head) merges all splits.
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    unsigned int* ticket = &g_attn_tickets[blockIdx.x];
    const unsigned int t = atomicAdd(ticket, 1u);
    last_s = t == unsigned(nsplit - 1);
    if (last_s) atomicExch(ticket, 0u);  // every other split has taken its ticket
  }
  __syncthreads();
  if (!last_s) return;
  __threadfence();
  float* lse_s = reinterpret_cast<float*>(smem_raw);  // (G, nsplit): the K/V tiles are no longer read
  for (int i = tid; i < G * nsplit; i += kDecodeThreads) {
    const int h = i / nsplit, s = i - h * nsplit;
    lse_s[i] = __ldcg(a.part_lse + (head0 + h) * a.splits + s);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int item = tid + i * kDecodeThreads;
    if (item < n_items) {
      const int h = item / tph, d0 = (item - h * tph) * 4;
      const float* lh = lse_s + h * nsplit;
      float mx = -INFINITY;
      for (int s = 0; s < nsplit; ++s) mx = fmaxf(mx, lh[s]);
      float4 num = make_float4(0.f, 0.f, 0.f, 0.f);
      float den = 0.f;
      if (mx != -INFINITY) {
        const float* po = a.part_o + (head0 + h) * a.splits * hd + d0;
#pragma unroll 8
        for (int s = 0; s < nsplit; ++s) {
          const float lse = lh[s];
          const float w = lse == -INFINITY ? 0.f : expf(lse - mx);
          const float4 v = __ldcg(reinterpret_cast<const float4*>(po + int64_t(s) * hd));
          num.x += w * v.x;
          num.y += w * v.y;
          num.z += w * v.z;
          num.w += w * v.w;
          den += w;
        }
      }
      __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(out + (head0 + h) * hd + d0);
      dst[0] = __floats2bfloat162_rn(den > 0.f ? num.x / den : 0.f, den > 0.f ? num.y / den : 0.f);
      dst[1] = __floats2bfloat162_rn(den > 0.f ? num.z / den : 0.f, den > 0.f ? num.w / den : 0.f);
    }
  }
}

size_t decode_smem_bytes(const AttnArgs& a) {
  const int G = a.nh / a.nkv, tk = attn_tile_keys(a.hd);
  const size_t kv = std::max(size_t(2) * tk * decode_kv_stride(a.hd) * sizeof(bf16), size_t(G) * a.splits * sizeof(float));
  return ((kv + 15) & ~size_t(15)) + size_t(G) * a.hd * sizeof(float) + size_t(G) * tk * sizeof(float) +
         kDecodeTabEnt * sizeof(int32_t);
}

template <int ITEMS>
Status launch_decode(const AttnArgs& a, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024)
    MS_CUDA_RETURN(cudaFuncSetAttribute(paged_attention_decode_kernel<ITEMS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  paged_attention_decode_kernel<ITEMS><<<dim3(a.rows * a.nkv, a.splits), kDecodeThreads, smem, stream>>>(a);
  MS_CUDA_LAUNCH_CHECK("paged_attention_decode_kernel");
  return Status::ok();
}

namespace {

// Process-wide decode kernel choice; the environment sets the initial value.
std::atomic<int>& decode_kernel_choice() {
  static std::atomic<int> choice{[] {
    const char* e = std::getenv("MEGASERVE_ATTN_DECODE");
    return static_cast<int>(e != nullptr && std::strcmp(e, "simt") == 0 ? AttnDecodeKernel::kSimt
                                                                         : AttnDecodeKernel::kMma);
  }()};
  return choice;
}

template <int HD>
Status launch_decode_mma(const AttnArgs& a, cudaStream_t stream) {
  int dev = 0, sms = 0;
  MS_CUDA_RETURN(cudaGetDevice(&dev));
  MS_CUDA_RETURN(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // About one wave of blocks: (row, KV head) pairs x splits ~ SM count; the
  // kernel then sizes each row's splits from its length (>= 128 keys each).
  const int64_t pairs = int64_t(a.rows) * a.nkv;
  const int max_splits =
      static_cast<int>(std::clamp<int64_t>((sms + pairs - 1) / pairs, 1, std::min(a.splits, 65535)));
  const size_t smem = mma_smem_bytes(HD);
  MS_CUDA_RETURN(cudaFuncSetAttribute(paged_attention_decode_mma_kernel<HD>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  paged_attention_decode_mma_kernel<HD><<<dim3(a.rows * a.nkv, max_splits), kMmaThreads, smem, stream>>>(a, max_splits);
  MS_CUDA_LAUNCH_CHECK("paged_attention_decode_mma_kernel");
  if (max_splits > 1) {
    attention_decode_combine_kernel<<<dim3(a.rows, a.nh), HD, size_t(max_splits) * sizeof(float), stream>>>(
        a, max_splits);
    MS_CUDA_LAUNCH_CHECK("attention_decode_combine_kernel");
  }
  return Status::ok();
}

std::atomic<int>& prefill_kernel_choice() {
  static std::atomic<int> choice{[] {
    const char* e = std::getenv("MEGASERVE_ATTN_PREFILL");
    if (e != nullptr && std::strcmp(e, "simt") == 0) return static_cast<int>(AttnPrefillKernel::kSimt);
    if (e != nullptr && std::strcmp(e, "wgmma") == 0) return static_cast<int>(AttnPrefillKernel::kWgmma);
    return static_cast<int>(AttnPrefillKernel::kMma);
  }()};
  return choice;
}

// The shapes the tensor-core prefill kernel is built for (besides the kernel choice).
bool prefill_mma_shape(int nh, int nkv, int hd) {
  if (hd != 64 && hd != 128) return false;
  if (nkv <= 0 || nh % nkv != 0) return false;
  const int G = nh / nkv;
  return G == 1 || G == 2 || G == 4 || G == 8 || G == 16;
}

template <int HD>
Status launch_prefill_mma(const AttnArgs& a, cudaStream_t stream) {
  const bool eight = a.rows_per_tile * (a.nh / a.nkv) > kMmaPrefillRows;  // tiles of up to 128 rows
  // The wgmma variant (4 warps only): stages of unpadded, swizzled K rows plus
  // 1024 bytes to align them.
  const bool wg = attention_prefill_kernel() == AttnPrefillKernel::kWgmma && !eight;
  const size_t smem = wg ? size_t(kMmaStages) * (kMmaStageKeys * HD + kMmaStageKeys * mma_kv_stride(HD)) * 2 +
                               kMmaTabEnt * sizeof(int32_t) + 1024
                         : mma_smem_bytes(HD);
  auto* fn = wg ? paged_attention_prefill_mma_kernel<HD, 4, true>
                : eight ? paged_attention_prefill_mma_kernel<HD, 8> : paged_attention_prefill_mma_kernel<HD, 4>;
  MS_CUDA_RETURN(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  fn<<<dim3(a.n_tiles * a.nkv, a.splits), eight ? 256 : 128, smem, stream>>>(a);
  MS_CUDA_LAUNCH_CHECK("paged_attention_prefill_mma_kernel");
  if (a.splits > 1) {  // one split: the kernel wrote the output
    attention_combine_kernel<<<dim3(a.rows, a.nh), HD, size_t(a.splits) * sizeof(float), stream>>>(
        a.part_o, a.part_lse, a.nh, a.splits, HD, static_cast<bf16*>(a.out));
    MS_CUDA_LAUNCH_CHECK("attention_combine_kernel");
  }
  return Status::ok();
}

}  // namespace

void set_attention_prefill_kernel(AttnPrefillKernel k) { prefill_kernel_choice().store(static_cast<int>(k)); }

AttnPrefillKernel attention_prefill_kernel() { return static_cast<AttnPrefillKernel>(prefill_kernel_choice().load()); }

bool attention_prefill_uses_mma(const AttnArgs& a) {
  const bool decode = a.rows_per_tile == 1 && a.n_tiles == a.rows;
  return attention_prefill_kernel() != AttnPrefillKernel::kSimt && !decode && prefill_mma_shape(a.nh, a.nkv, a.hd) &&
         a.rows_per_tile >= 1 && a.rows_per_tile * (a.nh / a.nkv) <= kMmaPrefillMaxRows && a.ldq % 2 == 0 &&
         int64_t(a.n_tiles) * a.nkv <= 0x7fffffff && a.splits >= 1 && a.splits <= 65535;
}

int attention_prefill_rows_per_tile(int nh, int nkv, int hd, int64_t max_pos) {
  if (attention_prefill_kernel() == AttnPrefillKernel::kMma && prefill_mma_shape(nh, nkv, hd))
    return (max_pos >= kAttnPrefillLongKeys ? kMmaPrefillMaxRows : kMmaPrefillRows) / (nh / nkv);
  if (attention_prefill_kernel() == AttnPrefillKernel::kWgmma && prefill_mma_shape(nh, nkv, hd))
    return kMmaPrefillRows / (nh / nkv);  // one warpgroup: 64 rows
  const int G = nkv > 0 ? nh / nkv : 1;
  return std::max(1, std::min(8, 16 / std::max(G, 1)));
}

void set_attention_decode_kernel(AttnDecodeKernel k) { decode_kernel_choice().store(static_cast<int>(k)); }

AttnDecodeKernel attention_decode_kernel() { return static_cast<AttnDecodeKernel>(decode_kernel_choice().load()); }

bool attention_decode_uses_mma(const AttnArgs& a) {
  return attention_decode_kernel() == AttnDecodeKernel::kMma && a.rows_per_tile == 1 && a.n_tiles == a.rows &&
         (a.hd == 64 || a.hd == 128) && a.nkv > 0 && a.nh % a.nkv == 0 && a.nh / a.nkv <= 16 && a.ldq % 2 == 0 &&
         int64_t(a.rows) * a.nkv <= 0x7fffffff && a.splits >= 1;
}

Status launch_paged_attention(const AttnArgs& a, cudaStream_t stream) {
  if (a.n_tiles == 0) return Status::ok();
  if (a.hd < 8 || a.hd > 256 || (a.hd & (a.hd - 1)) != 0)
    return invalid_argument("paged attention: head_dim must be a power of two in [8, 256]");
  if (a.nkv <= 0 || a.nh % a.nkv != 0) return invalid_argument("paged attention: n_heads % n_kv_heads != 0");
  if (a.splits < 1) return invalid_argument("paged attention: splits < 1");
  // Prefill: the tensor-core kernel where it applies (up to 64 (token, head)
  // rows per tile), else the CUDA-core kernel below (up to kAttnMaxWarps).
  if (attention_prefill_uses_mma(a))
    return a.hd == 64 ? launch_prefill_mma<64>(a, stream) : launch_prefill_mma<128>(a, stream);
  const int warps = (a.nh / a.nkv) * a.rows_per_tile;
  // Decode (one row per tile, tile i = row i): the tensor-core kernel where it
  // applies, else the fused single-launch CUDA-core kernel.
  if (attention_decode_uses_mma(a)) return a.hd == 64 ? launch_decode_mma<64>(a, stream) : launch_decode_mma<128>(a, stream);
  const int G = a.nh / a.nkv;
  if (a.rows_per_tile == 1 && a.n_tiles == a.rows && int64_t(a.rows) * a.nkv <= kDecodeMaxTickets &&
      a.ldq % 4 == 0 && a.splits <= 65535) {
    const size_t smem = decode_smem_bytes(a);
    const int items = (G * a.hd / 4 + kDecodeThreads - 1) / kDecodeThreads;  // <= 32 * 256 / 4 / 256 = 8
    if (items <= 1) return launch_decode<1>(a, smem, stream);
    if (items <= 2) return launch_decode<2>(a, smem, stream);
    if (items <= 4) return launch_decode<4>(a, smem, stream);
    return launch_decode<8>(a, smem, stream);
  }
  if (warps > kAttnMaxWarps)
    return invalid_argument("paged attention: GQA group * rows_per_tile = " + std::to_string(warps) + " > " +
                            std::to_string(kAttnMaxWarps) + " (the CUDA-core kernel's limit)");
  const int tk = attn_tile_keys(a.hd);
  const size_t smem = size_t(2) * tk * a.hd * sizeof(bf16);
  dim3 grid(a.n_tiles * a.nkv, a.splits);
  paged_attention_kernel<<<grid, warps * 32, smem, stream>>>(a);
  MS_CUDA_LAUNCH_CHECK("paged_attention_kernel");
  attention_combine_kernel<<<dim3(a.rows, a.nh), a.hd, size_t(a.splits) * sizeof(float), stream>>>(
      a.part_o, a.part_lse, a.nh, a.splits, a.hd, static_cast<bf16*>(a.out));
  MS_CUDA_LAUNCH_CHECK("attention_combine_kernel");
  return Status::ok();
}

}  // namespace ms::gpu
