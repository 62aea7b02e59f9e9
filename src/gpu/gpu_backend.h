// GpuBackend: the CUDA Backend. It owns one DeviceModel (weights and KV,
// allocated once) and two executors that borrow it: the layered executor
// (one kernel per op; prefill, mixed steps, and decode where the megakernel
// does not run) and the megakernel executor (a decode step as one persistent
// kernel). Each step's decode rows go to the megakernel when the decode path
// is kMegakernel and it takes the batch, everything else to the layered path;
// both write the same KV pool, so a sequence prefilled by one decodes on the
// other. Sampling runs on the device after either (DeviceSampler).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "gpu/device_model.h"
#include "gpu/device_sampler.h"
#include "gpu/layered/layered_executor.h"
#include "gpu/mk/executor.h"

namespace ms::gpu {

enum class DecodePath { kLayered, kMegakernel };
inline const char* decode_path_name(DecodePath p) { return p == DecodePath::kMegakernel ? "megakernel" : "layered"; }
Result<DecodePath> parse_decode_path(const std::string& s);

struct GpuBackendOptions {
  int block_size = 64;
  // KV cache budget in bytes (bf16 K and V, all layers); 0: 90% of the device
  // memory left after the weights and the executors' buffers.
  size_t kv_bytes = size_t(1) << 30;
  std::vector<int> kv_blocks;  // non-empty: exactly these blocks per KV group (benchmarks), not kv_bytes
  int max_context = 0;  // longest sequence (tokens); 0: min(max_position, 262144)
  LayeredOptions layered;
  // Where decode steps run. The megakernel is opt-in until it has run on a
  // GPU (docs/megakernel.md says where it stands); a model it does not take
  // decodes on the layered path, with the reason logged.
  DecodePath decode = DecodePath::kLayered;
  MkOptions mk;
};

class GpuBackend final : public Backend {
 public:
  static Result<std::unique_ptr<GpuBackend>> create(const ModelConfig& cfg, const ModelWeights& w,
                                                    const GpuBackendOptions& opt);
  // Random bf16 weights of the full shape generated on the device.
  static Result<std::unique_ptr<GpuBackend>> create_random(const ModelConfig& cfg, uint64_t seed,
                                                           const GpuBackendOptions& opt);

  const char* name() const override { return "cuda"; }
  const ModelConfig& config() const override { return model_->config(); }
  const KvSpec& kv_spec() const override { return model_->kv_spec(); }
  BackendLimits limits() const override;
  Status step(const std::vector<SeqWork>& batch, StepResult* out) override;
  bool supports_sampling() const override { return sampler_ && sampler_->supported(); }
  Status step_sample(const std::vector<SeqWork>& batch, const std::vector<const SampleSpec*>& specs,
                     std::vector<SampleResult>* out) override;

  // The decode path steps of decode batches take (kLayered when the
  // megakernel is off or does not take the model).
  DecodePath decode_path() const { return mk_ ? DecodePath::kMegakernel : DecodePath::kLayered; }
  // Switches decode steps between the executors (benchmarks: one backend,
  // both paths side by side). kMegakernel needs the executor created.
  Status set_decode_path(DecodePath p);
  DeviceModel& model() { return *model_; }
  LayeredExecutor& layered() { return *layered_; }
  MkExecutor* megakernel() { return mk_all_.get(); }
  cudaStream_t stream() const { return layered_->stream(); }

 private:
  GpuBackend() = default;
  Status init_executors(const GpuBackendOptions& opt);
  bool mk_takes(const std::vector<SeqWork>& batch) const { return mk_ && mk_->accepts(batch); }

  std::unique_ptr<DeviceModel> model_;
  std::unique_ptr<LayeredExecutor> layered_;
  std::unique_ptr<MkExecutor> mk_all_;  // created when the model fits it
  MkExecutor* mk_ = nullptr;            // == mk_all_ while decode runs on it
  std::unique_ptr<DeviceSampler> sampler_;
};

}  // namespace ms::gpu
