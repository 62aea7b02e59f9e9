#include "model/weights.h"

#include <set>

namespace ms {

namespace {

float load_elem(DType t, const uint8_t* p, int64_t i) {
  switch (t) {
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return bf16_to_f32(v);
    }
    case DType::kF16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return f16_to_f32(v);
    }
    case DType::kF32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    default: return 0.f;
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

class Binder {
 public:
  Binder(const Checkpoint& ck) : ck_(ck) {}

  // A required tensor of exactly `shape`; viewed as rows x cols (1D: 1 x n).
  Status take(const std::string& name, std::vector<int64_t> shape, MatView* out) {
    const TensorInfo* t = ck_.find(name);
    if (!t) return not_found(ck_.dir() + ": missing tensor '" + name + "' (expected shape " + shape_str(shape) + ")");
    MS_RETURN_IF_ERROR(check(*t, shape));
    used_.insert(name);
    out->name = name;
    out->dtype = t->dtype;
    out->rows = shape.size() == 1 ? 1 : shape[0];
    out->cols = shape.back();
    out->data = t->data;
    out->file = &t->file;
    out->file_offset = t->file_offset;
    return Status::ok();
  }

  // Slice [index] of a 3D tensor (E, R, C), rows [r0, r0 + rows).
  Status take_slice(const std::string& name, std::vector<int64_t> shape, int64_t index, int64_t r0, int64_t rows,
                    MatView* out) {
    const TensorInfo* t = ck_.find(name);
    if (!t) return not_found(ck_.dir() + ": missing tensor '" + name + "'");
    MS_RETURN_IF_ERROR(check(*t, shape));
    used_.insert(name);
    out->name = name + "[" + std::to_string(index) + "]";
    out->dtype = t->dtype;
    out->rows = rows;
    out->cols = shape[2];
    const uint64_t skip = uint64_t((index * shape[1] + r0) * shape[2]) * dtype_size(t->dtype);
    out->data = t->data + skip;
    out->file = &t->file;
    out->file_offset = t->file_offset + skip;
    return Status::ok();
  }

  bool has(const std::string& name) const { return ck_.find(name) != nullptr; }

  Status check_all_used() const {
    for (const auto& [name, t] : ck_.tensors()) {
      if (used_.count(name)) continue;
      // Non-persistent buffers some exporters write anyway.
      if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;
      return invalid_argument(t.file + ": unknown tensor '" + name + "' (shape " + t.shape_str() +
                              ") is not used by this model configuration");
    }
    return Status::ok();
  }

 private:
  Status check(const TensorInfo& t, const std::vector<int64_t>& shape) {
    if (t.dtype != DType::kBF16 && t.dtype != DType::kF16 && t.dtype != DType::kF32)
      return invalid_argument(t.file + ": tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
                              "; weights must be BF16, F16 or F32");
    if (t.shape != shape)
      return invalid_argument(t.file + ": tensor '" + t.name + "' has shape " + t.shape_str() + ", expected " +
                              shape_str(shape));
    return Status::ok();
  }

  const Checkpoint& ck_;
  std::set<std::string> used_;
};

}  // namespace

std::vector<float> MatView::to_f32() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = load_elem(dtype, data, i);
  return out;
}

void MatView::to_f32(int64_t begin, int64_t n, float* out) const {
  if (dtype == DType::kF32) {
    std::memcpy(out, data + 4 * begin, size_t(n) * 4);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = load_elem(dtype, data, begin + i);
}

void MatView::to_bf16(int64_t begin, int64_t n, uint16_t* out) const {
  if (dtype == DType::kBF16) {
    std::memcpy(out, data + 2 * begin, size_t(n) * 2);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(load_elem(dtype, data, begin + i));
}

float MatView::at(int64_t r, int64_t c) const { return load_elem(dtype, data, r * cols + c); }

Result<ModelWeights> bind_weights(const ModelConfig& cfg, const Checkpoint& ck) {
  Binder b(ck);
  ModelWeights w;
  const int64_t H = cfg.hidden, V = cfg.vocab_size, hd = cfg.head_dim;
  const int64_t qw = cfg.q_width(), kvw = cfg.kv_width();
  MS_RETURN_IF_ERROR(b.take("model.embed_tokens.weight", {V, H}, &w.embed));
  MS_RETURN_IF_ERROR(b.take("model.norm.weight", {H}, &w.final_norm));
  if (cfg.tie_embeddings) {
    w.lm_head = w.embed;
    // Some exporters also write the tied copy; accept it if it is the same shape.
    if (b.has("lm_head.weight")) {
      MatView dup;
      MS_RETURN_IF_ERROR(b.take("lm_head.weight", {V, H}, &dup));
    }
  } else {
    MS_RETURN_IF_ERROR(b.take("lm_head.weight", {V, H}, &w.lm_head));
  }
  w.layers.resize(cfg.n_layers);
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerSpec& spec = cfg.layers[i];
    LayerWeights& l = w.layers[i];
    std::string p = "model.layers." + std::to_string(i) + ".";
    MS_RETURN_IF_ERROR(b.take(p + "input_layernorm.weight", {H}, &l.attn_norm));
    if (!cfg.parallel_block) MS_RETURN_IF_ERROR(b.take(p + "post_attention_layernorm.weight", {H}, &l.ffn_norm));
    MS_RETURN_IF_ERROR(b.take(p + "self_attn.q_proj.weight", {qw, H}, &l.q));
    MS_RETURN_IF_ERROR(b.take(p + "self_attn.k_proj.weight", {kvw, H}, &l.k));
    MS_RETURN_IF_ERROR(b.take(p + "self_attn.v_proj.weight", {kvw, H}, &l.v));
    MS_RETURN_IF_ERROR(b.take(p + "self_attn.o_proj.weight", {H, qw}, &l.o));
    if (cfg.attention_bias) {
      MS_RETURN_IF_ERROR(b.take(p + "self_attn.q_proj.bias", {qw}, &l.q_bias));
      MS_RETURN_IF_ERROR(b.take(p + "self_attn.k_proj.bias", {kvw}, &l.k_bias));
      MS_RETURN_IF_ERROR(b.take(p + "self_attn.v_proj.bias", {kvw}, &l.v_bias));
      MS_RETURN_IF_ERROR(b.take(p + "self_attn.o_proj.bias", {H}, &l.o_bias));
    }
    if (cfg.qk_norm) {
      MS_RETURN_IF_ERROR(b.take(p + "self_attn.q_norm.weight", {hd}, &l.q_norm));
      MS_RETURN_IF_ERROR(b.take(p + "self_attn.k_norm.weight", {hd}, &l.k_norm));
    }
    if (!spec.moe) {
      const int64_t F = cfg.dense_ffn;
      MS_RETURN_IF_ERROR(b.take(p + "mlp.gate_proj.weight", {F, H}, &l.gate));
      MS_RETURN_IF_ERROR(b.take(p + "mlp.up_proj.weight", {F, H}, &l.up));
      MS_RETURN_IF_ERROR(b.take(p + "mlp.down_proj.weight", {H, F}, &l.down));
      continue;
    }
    const int64_t E = cfg.n_experts, I = cfg.moe_ffn;
    MS_RETURN_IF_ERROR(b.take(p + "mlp.gate.weight", {E, H}, &l.router));
    l.experts.resize(E);
    if (b.has(p + "mlp.experts.gate_up_proj")) {
      for (int64_t e = 0; e < E; ++e) {
        MS_RETURN_IF_ERROR(b.take_slice(p + "mlp.experts.gate_up_proj", {E, 2 * I, H}, e, 0, I, &l.experts[e].gate));
        MS_RETURN_IF_ERROR(b.take_slice(p + "mlp.experts.gate_up_proj", {E, 2 * I, H}, e, I, I, &l.experts[e].up));
        MS_RETURN_IF_ERROR(b.take_slice(p + "mlp.experts.down_proj", {E, H, I}, e, 0, H, &l.experts[e].down));
      }
    } else {
      for (int64_t e = 0; e < E; ++e) {
        std::string q = p + "mlp.experts." + std::to_string(e) + ".";
        MS_RETURN_IF_ERROR(b.take(q + "gate_proj.weight", {I, H}, &l.experts[e].gate));
        MS_RETURN_IF_ERROR(b.take(q + "up_proj.weight", {I, H}, &l.experts[e].up));
        MS_RETURN_IF_ERROR(b.take(q + "down_proj.weight", {H, I}, &l.experts[e].down));
      }
    }
    if (cfg.n_shared_experts > 0) {
      const int64_t S = cfg.shared_ffn;
      MS_RETURN_IF_ERROR(b.take(p + "mlp.shared_experts.gate_proj.weight", {S, H}, &l.shared.gate));
      MS_RETURN_IF_ERROR(b.take(p + "mlp.shared_experts.up_proj.weight", {S, H}, &l.shared.up));
      MS_RETURN_IF_ERROR(b.take(p + "mlp.shared_experts.down_proj.weight", {H, S}, &l.shared.down));
    }
  }
  MS_RETURN_IF_ERROR(b.check_all_used());
  return w;
}

std::vector<TensorDecl> checkpoint_layout(const ModelConfig& cfg) {
  using I = TensorDecl::Init;
  std::vector<TensorDecl> out;
  const int64_t H = cfg.hidden, V = cfg.vocab_size, hd = cfg.head_dim;
  const int64_t qw = cfg.q_width(), kvw = cfg.kv_width();
  out.push_back({"model.embed_tokens.weight", {V, H}});
  for (int i = 0; i < cfg.n_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {H}, I::kOnes});
    if (!cfg.parallel_block) out.push_back({p + "post_attention_layernorm.weight", {H}, I::kOnes});
    out.push_back({p + "self_attn.q_proj.weight", {qw, H}});
    out.push_back({p + "self_attn.k_proj.weight", {kvw, H}});
    out.push_back({p + "self_attn.v_proj.weight", {kvw, H}});
    out.push_back({p + "self_attn.o_proj.weight", {H, qw}});
    if (cfg.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {qw}});
      out.push_back({p + "self_attn.k_proj.bias", {kvw}});
      out.push_back({p + "self_attn.v_proj.bias", {kvw}});
      out.push_back({p + "self_attn.o_proj.bias", {H}});
    }
    if (cfg.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {hd}, I::kOnes});
      out.push_back({p + "self_attn.k_norm.weight", {hd}, I::kOnes});
    }
    if (!cfg.layers[i].moe) {
      const int64_t F = cfg.dense_ffn;
      out.push_back({p + "mlp.gate_proj.weight", {F, H}});
      out.push_back({p + "mlp.up_proj.weight", {F, H}});
      out.push_back({p + "mlp.down_proj.weight", {H, F}});
      continue;
    }
    const int64_t E = cfg.n_experts, Iw = cfg.moe_ffn;
    out.push_back({p + "mlp.gate.weight", {E, H}});
    for (int64_t e = 0; e < E; ++e) {
      std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      out.push_back({q + "gate_proj.weight", {Iw, H}});
      out.push_back({q + "up_proj.weight", {Iw, H}});
      out.push_back({q + "down_proj.weight", {H, Iw}});
    }
    if (cfg.n_shared_experts > 0) {
      const int64_t S = cfg.shared_ffn;
      out.push_back({p + "mlp.shared_experts.gate_proj.weight", {S, H}});
      out.push_back({p + "mlp.shared_experts.up_proj.weight", {S, H}});
      out.push_back({p + "mlp.shared_experts.down_proj.weight", {H, S}});
    }
  }
  out.push_back({"model.norm.weight", {H}, I::kOnes});
  if (!cfg.tie_embeddings) out.push_back({"lm_head.weight", {V, H}});
  return out;
}

}  // namespace ms
