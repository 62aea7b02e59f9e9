// Binds a checkpoint's tensors to the model structure of a ModelConfig, with
// shape and dtype checks. Views point into the mmapped shards (no copy).
// Experts are accepted in both HF layouts: per-expert tensors
// (`mlp.experts.{e}.gate_proj.weight`) and transformers-5 fused 3D tensors
// (`mlp.experts.gate_up_proj` (E, 2I, H), `mlp.experts.down_proj` (E, H, I)).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"

namespace ms {

// A 2D (or 1D: rows == 1) slice of a checkpoint tensor, row-major.
struct MatView {
  std::string name;
  DType dtype = DType::kBF16;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;  // first element of the slice
  // Where data lives on disk: the shard's path (owned by the Checkpoint) and
  // the byte offset of data in it; null when the view is not of a file.
  const std::string* file = nullptr;
  uint64_t file_offset = 0;

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return rows * cols; }
  // Converts to fp32 (row-major rows x cols).
  std::vector<float> to_f32() const;
  // Elements [begin, begin + n) as fp32, or as bf16 bits (bf16 copied as is,
  // others rounded to nearest even): what the GPU upload stages, bit-exact
  // with to_f32() and f32_to_bf16 of it.
  void to_f32(int64_t begin, int64_t n, float* out) const;
  void to_bf16(int64_t begin, int64_t n, uint16_t* out) const;
  float at(int64_t r, int64_t c) const;
};

struct ExpertWeights {
  MatView gate, up;  // (I, H)
  MatView down;      // (H, I)
};

struct LayerWeights {
  MatView attn_norm;          // (H) input_layernorm
  MatView ffn_norm;           // (H) post_attention_layernorm (sequential blocks only)
  MatView q, k, v, o;         // (nH*hd, H), (nKV*hd, H) x2, (H, nH*hd)
  MatView q_bias, k_bias, v_bias, o_bias;  // llama attention_bias only
  MatView q_norm, k_norm;     // (hd) qk_norm only
  MatView gate, up, down;     // dense FFN: (F, H), (F, H), (H, F)
  MatView router;             // (E, H)
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;       // merged shared experts (cohere), empty if none
};

struct ModelWeights {
  MatView embed;     // (V, H)
  MatView final_norm;  // (H)
  MatView lm_head;   // (V, H); == embed when tied
  std::vector<LayerWeights> layers;
};

// Binds and validates. Errors name the file and tensor: missing tensor, wrong
// shape, unsupported dtype, and tensors the model does not use.
Result<ModelWeights> bind_weights(const ModelConfig& cfg, const Checkpoint& ck);

// The tensors a checkpoint of this config holds, in HF naming with
// per-expert tensors (what init-random writes).
struct TensorDecl {
  std::string name;
  std::vector<int64_t> shape;
  enum class Init { kNormal, kOnes } init = Init::kNormal;
};
std::vector<TensorDecl> checkpoint_layout(const ModelConfig& cfg);

}  // namespace ms
