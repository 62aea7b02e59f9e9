// ModelConfig: everything in a HF config.json that changes the math, parsed
// and validated for the four families megaserve serves (cohere2_moe,
// qwen3_moe, qwen3, llama). A setting the engine does not implement is an
// error that names it; nothing is silently approximated.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace ms {

enum class Arch { kCohere2Moe, kQwen3Moe, kQwen3, kLlama };
enum class RopeStyle { kInterleaved, kNeox };  // GPT-J pairs (x0,x1) vs halves (x_i, x_{i+d/2})
enum class RouterFn { kSoftmax, kSigmoid };
enum class NormKind { kRms, kLayer };           // LayerNorm = mean-centred, no bias (Cohere)

const char* arch_name(Arch a);                   // "cohere2_moe", ...
Result<Arch> parse_arch(const std::string& s);

struct RopeScaling {
  enum class Kind { kNone, kLinear, kLlama3 } kind = Kind::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int original_max_position = 8192;                        // llama3
};

struct LayerSpec {
  bool sliding = false;  // sliding-window attention (window = ModelConfig::sliding_window)
  bool rope = true;      // false: NoPE layer (Cohere full-attention layers)
  bool moe = false;      // false: dense SwiGLU FFN of width dense_ffn
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  int vocab_size = 0;
  int hidden = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int dense_ffn = 0;       // width of dense SwiGLU layers
  int moe_ffn = 0;         // width of one expert
  int n_experts = 0;
  int top_k = 0;
  int n_shared_experts = 0;
  int shared_ffn = 0;      // width of the (single, merged) shared-expert MLP
  bool shared_sum = true;  // cohere: "sum" or "average" of routed + shared
  RouterFn router = RouterFn::kSoftmax;
  bool norm_topk_prob = true;
  // cohere2_moe applies softmax to the top-k logits only; qwen3_moe to all
  // experts then picks top-k. Identical when renormalised, not otherwise.
  bool softmax_over_topk = false;
  NormKind norm = NormKind::kRms;
  float norm_eps = 1e-6f;
  bool parallel_block = false;  // x + attn(norm(x)) + ffn(norm(x)), one norm
  bool qk_norm = false;         // per-head RMSNorm on q and k before RoPE
  bool attention_bias = false;  // llama: biases on q/k/v/o
  bool tie_embeddings = false;
  float logit_scale = 1.0f;
  RopeStyle rope_style = RopeStyle::kNeox;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int max_position = 0;
  int sliding_window = 0;  // 0: no sliding layers
  std::vector<LayerSpec> layers;
  int bos_id = -1;
  std::vector<int> eos_ids;

  bool is_moe() const { return n_experts > 0; }
  int q_width() const { return n_heads * head_dim; }
  int kv_width() const { return n_kv_heads * head_dim; }
  int64_t param_count() const;          // all parameters
  int64_t active_param_count() const;   // per token (top_k experts)
  std::string summary() const;          // one line for logs

  // Parses a HF config.json object. `source` names the file in errors.
  static Result<ModelConfig> from_json(const nlohmann::json& j, const std::string& source = "config.json");
  static Result<ModelConfig> from_file(const std::string& path);
  // Writes a HF-compatible config.json object (what init-random saves).
  nlohmann::json to_json() const;
  Status validate() const;
};

// Preset shapes for init-random and --random: "tiny" (tests) and "full"
// (North Mini Code / Qwen3-30B-A3B / Llama-3.2-1B / Qwen3-0.6B shapes).
Result<ModelConfig> preset_config(Arch arch, const std::string& size);

}  // namespace ms
