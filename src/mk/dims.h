// Model dimensions and tile geometry of the megakernel, shared by the
// schedule builder, the CPU interpreter and the device kernel: which weight
// rows a tile covers, how a row's keys split, which k-slice an O-projection
// or dense-down instruction reads. One definition, so the three agree by
// construction.
#pragma once

#include <cstdint>
#include <vector>

#include "mk/instruction.h"

namespace ms {
struct ModelConfig;
class Status;
}  // namespace ms

namespace ms::mk {

// Everything of the model's shape and math the instructions need (POD: it is
// a kernel parameter).
struct Dims {
  int32_t hidden = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, group = 0;  // group = n_heads / n_kv_heads
  int32_t q_width = 0, kv_width = 0, qkv_width = 0;
  int32_t n_layers = 0, vocab = 0;
  int32_t n_experts = 0, top_k = 0, moe_ffn = 0;  // 0 experts: dense model
  int32_t dense_ffn = 0, shared_ffn = 0;           // shared_ffn 0: no shared expert
  int32_t block_size = 0, sliding_window = 0;
  int32_t down_rows = kTileRows;  // hidden rows of an expert down tile (expert_down_rows)
  float norm_eps = 1e-6f, logit_scale = 1.f, attn_scale = 1.f;
  uint8_t norm_layer = 0;         // 1: mean-centred LayerNorm (no bias), 0: RMSNorm
  uint8_t rope_neox = 0;          // 1: NeoX halves, 0: interleaved pairs
  uint8_t qk_norm = 0;
  uint8_t attention_bias = 0;
  uint8_t parallel_block = 0;
  uint8_t router_sigmoid = 0, softmax_over_topk = 0, norm_topk_prob = 0;
  uint8_t shared_sum = 1;         // shared expert: 1 sum, 0 average with the routed output
  uint8_t reserved[3] = {};
};

// Per-layer attention / FFN kind (device array of n_layers).
struct LayerInfo {
  uint8_t sliding = 0, rope = 0, moe = 0, reserved = 0;
};

// Fills Dims from a config; `block_size` is the KV cache's.
Dims make_dims(const ModelConfig& cfg, int block_size);
std::vector<LayerInfo> make_layer_info(const ModelConfig& cfg);
// Whether the megakernel takes this model shape (kUnimplemented naming the
// first setting it does not, so the caller can log why decode stays layered).
Status check_supported(const ModelConfig& cfg, int block_size);

MS_HD int ceil_div(int a, int b) { return (a + b - 1) / b; }

// ---- QKV: tile t = rows [16 t, 16 t + 16) of the fused (q | k | v) matrix ----
MS_HD int qkv_tiles(const Dims& d) { return ceil_div(d.qkv_width, kTileRows); }
// The KV group whose attention reads fused row `r`.
MS_HD int qkv_row_group(const Dims& d, int r) {
  if (r < d.q_width) return r / (d.group * d.head_dim);
  if (r < d.q_width + d.kv_width) return (r - d.q_width) / d.head_dim;
  return (r - d.q_width - d.kv_width) / d.head_dim;
}
// Row ranges of group g's q, k and v (three ranges of the fused matrix).
struct RowRange {
  int begin, end;
};
MS_HD RowRange qkv_group_rows(const Dims& d, int g, int part) {  // part 0: q, 1: k, 2: v
  if (part == 0) return {g * d.group * d.head_dim, (g + 1) * d.group * d.head_dim};
  const int base = d.q_width + (part == 2 ? d.kv_width : 0);
  return {base + g * d.head_dim, base + (g + 1) * d.head_dim};
}

// ---- O projection: output tiles of H rows; k-slice g = the G heads of KV group g ----
MS_HD int o_tiles(const Dims& d) { return ceil_div(d.hidden, kTileRows); }
MS_HD int o_slices(const Dims& d) { return d.n_kv_heads; }
MS_HD RowRange o_slice_cols(const Dims& d, int g) {
  return {g * d.group * d.head_dim, (g + 1) * d.group * d.head_dim};
}

// ---- Router: tile t = experts [16 t, 16 t + 16) ----
MS_HD int router_tiles(const Dims& d) { return ceil_div(d.n_experts, kTileRows); }

// ---- Gate/up pair tiles: tile t = intermediate columns [8 t, 8 t + 8): the
// stage's rows 0-7 are gate rows, 8-15 the matching up rows ----
constexpr int kPairCols = kTileRows / 2;
MS_HD int pair_tiles(int width) { return ceil_div(width, kPairCols); }

// ---- Down projections (dense / shared / experts): output tiles of H rows ----
MS_HD int down_tiles(const Dims& d) { return ceil_div(d.hidden, kTileRows); }
// k-slices of a dense-down over an intermediate of `width` columns: each at
// most kMaxActCols, a multiple of 16.
MS_HD int down_slices(int width) { return ceil_div(width, kMaxActCols); }
MS_HD RowRange down_slice_cols(int width, int j) {
  const int n = down_slices(width);
  const int ch = ceil_div(ceil_div(width, n), 16) * 16;
  const int b = j * ch, e = b + ch < width ? b + ch : width;
  return {b, e};
}

// ---- Expert queues: tiles per routed expert ----
MS_HD int expert_gu_tiles(const Dims& d) { return pair_tiles(d.moe_ffn); }
// An expert down tile: d.down_rows rows of the down matrix (all its
// moe_ffn columns), at most 32 (two mma row blocks), its rows in a stage at
// expert_down_row_bytes: as many rows as fill a ring stage when a row is
// one stage chunk (moe_ffn <= kStageCols: 21 rows at moe_ffn 768, 33 KB of
// a stage where 16 rows padded to kStageCols columns filled 24 KB of it).
MS_HD int expert_down_rows(int moe_ffn) {
  const int row_bytes = moe_ffn * 2 + 16;
  if (moe_ffn > kStageCols) return kTileRows;
  const int fit = kStageBytes / row_bytes;
  return fit < kTileRows ? kTileRows : (fit > 2 * kTileRows ? 2 * kTileRows : fit);
}
MS_HD int expert_down_row_bytes(const Dims& d) {
  return d.down_rows > kTileRows ? d.moe_ffn * 2 + 16 : kStageCols * 2 + 16;
}
MS_HD int expert_down_tiles(const Dims& d) { return ceil_div(d.hidden, d.down_rows); }
// Routed-expert slots a step can have: every row picks top_k distinct experts.
MS_HD int max_expert_slots(const Dims& d, int rows) {
  const int n = rows * d.top_k;
  return n < d.n_experts ? n : d.n_experts;
}

// ---- LM head: tile t = vocabulary rows [16 t, 16 t + 16) ----
MS_HD int lm_tiles(const Dims& d) { return ceil_div(d.vocab, kTileRows); }

// ---- Attention splits ----
// A row at position pos (its new token) attends keys [lo, pos], lo = pos -
// window + 1 on sliding layers (>= 0). The keys are taken in stages of
// kStageKeys aligned to absolute positions; split s of n takes a contiguous
// run of stages. The new token's key (pos) is in the last non-empty split.
struct SplitRange {
  int stage_begin, stage_end;  // absolute stage indices [begin, end): keys [64 begin, 64 end) ∩ [lo, pos]
  int lo, pos;                 // the row's key range
  int last_split;              // index of the last non-empty split
};
MS_HD SplitRange split_range(int pos, int window, int split, int n_splits) {
  SplitRange r;
  r.pos = pos;
  r.lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  const int s0 = r.lo / kStageKeys, s1 = pos / kStageKeys;
  const int n_st = s1 - s0 + 1;
  const int chunk = ceil_div(n_st, n_splits);
  r.last_split = (n_st - 1) / chunk;
  const int b = s0 + split * chunk;
  int e = b + chunk;
  if (e > s1 + 1) e = s1 + 1;
  r.stage_begin = b;
  r.stage_end = e > b ? e : b;
  return r;
}

}  // namespace ms::mk
