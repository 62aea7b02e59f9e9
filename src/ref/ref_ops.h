// fp32 CPU reference ops: the oracle for every CUDA op and the building blocks
// of the reference backend. Plain loops, fp32 accumulation, HF semantics.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/config.h"

namespace ms {

// y (T, N) = x (T, K) @ w (N, K)^T [+ bias (N)]
void ref_matmul(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N, int64_t K,
                ThreadPool* pool = nullptr);
// RMSNorm over rows of width H: y = w * x / sqrt(mean(x^2) + eps)
void ref_rmsnorm(const float* x, const float* w, float* y, int64_t T, int64_t H, float eps);
// Cohere LayerNorm (no bias): y = w * (x - mean) / sqrt(var + eps)
void ref_layernorm(const float* x, const float* w, float* y, int64_t T, int64_t H, float eps);
void ref_norm(NormKind kind, const float* x, const float* w, float* y, int64_t T, int64_t H, float eps);

// RoPE inverse frequencies (head_dim / 2), fp32 exactly as HF computes them,
// with linear / llama3 scaling applied.
std::vector<float> ref_rope_inv_freq(const ModelConfig& cfg);
// Rotates n_heads heads of x (n_heads * head_dim) in place for position pos.
void ref_rope(float* x, int n_heads, int head_dim, int64_t pos, const float* inv_freq, RopeStyle style);

// out (I) = silu(gate) * up
void ref_swiglu(const float* gate, const float* up, float* out, int64_t n);

struct RouteChoice {
  std::vector<int> experts;     // top_k expert ids, best first
  std::vector<float> weights;   // their combine weights
};
// Router for one token from its router logits (n_experts), per cfg.
// forced (top_k ids, best first): route to these experts instead of the
// top-k (the weights come from their scores as usual); for comparisons that
// follow another implementation's choice at a near tie. The caller checks
// each forced id is in [0, n_experts).
RouteChoice ref_route(const ModelConfig& cfg, const float* logits, const int32_t* forced = nullptr);

// Attention of one query (n_heads x head_dim) over `n_keys` keys/values
// fetched by key(i, kv_head) / value(i, kv_head) pointers (head_dim floats).
// GQA: query head h uses kv head h / (n_heads / n_kv_heads).
template <typename KeyFn, typename ValFn>
void ref_attention_one(const float* q, int n_heads, int n_kv_heads, int head_dim, int64_t n_keys, KeyFn key,
                       ValFn value, float* out);

}  // namespace ms

#include "ref/ref_ops_inl.h"
