// GpuBackend: the CUDA Backend. It owns one DeviceModel (weights and KV,
// allocated once) and two executors that borrow it: the layered executor
// (one kernel per op; prefill, mixed steps, and decode where the megakernel
// does not run) and the megakernel executor (a decode step as one persistent
// kernel). Each step's decode rows go to the megakernel when the decode path
// is kMegakernel and it takes the batch (kAuto: and it measured faster for
// the step's rows and context, mk::DecodeChooser), everything else to the
// layered path;
// both write the same KV pool, so a sequence prefilled by one decodes on the
// other. Sampling runs on the device after either (DeviceSampler).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "gpu/device_model.h"
#include "gpu/device_sampler.h"
#include "gpu/layered/layered_executor.h"
#include "gpu/mk/executor.h"
#include "mk/decode_choice.h"

namespace ms::gpu {

// kAuto: per (decode rows, context bucket) whichever of the two measured
// faster on this machine's recent steps (mk::DecodeChooser).
enum class DecodePath { kLayered, kMegakernel, kAuto };
inline const char* decode_path_name(DecodePath p) {
  return p == DecodePath::kMegakernel ? "megakernel" : p == DecodePath::kAuto ? "auto" : "layered";
}
Result<DecodePath> parse_decode_path(const std::string& s);

struct GpuBackendOptions {
  int device = -1;  // CUDA device (-1: the current one); every call into the backend binds it
  int block_size = 64;
  // KV cache budget in bytes (bf16 K and V, all layers); 0: sized by
  // gpu_memory_utilization once the weights and the executors' buffers are
  // allocated (plan_kv_memory, src/engine/kv_sizing.h).
  size_t kv_bytes = size_t(1) << 30;
  double gpu_memory_utilization = 0.9;  // fraction of the device's total memory (vLLM's meaning)
  // Weight upload: progress lines (DeviceModelOptions::progress) and CPU threads.
  std::function<void(const std::string&)> progress;
  int upload_threads = 0;
  std::vector<int> kv_blocks;  // non-empty: exactly these blocks per KV group (benchmarks), not kv_bytes
  // Benchmarks whose largest point may not fit the device: called once the
  // executors hold their buffers, with the bytes the KV pool may take (free
  // memory less kKvRuntimeReserveBytes); returns the blocks per KV group
  // (empty: nothing fits, an error). Overrides kv_blocks and kv_bytes.
  std::function<std::vector<int>(size_t budget)> kv_blocks_within;
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
  ~GpuBackend() override;
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
  DecodePath decode_path() const {
    return !mk_ ? DecodePath::kLayered : auto_ ? DecodePath::kAuto : DecodePath::kMegakernel;
  }
  // Switches decode steps between the executors (benchmarks: one backend,
  // both paths side by side). kMegakernel and kAuto need the executor created.
  Status set_decode_path(DecodePath p);
  // kAuto: what it measured and chose per (rows, context bucket); empty
  // otherwise. The engine thread updates it: call it there, or with the
  // engine stopped.
  std::vector<::ms::mk::DecodeChooser::KeyState> decode_choices() const {
    return auto_ ? auto_->state() : std::vector<::ms::mk::DecodeChooser::KeyState>{};
  }
  DeviceModel& model() { return *model_; }
  int device() const { return device_; }
  // The KV pool's sizing, as logged at start (plan_kv_memory's explanation).
  const std::string& kv_plan() const { return kv_plan_; }
  LayeredExecutor& layered() { return *layered_; }
  MkExecutor* megakernel() { return mk_all_.get(); }
  cudaStream_t stream() const { return layered_->stream(); }

 private:
  GpuBackend() = default;
  // Makes the backend's device current on the calling thread (the engine
  // loop thread is not the one that created the backend).
  Status bind_device() const;
  static Result<std::unique_ptr<GpuBackend>> start(const GpuBackendOptions& opt);
  Status init_executors(const GpuBackendOptions& opt);
  // Which executor runs a step, and under kAuto the key it is timed under.
  struct Route {
    bool mk = false;
    bool timed = false;
    int rows = 0, bucket = 0;
  };
  Route route(const std::vector<SeqWork>& batch);
  void record(const Route& r, double ms);
  // kAuto, after the megakernel failed a step with `why`: true when the
  // step is to be run again on the layered path (the megakernel is then off
  // for this process); false: the failure is the step's.
  bool fall_back(const Status& why);

  int device_ = 0;
  std::string kv_plan_;
  std::unique_ptr<DeviceModel> model_;
  std::unique_ptr<LayeredExecutor> layered_;
  std::unique_ptr<MkExecutor> mk_all_;  // created when the model fits it
  MkExecutor* mk_ = nullptr;            // == mk_all_ while decode runs on it
  std::unique_ptr<::ms::mk::DecodeChooser> auto_;  // kAuto
  std::unique_ptr<DeviceSampler> sampler_;
};

}  // namespace ms::gpu
