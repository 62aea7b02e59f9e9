// Which backend a command runs on (--backend auto | ref | cuda, --device N)
// and creating it for a loaded model (serve, generate):
//  - resolve_backend() turns the flags and what the machine has (a GpuProbe)
//    into a decision and the one log line that says which and why; it is a
//    pure function, so the CPU tests cover every case with made-up probes;
//  - load_for_backend() reads what the backend needs (--load-format auto: the
//    checkpoint; dummy: only config.json, the weights random: generated on
//    the GPU by the cuda backend, on the CPU by the ref one);
//  - make_backend() creates it (the GPU made current first, the KV cache
//    sized by --gpu-memory-utilization unless --kv-cache-mb is given).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/flags.h"
#include "engine/backend.h"
#include "model/model_loader.h"

namespace ms {

// What the machine offers the cuda backend.
struct GpuProbe {
  bool built_with_cuda = false;
  struct Device {
    std::string name;
    int cc_major = 0, cc_minor = 0;
    size_t total_mem = 0;
  };
  std::vector<Device> devices;
  std::string error;  // why the CUDA runtime sees no device, if it said
};
// This build and this machine (no CUDA context is created).
GpuProbe probe_gpus();

struct BackendDecision {
  std::string name;  // "ref" | "cuda"
  int device = -1;   // cuda: the GPU index
  std::string log_line;  // "backend auto: cuda on NVIDIA H200 (GPU 0, 139.80 GiB)"
};

// requested: auto | ref | cuda ("layered": the old name of cuda); device:
// --device (-1 when not given). auto and cuda take the given GPU, else the
// first of compute capability >= 9.0; auto falls back to ref (saying why) when
// there is none, and an explicit cuda, or a --device, that cannot be honoured
// is an error.
Result<BackendDecision> resolve_backend(const std::string& requested, int device, const GpuProbe& probe);

// Declares --backend (default auto), --device, --load-format and --seed, as
// serve and generate take them.
void add_backend_flags(Flags& f);

enum class LoadFormat { kAuto, kDummy };  // vLLM's --load-format names
Result<LoadFormat> parse_load_format(const std::string& s);

struct BackendChoice {
  std::string name = "ref";        // ref | cuda (resolved)
  int device = -1;                 // cuda: GPU index (-1: the current one)
  std::string decode = "layered";  // cuda: megakernel | layered
  int block_size = 64;
  // KV budget; 0: the backend's default (cuda: gpu_memory_utilization; ref: kRefKvDefaultBytes).
  size_t kv_bytes = 0;
  double gpu_memory_utilization = 0.9;
  int threads = 0;                 // ref: CPU threads (0: all)
  int max_context = 0;             // cuda: longest sequence (0: model default)
  bool random_weights = false;     // cuda: generate the weights on the device (the model has only its config)
  uint64_t seed = 0;               // random weights
  std::function<void(const std::string&)> progress;  // cuda: weight upload progress lines
};

// The ref backend's KV budget when none is given: 512 MiB (fp32 K and V).
inline constexpr size_t kRefKvDefaultBytes = size_t(512) << 20;

// What `backend` needs from `dir` under `format`. Dummy on ref generates the
// weights on the CPU (random_model), refused when their fp32 copy would not
// fit this machine's memory.
Result<std::unique_ptr<LoadedModel>> load_for_backend(const std::string& dir, LoadFormat format,
                                                      const std::string& backend, uint64_t seed,
                                                      const std::function<void(const std::string&)>& progress);

Result<std::unique_ptr<Backend>> make_backend(const LoadedModel& model, const BackendChoice& choice);

// Bytes the ref backend allocates for a model's fp32 weights, and the check
// that they fit in `available` bytes of memory (an error naming both and
// what to do otherwise).
uint64_t ref_weight_bytes(const ModelConfig& cfg);
Status check_ref_memory(const ModelConfig& cfg, uint64_t extra_bytes, uint64_t available);
// MemAvailable of /proc/meminfo (0 when unknown: the check is then skipped).
uint64_t available_host_memory();

}  // namespace ms
