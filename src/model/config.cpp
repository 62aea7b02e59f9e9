#include "model/config.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "core/json_parse.h"

namespace ms {

using nlohmann::json;

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kCohere2Moe: return "cohere2_moe";
    case Arch::kQwen3Moe: return "qwen3_moe";
    case Arch::kQwen3: return "qwen3";
    case Arch::kLlama: return "llama";
  }
  return "?";
}

Result<Arch> parse_arch(const std::string& s) {
  if (s == "cohere2_moe" || s == "nmc") return Arch::kCohere2Moe;
  if (s == "qwen3_moe") return Arch::kQwen3Moe;
  if (s == "qwen3") return Arch::kQwen3;
  if (s == "llama") return Arch::kLlama;
  return unimplemented("architecture '" + s + "' is not supported (supported: cohere2_moe, qwen3_moe, qwen3, llama)");
}

namespace {

// Typed field access with errors that name the file and the field.
class Fields {
 public:
  Fields(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  Status get_int(const char* key, int* out, std::optional<int> def = std::nullopt) const {
    if (!has(key)) {
      if (def) { *out = *def; return Status::ok(); }
      return invalid_argument(source_ + ": missing required field '" + key + "'");
    }
    const json& v = j_[key];
    if (!v.is_number_integer()) return invalid_argument(source_ + ": field '" + key + "' must be an integer");
    int64_t x = v.get<int64_t>();
    if (x < 0 || x > (int64_t{1} << 31) - 1)
      return invalid_argument(source_ + ": field '" + key + "' out of range: " + std::to_string(x));
    *out = static_cast<int>(x);
    return Status::ok();
  }

  Status get_double(const char* key, double* out, std::optional<double> def = std::nullopt) const {
    if (!has(key)) {
      if (def) { *out = *def; return Status::ok(); }
      return invalid_argument(source_ + ": missing required field '" + key + "'");
    }
    if (!j_[key].is_number()) return invalid_argument(source_ + ": field '" + key + "' must be a number");
    *out = j_[key].get<double>();
    if (!std::isfinite(*out)) return invalid_argument(source_ + ": field '" + key + "' is not finite");
    return Status::ok();
  }

  Status get_bool(const char* key, bool* out, bool def) const {
    if (!has(key)) { *out = def; return Status::ok(); }
    if (!j_[key].is_boolean()) return invalid_argument(source_ + ": field '" + key + "' must be a boolean");
    *out = j_[key].get<bool>();
    return Status::ok();
  }

  Status get_string(const char* key, std::string* out, const std::string& def) const {
    if (!has(key)) { *out = def; return Status::ok(); }
    if (!j_[key].is_string()) return invalid_argument(source_ + ": field '" + key + "' must be a string");
    *out = j_[key].get<std::string>();
    return Status::ok();
  }

  const json& raw(const char* key) const { return j_[key]; }
  const std::string& source() const { return source_; }

 private:
  const json& j_;
  std::string source_;
};

Status parse_rope_dict(const json& r, const std::string& where, double* theta, RopeScaling* sc) {
  if (!r.is_object()) return invalid_argument(where + " must be an object");
  std::string type = "default";
  if (r.contains("rope_type") && r["rope_type"].is_string()) type = r["rope_type"];
  else if (r.contains("type") && r["type"].is_string()) type = r["type"];
  if (r.contains("rope_theta") && r["rope_theta"].is_number()) *theta = r["rope_theta"].get<double>();
  auto num = [&](const char* k, double def) {
    return r.contains(k) && r[k].is_number() ? r[k].get<double>() : def;
  };
  if (type == "default") {
    sc->kind = RopeScaling::Kind::kNone;
  } else if (type == "linear") {
    sc->kind = RopeScaling::Kind::kLinear;
    sc->factor = num("factor", 1.0);
  } else if (type == "llama3") {
    sc->kind = RopeScaling::Kind::kLlama3;
    sc->factor = num("factor", 8.0);
    sc->low_freq_factor = num("low_freq_factor", 1.0);
    sc->high_freq_factor = num("high_freq_factor", 4.0);
    sc->original_max_position = static_cast<int>(num("original_max_position_embeddings", 8192));
  } else {
    return unimplemented(where + ": rope_type '" + type + "' is not implemented (supported: default, linear, llama3)");
  }
  if (sc->factor <= 0) return invalid_argument(where + ": rope scaling factor must be positive");
  return Status::ok();
}

// transformers 5 writes `rope_parameters` (possibly keyed by layer type);
// older files have `rope_theta` + `rope_scaling`. Accept both.
Status parse_rope(const Fields& f, double default_theta, ModelConfig* c) {
  double theta = default_theta;
  MS_RETURN_IF_ERROR(f.get_double("rope_theta", &theta, default_theta));
  RopeScaling sc;
  if (f.has("rope_scaling")) MS_RETURN_IF_ERROR(parse_rope_dict(f.raw("rope_scaling"), f.source() + ": rope_scaling", &theta, &sc));
  if (f.has("rope_parameters")) {
    const json& rp = f.raw("rope_parameters");
    if (rp.is_object() && (rp.contains("full_attention") || rp.contains("sliding_attention"))) {
      // Per-layer-type parameters: megaserve implements one RoPE for all layers.
      std::optional<std::pair<double, RopeScaling>> first;
      for (auto& [k, v] : rp.items()) {
        double t = theta;
        RopeScaling s;
        MS_RETURN_IF_ERROR(parse_rope_dict(v, f.source() + ": rope_parameters." + k, &t, &s));
        if (first && (first->first != t || first->second.kind != s.kind || first->second.factor != s.factor))
          return unimplemented(f.source() + ": rope_parameters differ between layer types (" + k + "), not implemented");
        first = {t, s};
      }
      if (first) { theta = first->first; sc = first->second; }
    } else {
      MS_RETURN_IF_ERROR(parse_rope_dict(rp, f.source() + ": rope_parameters", &theta, &sc));
    }
  }
  if (theta <= 0) return invalid_argument(f.source() + ": rope_theta must be positive");
  c->rope_theta = theta;
  c->rope_scaling = sc;
  return Status::ok();
}

Status parse_token_ids(const Fields& f, ModelConfig* c) {
  if (f.has("bos_token_id")) {
    if (!f.raw("bos_token_id").is_number_integer()) return invalid_argument(f.source() + ": bos_token_id must be an integer");
    c->bos_id = f.raw("bos_token_id").get<int>();
  }
  if (f.has("eos_token_id")) {
    const json& e = f.raw("eos_token_id");
    if (e.is_number_integer()) c->eos_ids = {e.get<int>()};
    else if (e.is_array()) {
      for (auto& x : e) {
        if (!x.is_number_integer()) return invalid_argument(f.source() + ": eos_token_id entries must be integers");
        c->eos_ids.push_back(x.get<int>());
      }
    } else return invalid_argument(f.source() + ": eos_token_id must be an integer or a list");
  }
  return Status::ok();
}

Status parse_layer_types(const Fields& f, int n_layers, std::vector<std::string>* out) {
  const json& lt = f.raw("layer_types");
  if (!lt.is_array() || static_cast<int>(lt.size()) != n_layers)
    return invalid_argument(f.source() + ": layer_types must be a list of num_hidden_layers (" + std::to_string(n_layers) + ") entries");
  for (auto& x : lt) {
    if (!x.is_string()) return invalid_argument(f.source() + ": layer_types entries must be strings");
    std::string s = x;
    if (s != "full_attention" && s != "sliding_attention")
      return unimplemented(f.source() + ": layer type '" + s + "' is not implemented");
    out->push_back(s);
  }
  return Status::ok();
}

Status check_act(const Fields& f) {
  std::string act;
  MS_RETURN_IF_ERROR(f.get_string("hidden_act", &act, "silu"));
  if (act != "silu") return unimplemented(f.source() + ": hidden_act '" + act + "' is not implemented (only silu)");
  return Status::ok();
}

Status parse_common(const Fields& f, ModelConfig* c) {
  MS_RETURN_IF_ERROR(f.get_int("vocab_size", &c->vocab_size));
  MS_RETURN_IF_ERROR(f.get_int("hidden_size", &c->hidden));
  MS_RETURN_IF_ERROR(f.get_int("num_hidden_layers", &c->n_layers));
  MS_RETURN_IF_ERROR(f.get_int("num_attention_heads", &c->n_heads));
  MS_RETURN_IF_ERROR(f.get_int("num_key_value_heads", &c->n_kv_heads, c->n_heads));
  MS_RETURN_IF_ERROR(check_act(f));
  MS_RETURN_IF_ERROR(parse_token_ids(f, c));
  if (c->n_heads <= 0 || c->hidden <= 0 || c->n_layers <= 0 || c->vocab_size <= 0)
    return invalid_argument(f.source() + ": hidden_size, num_hidden_layers, num_attention_heads and vocab_size must be positive");
  return Status::ok();
}

Status parse_cohere2_moe(const Fields& f, ModelConfig* c) {
  MS_RETURN_IF_ERROR(parse_common(f, c));
  MS_RETURN_IF_ERROR(f.get_int("head_dim", &c->head_dim, 128));
  MS_RETURN_IF_ERROR(f.get_int("intermediate_size", &c->moe_ffn));
  MS_RETURN_IF_ERROR(f.get_int("prefix_dense_intermediate_size", &c->dense_ffn, c->moe_ffn));
  MS_RETURN_IF_ERROR(f.get_int("num_experts", &c->n_experts, 8));
  MS_RETURN_IF_ERROR(f.get_int("num_experts_per_tok", &c->top_k, 2));
  MS_RETURN_IF_ERROR(f.get_int("num_shared_experts", &c->n_shared_experts, 0));
  c->shared_ffn = c->moe_ffn * c->n_shared_experts;
  std::string strategy, sel;
  MS_RETURN_IF_ERROR(f.get_string("shared_expert_combination_strategy", &strategy, "average"));
  if (strategy != "sum" && strategy != "average")
    return unimplemented(f.source() + ": shared_expert_combination_strategy '" + strategy + "' (only sum, average)");
  c->shared_sum = strategy == "sum";
  MS_RETURN_IF_ERROR(f.get_string("expert_selection_fn", &sel, "softmax"));
  if (sel == "softmax") c->router = RouterFn::kSoftmax;
  else if (sel == "sigmoid") c->router = RouterFn::kSigmoid;
  else return unimplemented(f.source() + ": expert_selection_fn '" + sel + "' (only softmax, sigmoid)");
  MS_RETURN_IF_ERROR(f.get_bool("norm_topk_prob", &c->norm_topk_prob, true));
  // HF: softmax over the top-k logits (always normalised); sigmoid normalised only if norm_topk_prob.
  c->softmax_over_topk = true;
  if (c->router == RouterFn::kSoftmax) c->norm_topk_prob = true;
  double eps = 0;
  if (f.has("rms_norm_eps")) {
    MS_RETURN_IF_ERROR(f.get_double("rms_norm_eps", &eps));
    c->norm = NormKind::kRms;
  } else {
    MS_RETURN_IF_ERROR(f.get_double("layer_norm_eps", &eps, 1e-5));
    c->norm = NormKind::kLayer;
  }
  c->norm_eps = static_cast<float>(eps);
  double ls = 0.0625;
  MS_RETURN_IF_ERROR(f.get_double("logit_scale", &ls, 0.0625));
  c->logit_scale = static_cast<float>(ls);
  MS_RETURN_IF_ERROR(f.get_bool("tie_word_embeddings", &c->tie_embeddings, true));
  bool bias = false;
  MS_RETURN_IF_ERROR(f.get_bool("attention_bias", &bias, false));
  if (bias) return unimplemented(f.source() + ": attention_bias=true is not implemented for cohere2_moe");
  MS_RETURN_IF_ERROR(f.get_int("sliding_window", &c->sliding_window, 4096));
  MS_RETURN_IF_ERROR(f.get_int("max_position_embeddings", &c->max_position, 8192));
  MS_RETURN_IF_ERROR(parse_rope(f, 10000.0, c));
  c->rope_style = RopeStyle::kInterleaved;
  c->parallel_block = true;

  int first_k = 0, prefix_pattern = 1, pattern = 4;
  MS_RETURN_IF_ERROR(f.get_int("first_k_dense_replace", &first_k, 0));
  MS_RETURN_IF_ERROR(f.get_int("prefix_dense_sliding_window_pattern", &prefix_pattern, 1));
  MS_RETURN_IF_ERROR(f.get_int("sliding_window_pattern", &pattern, 4));
  if (prefix_pattern <= 0 || pattern <= 0) return invalid_argument(f.source() + ": sliding window patterns must be positive");
  std::vector<std::string> types;
  if (f.has("layer_types")) {
    MS_RETURN_IF_ERROR(parse_layer_types(f, c->n_layers, &types));
  } else {
    for (int i = 0; i < c->n_layers; ++i) {
      bool prefix = i < first_k;
      int j = prefix ? i : i - first_k;
      int p = prefix ? prefix_pattern : pattern;
      types.push_back((j + 1) % p != 0 ? "sliding_attention" : "full_attention");
    }
  }
  std::vector<bool> dense(c->n_layers);
  if (f.has("mlp_layer_types")) {
    const json& m = f.raw("mlp_layer_types");
    if (!m.is_array() || static_cast<int>(m.size()) != c->n_layers)
      return invalid_argument(f.source() + ": mlp_layer_types must list num_hidden_layers entries");
    for (int i = 0; i < c->n_layers; ++i) {
      if (!m[i].is_string() || (m[i] != "dense" && m[i] != "sparse"))
        return unimplemented(f.source() + ": mlp_layer_types entry " + m[i].dump() + " (only dense, sparse)");
      dense[i] = m[i] == "dense";
    }
  } else {
    for (int i = 0; i < c->n_layers; ++i) dense[i] = i < first_k;
  }
  c->layers.resize(c->n_layers);
  for (int i = 0; i < c->n_layers; ++i) {
    LayerSpec& l = c->layers[i];
    l.sliding = types[i] == "sliding_attention";
    l.moe = !dense[i];
    // HF Cohere2MoeAttention: RoPE on sliding layers, and on dense layers when
    // prefix_dense_sliding_window_pattern == 1 ("force_rope"); NoPE otherwise.
    l.rope = l.sliding || (dense[i] && prefix_pattern == 1);
  }
  return Status::ok();
}

Status parse_qwen_sliding(const Fields& f, ModelConfig* c, std::vector<bool>* sliding) {
  sliding->assign(c->n_layers, false);
  bool use_sw = false;
  MS_RETURN_IF_ERROR(f.get_bool("use_sliding_window", &use_sw, false));
  int window = 0;
  if (f.has("sliding_window")) MS_RETURN_IF_ERROR(f.get_int("sliding_window", &window));
  if (f.has("layer_types")) {
    std::vector<std::string> types;
    MS_RETURN_IF_ERROR(parse_layer_types(f, c->n_layers, &types));
    for (int i = 0; i < c->n_layers; ++i) (*sliding)[i] = types[i] == "sliding_attention";
  } else if (use_sw) {
    int max_window_layers = c->n_layers;
    MS_RETURN_IF_ERROR(f.get_int("max_window_layers", &max_window_layers, c->n_layers));
    for (int i = 0; i < c->n_layers; ++i) (*sliding)[i] = i >= max_window_layers;
  }
  bool any = false;
  for (bool s : *sliding) any |= s;
  if (any) {
    if (window <= 0) return invalid_argument(f.source() + ": sliding layers need a positive sliding_window");
    c->sliding_window = window;
  }
  return Status::ok();
}

Status parse_qwen3(const Fields& f, ModelConfig* c, bool moe) {
  MS_RETURN_IF_ERROR(parse_common(f, c));
  MS_RETURN_IF_ERROR(f.get_int("head_dim", &c->head_dim, c->hidden / c->n_heads));
  MS_RETURN_IF_ERROR(f.get_int("intermediate_size", &c->dense_ffn));
  double eps = 1e-6;
  MS_RETURN_IF_ERROR(f.get_double("rms_norm_eps", &eps, 1e-6));
  c->norm_eps = static_cast<float>(eps);
  c->norm = NormKind::kRms;
  c->qk_norm = true;
  MS_RETURN_IF_ERROR(f.get_bool("tie_word_embeddings", &c->tie_embeddings, false));
  bool bias = false;
  MS_RETURN_IF_ERROR(f.get_bool("attention_bias", &bias, false));
  if (bias) return unimplemented(f.source() + ": attention_bias=true is not implemented for qwen3");
  MS_RETURN_IF_ERROR(f.get_int("max_position_embeddings", &c->max_position, 40960));
  MS_RETURN_IF_ERROR(parse_rope(f, 10000.0, c));
  c->rope_style = RopeStyle::kNeox;
  std::vector<bool> sliding;
  MS_RETURN_IF_ERROR(parse_qwen_sliding(f, c, &sliding));
  c->layers.resize(c->n_layers);
  std::set<int> mlp_only;
  int sparse_step = 1;
  if (moe) {
    MS_RETURN_IF_ERROR(f.get_int("moe_intermediate_size", &c->moe_ffn));
    // transformers 5 writes num_local_experts; older configs num_experts.
    MS_RETURN_IF_ERROR(f.get_int(f.has("num_local_experts") ? "num_local_experts" : "num_experts", &c->n_experts));
    MS_RETURN_IF_ERROR(f.get_int("num_experts_per_tok", &c->top_k));
    MS_RETURN_IF_ERROR(f.get_bool("norm_topk_prob", &c->norm_topk_prob, false));
    MS_RETURN_IF_ERROR(f.get_int("decoder_sparse_step", &sparse_step, 1));
    if (sparse_step <= 0) return invalid_argument(f.source() + ": decoder_sparse_step must be positive");
    if (f.has("mlp_only_layers")) {
      const json& m = f.raw("mlp_only_layers");
      if (!m.is_array()) return invalid_argument(f.source() + ": mlp_only_layers must be a list");
      for (auto& x : m) {
        if (!x.is_number_integer()) return invalid_argument(f.source() + ": mlp_only_layers entries must be integers");
        mlp_only.insert(x.get<int>());
      }
    }
    int shared = 0;
    MS_RETURN_IF_ERROR(f.get_int("shared_expert_intermediate_size", &shared, 0));
    if (shared > 0) return unimplemented(f.source() + ": shared_expert_intermediate_size (qwen2_moe-style shared expert) is not implemented for qwen3_moe");
    c->router = RouterFn::kSoftmax;
    c->softmax_over_topk = false;
  }
  for (int i = 0; i < c->n_layers; ++i) {
    c->layers[i].sliding = sliding[i];
    c->layers[i].rope = true;
    c->layers[i].moe = moe && c->n_experts > 0 && !mlp_only.count(i) && (i + 1) % sparse_step == 0;
  }
  return Status::ok();
}

Status parse_llama(const Fields& f, ModelConfig* c) {
  MS_RETURN_IF_ERROR(parse_common(f, c));
  MS_RETURN_IF_ERROR(f.get_int("head_dim", &c->head_dim, c->hidden / c->n_heads));
  MS_RETURN_IF_ERROR(f.get_int("intermediate_size", &c->dense_ffn));
  double eps = 1e-6;
  MS_RETURN_IF_ERROR(f.get_double("rms_norm_eps", &eps, 1e-6));
  c->norm_eps = static_cast<float>(eps);
  MS_RETURN_IF_ERROR(f.get_bool("tie_word_embeddings", &c->tie_embeddings, false));
  MS_RETURN_IF_ERROR(f.get_bool("attention_bias", &c->attention_bias, false));
  bool mlp_bias = false;
  MS_RETURN_IF_ERROR(f.get_bool("mlp_bias", &mlp_bias, false));
  if (mlp_bias) return unimplemented(f.source() + ": mlp_bias=true is not implemented for llama");
  int tp = 1;
  MS_RETURN_IF_ERROR(f.get_int("pretraining_tp", &tp, 1));
  if (tp != 1) return unimplemented(f.source() + ": pretraining_tp=" + std::to_string(tp) + " is not implemented");
  MS_RETURN_IF_ERROR(f.get_int("max_position_embeddings", &c->max_position, 2048));
  MS_RETURN_IF_ERROR(parse_rope(f, 10000.0, c));
  c->rope_style = RopeStyle::kNeox;
  c->layers.assign(c->n_layers, LayerSpec{false, true, false});
  return Status::ok();
}

}  // namespace

Result<ModelConfig> ModelConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) return invalid_argument(source + ": not a JSON object");
  if (!j.contains("model_type") || !j["model_type"].is_string())
    return invalid_argument(source + ": missing 'model_type'");
  std::string mt = j["model_type"];
  ModelConfig c;
  Fields f(j, source);
  if (mt == "cohere2_moe") {
    c.arch = Arch::kCohere2Moe;
    MS_RETURN_IF_ERROR(parse_cohere2_moe(f, &c));
  } else if (mt == "qwen3_moe") {
    c.arch = Arch::kQwen3Moe;
    MS_RETURN_IF_ERROR(parse_qwen3(f, &c, true));
  } else if (mt == "qwen3") {
    c.arch = Arch::kQwen3;
    MS_RETURN_IF_ERROR(parse_qwen3(f, &c, false));
  } else if (mt == "llama") {
    c.arch = Arch::kLlama;
    MS_RETURN_IF_ERROR(parse_llama(f, &c));
  } else {
    return unimplemented(source + ": model_type '" + mt + "' is not supported (supported: cohere2_moe, qwen3_moe, qwen3, llama)");
  }
  if (j.contains("quantization_config"))
    return unimplemented(source + ": quantization_config is present; quantized checkpoints are not implemented");
  MS_RETURN_IF_ERROR(c.validate().with_context(source));
  return c;
}

Result<ModelConfig> ModelConfig::from_file(const std::string& path) {
  MS_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(path));
  return from_json(j, path);
}

Status ModelConfig::validate() const {
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    return invalid_argument("num_attention_heads (" + std::to_string(n_heads) + ") must be a multiple of num_key_value_heads (" + std::to_string(n_kv_heads) + ")");
  if (head_dim <= 0 || head_dim % 2 != 0) return invalid_argument("head_dim must be positive and even");
  if (static_cast<int>(layers.size()) != n_layers) return internal_error("layer list size mismatch");
  bool any_dense = false, any_moe = false, any_sliding = false;
  for (const auto& l : layers) {
    any_dense |= !l.moe;
    any_moe |= l.moe;
    any_sliding |= l.sliding;
  }
  if (any_dense && dense_ffn <= 0) return invalid_argument("dense layers need a positive intermediate size");
  if (any_moe) {
    if (n_experts <= 0 || moe_ffn <= 0) return invalid_argument("MoE layers need num_experts and an expert width");
    if (top_k <= 0 || top_k > n_experts) return invalid_argument("num_experts_per_tok must be in 1..num_experts");
  }
  if (any_sliding && sliding_window <= 0) return invalid_argument("sliding layers need a positive sliding_window");
  return Status::ok();
}

int64_t ModelConfig::param_count() const {
  int64_t h = hidden, p = int64_t(vocab_size) * h * (tie_embeddings ? 1 : 2) + h;
  for (const auto& l : layers) {
    p += h * (q_width() + 2 * kv_width()) + int64_t(q_width()) * h;
    p += h * (parallel_block ? 1 : 2);
    if (qk_norm) p += 2 * head_dim;
    if (l.moe) p += int64_t(n_experts) * h + int64_t(n_experts) * 3 * h * moe_ffn + 3 * h * shared_ffn;
    else p += 3 * h * dense_ffn;
  }
  return p;
}

int64_t ModelConfig::active_param_count() const {
  int64_t h = hidden, p = h /*embedding row*/ + int64_t(vocab_size) * h + h;
  for (const auto& l : layers) {
    p += h * (q_width() + 2 * kv_width()) + int64_t(q_width()) * h;
    p += h * (parallel_block ? 1 : 2);
    if (l.moe) p += int64_t(n_experts) * h + int64_t(top_k) * 3 * h * moe_ffn + 3 * h * shared_ffn;
    else p += 3 * h * dense_ffn;
  }
  return p;
}

std::string ModelConfig::summary() const {
  int n_moe = 0, n_sliding = 0, n_nope = 0;
  for (const auto& l : layers) {
    n_moe += l.moe;
    n_sliding += l.sliding;
    n_nope += !l.rope;
  }
  std::ostringstream s;
  s << arch_name(arch) << ": " << n_layers << " layers (" << n_moe << " MoE, " << n_sliding << " sliding w="
    << sliding_window << ", " << n_nope << " NoPE), hidden " << hidden << ", heads " << n_heads << "/" << n_kv_heads
    << "x" << head_dim << ", vocab " << vocab_size;
  if (is_moe()) s << ", experts " << n_experts << " top-" << top_k << " width " << moe_ffn;
  s << ", params " << param_count() / 1e6 << "M (" << active_param_count() / 1e6 << "M active)";
  return s.str();
}

json ModelConfig::to_json() const {
  json j;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden;
  j["num_hidden_layers"] = n_layers;
  j["num_attention_heads"] = n_heads;
  j["num_key_value_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = max_position;
  j["tie_word_embeddings"] = tie_embeddings;
  j["rope_theta"] = rope_theta;
  j["torch_dtype"] = "bfloat16";
  if (bos_id >= 0) j["bos_token_id"] = bos_id;
  if (eos_ids.size() == 1) j["eos_token_id"] = eos_ids[0];
  else if (!eos_ids.empty()) j["eos_token_id"] = eos_ids;
  if (rope_scaling.kind == RopeScaling::Kind::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", rope_scaling.factor},
                         {"low_freq_factor", rope_scaling.low_freq_factor},
                         {"high_freq_factor", rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", rope_scaling.original_max_position}};
  } else if (rope_scaling.kind == RopeScaling::Kind::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_scaling.factor}};
  }
  json types = json::array();
  for (const auto& l : layers) types.push_back(l.sliding ? "sliding_attention" : "full_attention");
  switch (arch) {
    case Arch::kCohere2Moe: {
      j["model_type"] = "cohere2_moe";
      j["architectures"] = {"Cohere2MoeForCausalLM"};
      j["intermediate_size"] = moe_ffn;
      j["prefix_dense_intermediate_size"] = dense_ffn;
      j["num_experts"] = n_experts;
      j["num_experts_per_tok"] = top_k;
      j["num_shared_experts"] = n_shared_experts;
      j["shared_expert_combination_strategy"] = shared_sum ? "sum" : "average";
      j["expert_selection_fn"] = router == RouterFn::kSigmoid ? "sigmoid" : "softmax";
      j["norm_topk_prob"] = norm_topk_prob;
      if (norm == NormKind::kRms) j["rms_norm_eps"] = norm_eps;
      else j["layer_norm_eps"] = norm_eps;
      j["logit_scale"] = logit_scale;
      j["sliding_window"] = sliding_window;
      j["layer_types"] = types;
      json mlp = json::array();
      int first_k = 0;
      for (const auto& l : layers) mlp.push_back(l.moe ? "sparse" : "dense");
      while (first_k < n_layers && !layers[first_k].moe) ++first_k;
      j["mlp_layer_types"] = mlp;
      j["first_k_dense_replace"] = first_k;
      // RoPE on dense prefix layers is expressed through this pattern (1 = rope).
      j["prefix_dense_sliding_window_pattern"] = (first_k > 0 && !layers[0].rope) ? 2 : 1;
      j["attention_bias"] = false;
      break;
    }
    case Arch::kQwen3Moe:
    case Arch::kQwen3: {
      bool moe = arch == Arch::kQwen3Moe;
      j["model_type"] = moe ? "qwen3_moe" : "qwen3";
      j["architectures"] = {moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"};
      j["intermediate_size"] = dense_ffn;
      j["rms_norm_eps"] = norm_eps;
      j["attention_bias"] = false;
      bool any_sliding = false;
      for (const auto& l : layers) any_sliding |= l.sliding;
      j["use_sliding_window"] = any_sliding;
      j["sliding_window"] = any_sliding ? json(sliding_window) : json(nullptr);
      j["layer_types"] = types;
      if (moe) {
        j["moe_intermediate_size"] = moe_ffn;
        j["num_experts"] = n_experts;
        j["num_experts_per_tok"] = top_k;
        j["norm_topk_prob"] = norm_topk_prob;
        j["decoder_sparse_step"] = 1;
        json only = json::array();
        for (int i = 0; i < n_layers; ++i)
          if (!layers[i].moe) only.push_back(i);
        j["mlp_only_layers"] = only;
      }
      break;
    }
    case Arch::kLlama:
      j["model_type"] = "llama";
      j["architectures"] = {"LlamaForCausalLM"};
      j["intermediate_size"] = dense_ffn;
      j["rms_norm_eps"] = norm_eps;
      j["attention_bias"] = attention_bias;
      j["mlp_bias"] = false;
      break;
  }
  return j;
}

Result<ModelConfig> preset_config(Arch arch, const std::string& size) {
  if (size != "tiny" && size != "full") return invalid_argument("--size must be tiny or full, got '" + size + "'");
  bool full = size == "full";
  json j;
  switch (arch) {
    case Arch::kCohere2Moe:
      // North Mini Code (MISSION.md); tiny keeps the pattern: dense RoPE layer 0,
      // sliding layers, NoPE full layers at i % 4 == 0, sigmoid top-k router.
      j = {{"model_type", "cohere2_moe"}, {"vocab_size", full ? 262144 : 512}, {"hidden_size", full ? 2048 : 64},
           {"num_hidden_layers", full ? 49 : 6}, {"num_attention_heads", full ? 32 : 4},
           {"num_key_value_heads", full ? 4 : 2}, {"head_dim", full ? 128 : 16},
           {"intermediate_size", full ? 768 : 32}, {"prefix_dense_intermediate_size", full ? 3072 : 96},
           {"num_experts", full ? 128 : 8}, {"num_experts_per_tok", full ? 8 : 2}, {"num_shared_experts", 0},
           {"expert_selection_fn", "sigmoid"}, {"norm_topk_prob", false}, {"first_k_dense_replace", 1},
           {"prefix_dense_sliding_window_pattern", 1}, {"sliding_window_pattern", 4},
           {"sliding_window", full ? 4096 : 8}, {"rms_norm_eps", 1e-6}, {"rope_theta", 50000.0},
           {"logit_scale", full ? 0.0625 : 1.0}, {"tie_word_embeddings", true},
           {"max_position_embeddings", full ? 262144 : 2048}, {"bos_token_id", 2}, {"eos_token_id", 3}};
      break;
    case Arch::kQwen3Moe:  // Qwen3-30B-A3B
      j = {{"model_type", "qwen3_moe"}, {"vocab_size", full ? 151936 : 512}, {"hidden_size", full ? 2048 : 64},
           {"num_hidden_layers", full ? 48 : 4}, {"num_attention_heads", full ? 32 : 4},
           {"num_key_value_heads", full ? 4 : 2}, {"head_dim", full ? 128 : 16},
           {"intermediate_size", full ? 6144 : 128}, {"moe_intermediate_size", full ? 768 : 32},
           {"num_experts", full ? 128 : 8}, {"num_experts_per_tok", full ? 8 : 2}, {"norm_topk_prob", true},
           {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0}, {"tie_word_embeddings", false},
           {"max_position_embeddings", full ? 40960 : 2048}, {"bos_token_id", full ? 151643 : 2},
           {"eos_token_id", full ? 151645 : 3}};
      break;
    case Arch::kQwen3:  // Qwen3-0.6B
      j = {{"model_type", "qwen3"}, {"vocab_size", full ? 151936 : 512}, {"hidden_size", full ? 1024 : 64},
           {"num_hidden_layers", full ? 28 : 3}, {"num_attention_heads", full ? 16 : 4},
           {"num_key_value_heads", full ? 8 : 2}, {"head_dim", full ? 128 : 16},
           {"intermediate_size", full ? 3072 : 128}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
           {"tie_word_embeddings", true}, {"max_position_embeddings", full ? 40960 : 2048},
           {"bos_token_id", full ? 151643 : 2}, {"eos_token_id", full ? 151645 : 3}};
      break;
    case Arch::kLlama:  // Llama-3.2-1B
      j = {{"model_type", "llama"}, {"vocab_size", full ? 128256 : 512}, {"hidden_size", full ? 2048 : 64},
           {"num_hidden_layers", full ? 16 : 3}, {"num_attention_heads", full ? 32 : 4},
           {"num_key_value_heads", full ? 8 : 2}, {"head_dim", full ? 64 : 16},
           {"intermediate_size", full ? 8192 : 128}, {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0},
           {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}},
           {"tie_word_embeddings", true}, {"max_position_embeddings", full ? 131072 : 2048},
           {"bos_token_id", full ? 128000 : 2}, {"eos_token_id", full ? 128009 : 3}};
      break;
  }
  return ModelConfig::from_json(j, std::string("preset ") + arch_name(arch) + "/" + size);
}

}  // namespace ms
