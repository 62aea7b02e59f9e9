#include "gpu/ops/attention.h"

#include <cmath>

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"

namespace ms::gpu {

// Keys per shared-memory tile: K and V tiles together stay at 32 KB.
__host__ __device__ constexpr int attn_tile_keys(int hd) { return hd >= 128 ? 8192 / hd : 64; }

// Lanes split a key's head_dim in 8-element (16-byte) pieces: lpk = hd / 8
// lanes per key, 32 / lpk keys in flight per warp; each lane group keeps its
// own online-softmax state (m, l, acc[8]) and the groups merge at the end.
__global__ void paged_attention_kernel(AttnArgs a) {
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

Status launch_paged_attention(const AttnArgs& a, cudaStream_t stream) {
  if (a.n_tiles == 0) return Status::ok();
  if (a.hd < 8 || a.hd > 256 || (a.hd & (a.hd - 1)) != 0)
    return invalid_argument("paged attention: head_dim must be a power of two in [8, 256]");
  if (a.nkv <= 0 || a.nh % a.nkv != 0) return invalid_argument("paged attention: n_heads % n_kv_heads != 0");
  const int warps = (a.nh / a.nkv) * a.rows_per_tile;
  if (warps > 32) return invalid_argument("paged attention: GQA group * rows_per_tile > 32");
  if (a.splits < 1) return invalid_argument("paged attention: splits < 1");
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
