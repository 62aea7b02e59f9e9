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
};

class RefBackend final : public Backend {
 public:
  static Result<std::unique_ptr<RefBackend>> create(const ModelConfig& cfg, const ModelWeights& w,
                                                    const RefBackendOptions& opt);
  const char* name() const override { return "ref"; }
  const ModelConfig& config() const override { return cfg_; }
  const KvSpec& kv_spec() const override { return kv_; }
  Status step(const std::vector<SeqWork>& batch, StepResult* out) override;

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
  void ffn(int li, const float* h, float* out, int64_t T);                // (T, H)
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
};

}  // namespace ms
