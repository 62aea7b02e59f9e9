// The fp32 CPU reference backend: the correctness oracle for the CUDA paths
// and the backend CI runs end to end. Weights are converted to fp32 at load;
// the paged KV cache is fp32, laid out like the GPU cache:
// per layer, K and V each (num_blocks, n_kv_heads, block_size, head_dim).
#pragma once

#include <memory>

#include "core/thread_pool.h"
#include "engine/backend.h"
#include "model/weights.h"

namespace ms {

struct RefBackendOptions {
  int block_size = 64;
  size_t kv_bytes = size_t(256) << 20;  // KV budget (fp32 elements)
  int threads = 0;                       // 0: all hardware threads
  // Debug / GPU oracle (default off): round to bf16 exactly where the layered
  // CUDA backend stores bf16 (docs/gpu-layered.md, "Data and precision"):
  // normed activations fed to the QKV / FFN / expert / LM-head matmuls (the
  // router keeps the fp32 normed input), K and V written to the cache (q
  // stays fp32), the attention output, and the SwiGLU outputs. Everything
  // else (residual stream, accumulation, router, logits) stays fp32, so the
  // GPU must match this mode up to summation order.
  bool emulate_bf16_activations = false;
};

class RefBackend final : public Backend {
 public:
  static Result<std::unique_ptr<RefBackend>> create(const ModelConfig& cfg, const ModelWeights& w,
                                                    const RefBackendOptions& opt);
  const char* name() const override { return "ref"; }
  const ModelConfig& config() const override { return cfg_; }
  const KvSpec& kv_spec() const override { return kv_; }
  Status step(const std::vector<SeqWork>& batch, StepResult* out) override;

  // Debug: expert ids (top_k per token, best first) chosen at MoE layer
  // `layer` in the last step(), tokens in batch order then position order;
  // empty for dense layers.
  const std::vector<int32_t>& last_routing(int layer) const { return routing_[layer]; }

 private:
  struct Expert {
    std::vector<float> gate, up, down;
  };
  struct Layer {
    std::vector<float> attn_norm, ffn_norm, q, k, v, o, q_bias, k_bias, v_bias, o_bias, q_norm, k_norm;
    std::vector<float> gate, up, down, router;
    std::vector<Expert> experts;
    Expert shared;
    std::vector<float> k_cache, v_cache;  // (num_blocks, n_kv, block_size, head_dim)
  };

  RefBackend() = default;
  void run_sequence(const SeqWork& w, std::vector<float>* logits);
  void attention(int li, const SeqWork& w, const float* h, float* out);  // h, out: (T, H)
  // h: matmul input, h_router: router input (the same but for bf16 mode); (T, H)
  void ffn(int li, const float* h, const float* h_router, float* out, int64_t T);
  void dense_mlp(const float* gate, const float* up, const float* down, int64_t F, const float* h, float* out,
                 int64_t T);
  float* kv_slot(std::vector<float>& cache, int32_t block, int kvh, int64_t pos_in_block);

  ModelConfig cfg_;
  KvSpec kv_;
  std::vector<float> embed_, final_norm_, lm_head_;
  bool lm_head_is_embed_ = false;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
  std::unique_ptr<ThreadPool> pool_;
  bool bf16_ = false;                          // emulate_bf16_activations
  std::vector<std::vector<int32_t>> routing_;  // (n_layers) (tokens * top_k), debug
};

}  // namespace ms
