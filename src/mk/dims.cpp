#include "mk/dims.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/status.h"
#include "model/config.h"

namespace ms::mk {

Dims make_dims(const ModelConfig& cfg, int block_size) {
  Dims d;
  d.hidden = cfg.hidden;
  d.n_heads = cfg.n_heads;
  d.n_kv_heads = cfg.n_kv_heads;
  d.head_dim = cfg.head_dim;
  d.group = cfg.n_kv_heads > 0 ? cfg.n_heads / cfg.n_kv_heads : 0;
  d.q_width = cfg.q_width();
  d.kv_width = cfg.kv_width();
  d.qkv_width = d.q_width + 2 * d.kv_width;
  d.n_layers = cfg.n_layers;
  d.vocab = cfg.vocab_size;
  d.n_experts = cfg.n_experts;
  d.top_k = cfg.top_k;
  d.moe_ffn = cfg.moe_ffn;
  d.down_rows = cfg.moe_ffn > 0 ? expert_down_rows(cfg.moe_ffn) : kTileRows;
  d.dense_ffn = cfg.dense_ffn;
  d.shared_ffn = cfg.n_shared_experts > 0 ? cfg.shared_ffn : 0;
  d.block_size = block_size;
  d.sliding_window = cfg.sliding_window;
  d.norm_eps = cfg.norm_eps;
  d.logit_scale = cfg.logit_scale;
  d.attn_scale = 1.0f / std::sqrt(static_cast<float>(cfg.head_dim));
  d.norm_layer = cfg.norm == NormKind::kLayer ? 1 : 0;
  d.rope_neox = cfg.rope_style == RopeStyle::kNeox ? 1 : 0;
  d.qk_norm = cfg.qk_norm ? 1 : 0;
  d.attention_bias = cfg.attention_bias ? 1 : 0;
  d.parallel_block = cfg.parallel_block ? 1 : 0;
  d.router_sigmoid = cfg.router == RouterFn::kSigmoid ? 1 : 0;
  d.softmax_over_topk = cfg.softmax_over_topk ? 1 : 0;
  d.norm_topk_prob = cfg.norm_topk_prob ? 1 : 0;
  d.shared_sum = cfg.shared_sum ? 1 : 0;
  return d;
}

std::vector<LayerInfo> make_layer_info(const ModelConfig& cfg) {
  std::vector<LayerInfo> v(cfg.n_layers);
  for (int l = 0; l < cfg.n_layers; ++l) {
    v[l].sliding = cfg.layers[l].sliding ? 1 : 0;
    v[l].rope = cfg.layers[l].rope ? 1 : 0;
    v[l].moe = cfg.layers[l].moe ? 1 : 0;
  }
  return v;
}

Status check_supported(const ModelConfig& cfg, int block_size) {
  auto no = [](const std::string& what) { return unimplemented("megakernel: " + what); };
  const Dims d = make_dims(cfg, block_size);
  if (d.hidden % kTileRows != 0 || d.hidden > kMaxActCols)
    return no("hidden_size " + std::to_string(d.hidden) + " (needs a multiple of 16, at most " +
              std::to_string(kMaxActCols) + ")");
  if (d.head_dim != 32 && d.head_dim != 64 && d.head_dim != 128)
    return no("head_dim " + std::to_string(d.head_dim) + " (needs 32, 64 or 128)");
  if (d.n_kv_heads < 1 || d.n_heads % d.n_kv_heads != 0 || d.group > 16)
    return no("GQA group of " + std::to_string(d.n_heads) + " / " + std::to_string(d.n_kv_heads) + " heads (at most 16)");
  if (d.group * d.head_dim > kMaxActCols) return no("a KV group's query width above " + std::to_string(kMaxActCols));
  if (block_size < 16 || block_size > 256 || (block_size & (block_size - 1)) != 0)
    return no("KV block size " + std::to_string(block_size) + " (needs a power of two in 16..256)");
  if (cfg.dense_ffn > 0 && cfg.dense_ffn % kTileRows != 0)
    return no("intermediate_size " + std::to_string(cfg.dense_ffn) + " (needs a multiple of 16)");
  if (cfg.is_moe()) {
    if (d.moe_ffn % kTileRows != 0 || d.moe_ffn > kMaxActCols)
      return no("moe_intermediate_size " + std::to_string(d.moe_ffn) + " (needs a multiple of 16, at most " +
                std::to_string(kMaxActCols) + ")");
    if (d.n_experts > 256 || d.top_k > kMaxTopK || d.top_k > d.n_experts)
      return no("more than 256 experts or top_k above " + std::to_string(kMaxTopK));
    if (d.shared_ffn % kTileRows != 0) return no("shared expert width " + std::to_string(d.shared_ffn));
  }
  if (d.vocab < 1) return no("empty vocabulary");
  const int ffn_rows = std::max(d.top_k, d.dense_ffn > 0 ? down_slices(d.dense_ffn) : 0);
  const int norm_sources = d.n_kv_heads + ffn_rows + (d.shared_ffn > 0 ? down_slices(d.shared_ffn) : 0);
  if (norm_sources > kMaxNormSources)
    return no("a norm adding " + std::to_string(norm_sources) + " partial rows (KV heads + top_k or dense down slices + "
              "shared expert slices; at most " + std::to_string(kMaxNormSources) + ")");
  return Status::ok();
}

}  // namespace ms::mk
