// Paged attention over the bf16 KV cache, for decode and prefill alike
// (flash-decoding: the key range is split across blocks, partial results are
// merged by a combine kernel with their log-sum-exp).
//
// Work unit: a "query tile" = up to rows_per_tile consecutive query rows of
// one sequence (decode: one row; prefill: consecutive tokens, which share the
// K/V tile loaded into shared memory). Grid: (n_tiles * nkv, splits); in the
// CUDA-core kernel a block holds one warp per (row of the tile, query head of
// the KV head's GQA group), in the tensor-core ones the (row, head) pairs are
// MMA rows (attention_mma.cuh).
// Row r at position pos[r] sees keys [max(0, pos - window + 1), pos] (window 0:
// from 0): causal, sliding window and ragged lengths come from the per-row
// positions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace ms::gpu {

struct AttnTile {
  int32_t row0;   // first query row
  int32_t nrows;  // rows in the tile (consecutive, same sequence, increasing positions)
};

struct AttnArgs {
  const float* q = nullptr;  // (rows, ldq) fp32; head h at q + row * ldq + h * hd
  int ldq = 0;
  const void* k_cache = nullptr;  // (num_blocks, nkv, block_size, hd) bf16
  const void* v_cache = nullptr;
  const int32_t* block_tables = nullptr;  // (n_seq, max_blocks) int32
  int max_blocks = 0;
  const int32_t* row_seq = nullptr;  // (rows) sequence index into block_tables
  const int32_t* row_pos = nullptr;  // (rows) position of the query token
  const AttnTile* tiles = nullptr;   // (n_tiles)
  int n_tiles = 0;
  int rows_per_tile = 1;
  int rows = 0;
  int splits = 1;
  int window = 0;
  int nh = 0, nkv = 0, hd = 0, block_size = 0;
  float scale = 1.f;              // 1 / sqrt(hd)
  float* part_o = nullptr;        // (rows, nh, splits, hd) fp32 workspace
  float* part_lse = nullptr;      // (rows, nh, splits) fp32 workspace
  void* out = nullptr;            // (rows, nh * hd) bf16
};

// hd in {8, 16, 32, 64, 128, 256}; (nh / nkv) * rows_per_tile <= 64 where the
// tensor-core prefill kernel runs (attention_prefill_uses_mma), decode rows
// (rows_per_tile 1) with any group that the decode kernels take, else <= 16
// (the CUDA-core kernel: a warp per row and head); an error otherwise.
Status launch_paged_attention(const AttnArgs& a, cudaStream_t stream);

// Decode (rows_per_tile 1) kernel choice, process-wide: kMma (default) runs
// the tensor-core kernel (attention_mma.cuh) for hd 64 / 128 and GQA groups
// <= 16, the CUDA-core kernel otherwise; kSimt always runs the CUDA-core one.
// MEGASERVE_ATTN_DECODE=simt sets kSimt at start (the fallback switch).
// Not synchronised with launches in flight: set it before a run.
enum class AttnDecodeKernel { kMma, kSimt };
void set_attention_decode_kernel(AttnDecodeKernel k);
AttnDecodeKernel attention_decode_kernel();
// Whether launch_paged_attention(a) runs the tensor-core decode kernel.
bool attention_decode_uses_mma(const AttnArgs& a);

// Prefill (every launch that is not decode-shaped: rows_per_tile > 1, or
// tiles that are not one per row) kernel choice, process-wide: kMma (default)
// runs the tensor-core prefill kernel (attention_mma.cuh) for hd 64 / 128 and
// GQA groups of 1, 2, 4, 8 or 16 with rows_per_tile * group <= 64, the
// CUDA-core kernel otherwise; kSimt always runs the CUDA-core one; kWgmma
// runs the tensor-core kernel with Q K^T on warpgroup wgmma (64-row tiles;
// written 2026-11-29 after the session's GPU time was spent: NOT yet run on a
// GPU, hence not the default). MEGASERVE_ATTN_PREFILL=simt|wgmma sets the
// choice at start. Not synchronised with
// launches in flight: set it before a run (and before sizing tiles with
// attention_prefill_rows_per_tile).
enum class AttnPrefillKernel { kMma, kSimt, kWgmma };
void set_attention_prefill_kernel(AttnPrefillKernel k);
AttnPrefillKernel attention_prefill_kernel();
// Whether launch_paged_attention(a) runs the tensor-core prefill kernel.
bool attention_prefill_uses_mma(const AttnArgs& a);
// Query rows per prefill tile for the model shape under the current choice,
// for a step whose longest sequence ends at max_pos (exclusive): where the
// tensor-core prefill kernel takes the shape, its block's MMA rows (the
// tile's tokens x the group's heads) / group: 64 rows (4 warps), or 128 (8
// warps) from kAttnPrefillLongKeys keys on, where each K/V stage serving
// twice the rows pays for the fewer blocks (H200, NMC: 32K prompt -4.5%, 2K
// +4%); else the CUDA-core kernel's max(1, min(8, 16 / group)).
constexpr int kAttnPrefillLongKeys = 8192;
int attention_prefill_rows_per_tile(int nh, int nkv, int hd, int64_t max_pos);

}  // namespace ms::gpu
