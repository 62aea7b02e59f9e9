// DeviceModel: everything of a model that lives on the GPU for the life of
// the backend, allocated once and borrowed by every executor (the layered
// executor for prefill and decode, the megakernel executor for decode): the
// bf16 weights (in the fused layouts both executors read), the paged bf16 KV
// pool and its group layout, the RoPE inverse frequencies. One copy: an
// executor that owned the weights would force a second 61 GB copy and could
// not see the KV its sibling wrote.
//
// Precision: bf16 weights (f16 / f32 checkpoints converted on upload), fp32
// norm weights and biases; the KV cache bf16, per layer K and V each
// (num_blocks, n_kv, block_size, hd), the CPU reference's layout.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "gpu/common/device_buffer.h"
#include "model/staged_upload.h"
#include "model/weights.h"

namespace ms::gpu {

struct DeviceLayer {
  DeviceBuffer<uint16_t> qkv_w;   // (qw + 2 kvw, H) bf16: q rows, then k, then v
  DeviceBuffer<float> qkv_b;      // (qw + 2 kvw) fp32, attention_bias only
  DeviceBuffer<uint16_t> o_w;     // (H, qw) bf16
  DeviceBuffer<float> o_b;        // (H)
  DeviceBuffer<float> attn_norm, ffn_norm;  // (H)
  DeviceBuffer<float> q_norm, k_norm;       // (hd)
  DeviceBuffer<uint16_t> gate_up; // dense (2F, H) bf16: gate rows then up rows
  DeviceBuffer<uint16_t> down;    // dense (H, F)
  DeviceBuffer<uint16_t> router;  // (E, H)
  DeviceBuffer<float> router_f32; // (E, H): the same values widened, for the prefill router GEMM
  DeviceBuffer<uint16_t> experts_gate_up;  // (E, 2I, H): per expert I gate rows then I up rows
  DeviceBuffer<uint16_t> experts_down;     // (E, H, I)
  DeviceBuffer<uint16_t> shared_gate_up;   // (2S, H)
  DeviceBuffer<uint16_t> shared_down;      // (H, S)
  size_t k_off = 0, v_off = 0;             // element offsets of this layer's K and V caches in the pool
};

struct DeviceModelOptions {
  int block_size = 64;  // KV tokens per block
  int upload_threads = 0;  // threads reading / converting into the staging buffers (0: half the cores, 1..8)
  // Each of the two pinned staging buffers: a full buffer's copy takes ~2.7 ms
  // at 25 GB/s against a few us to enqueue one; pinning 128 MiB takes ms.
  size_t staging_bytes = size_t(64) << 20;
  // Upload progress lines ("reading and uploading the weights: 12.40 / 61.04 GB
  // (20%), 5.12 GB/s, 10 s left"), about one a second, for models >= 1 GiB
  // (the server's /health "loading" reason).
  std::function<void(const std::string&)> progress;
};

class DeviceModel {
 public:
  // Uploads a checkpoint's weights (converted to bf16) through pinned double
  // buffers, with progress in the log and to opt.progress for large models.
  static Result<std::unique_ptr<DeviceModel>> create(const ModelConfig& cfg, const ModelWeights& w,
                                                     const DeviceModelOptions& opt);
  // Random bf16 weights of the full shape generated on the device (no host
  // copy): matrices U(-a, a) with std 0.02, norm weights 1.
  static Result<std::unique_ptr<DeviceModel>> create_random(const ModelConfig& cfg, uint64_t seed,
                                                            const DeviceModelOptions& opt);

  // Allocates the KV pool: `bytes` (> 0) of bf16 K and V over all layers,
  // split into the groups of make_kv_spec, or exactly `blocks` blocks per
  // group when given; zero-filled. GpuBackend sizes `bytes` from the memory
  // left once the executors hold their buffers (plan_kv_memory).
  Status alloc_kv(size_t bytes, const std::vector<int>& blocks = {});
  // Fills the whole KV pool with random bf16 values (benchmark contexts).
  Status fill_kv_random(uint64_t seed, cudaStream_t stream);

  const ModelConfig& config() const { return cfg_; }
  const KvSpec& kv_spec() const { return kv_; }
  int block_size() const { return opt_.block_size; }
  const DeviceLayer& layer(int i) const { return layers_[i]; }
  const uint16_t* embed() const { return embed_.get(); }
  // The LM head: the embedding table when tied.
  const uint16_t* lm_head() const { return lm_head_.size() ? lm_head_.get() : embed_.get(); }
  const float* final_norm() const { return final_norm_.get(); }
  const float* inv_freq() const { return inv_freq_.get(); }
  uint16_t* kv_pool() const { return kv_pool_.get(); }
  size_t kv_elems() const { return kv_pool_.size(); }
  size_t kv_bytes() const { return kv_pool_.bytes(); }
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  DeviceModel() = default;
  Status init(const ModelConfig& cfg, const DeviceModelOptions& opt);
  Status alloc_weights();
  Status upload_jobs(const ModelWeights& w, std::vector<UploadJob>* jobs) const;
  Status upload_weights(const ModelWeights& w);
  Status random_weights(uint64_t seed);
  Status derive();  // router_f32 from the uploaded routers

  ModelConfig cfg_;
  DeviceModelOptions opt_;
  KvSpec kv_;
  size_t weight_bytes_ = 0;
  DeviceBuffer<uint16_t> embed_;     // (V, H) bf16
  DeviceBuffer<uint16_t> lm_head_;   // (V, H) bf16, empty when tied to embed_
  DeviceBuffer<float> final_norm_;   // (H)
  DeviceBuffer<float> inv_freq_;     // (hd / 2)
  std::vector<DeviceLayer> layers_;
  DeviceBuffer<uint16_t> kv_pool_;   // all layers' K and V caches, bf16
};

}  // namespace ms::gpu
