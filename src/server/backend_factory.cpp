#include "server/backend_factory.h"

#include <cstdio>
#include <fstream>

#include "core/byte_progress.h"
#include "model/random_model.h"
#include "ref/ref_backend.h"
#ifdef MEGASERVE_WITH_CUDA
#include "gpu/common/device_info.h"
#include "gpu/gpu_backend.h"
#endif

namespace ms {
namespace {

std::string gpu_words(const GpuProbe::Device& d, int index) {
  return d.name + " (GPU " + std::to_string(index) + ", " + format_gib(d.total_mem) + ")";
}

std::string cc_words(const GpuProbe::Device& d) {
  return std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
}

std::string no_gpu_words(const GpuProbe& p) {
  return p.error.empty() ? "the CUDA runtime sees no GPU" : "the CUDA runtime sees no GPU: " + p.error;
}

}  // namespace

GpuProbe probe_gpus() {
  GpuProbe p;
#ifdef MEGASERVE_WITH_CUDA
  p.built_with_cuda = true;
  gpu::GpuListing l = gpu::list_gpus();
  p.error = l.error;
  for (const auto& d : l.devices) p.devices.push_back({d.name, d.cc_major, d.cc_minor, d.total_mem});
#endif
  return p;
}

Result<BackendDecision> resolve_backend(const std::string& requested, int device, const GpuProbe& probe) {
  const std::string name = requested == "layered" ? "cuda" : requested;
  if (name != "auto" && name != "ref" && name != "cuda")
    return invalid_argument("--backend must be auto, ref or cuda, got '" + requested + "'");
  const int count = static_cast<int>(probe.devices.size());
  const std::string dev_flag = "--device " + std::to_string(device);
  if (name == "ref") {
    if (device >= 0) return invalid_argument(dev_flag + ": --device picks the GPU of the cuda backend, and --backend ref runs on the CPU");
    return BackendDecision{"ref", -1, "backend ref (--backend ref): the fp32 CPU reference"};
  }
  if (device >= 0) {  // an explicit GPU: it must exist (auto does not fall back from it either)
    if (!probe.built_with_cuda) return invalid_argument(dev_flag + ": this build has no CUDA support");
    if (count == 0) return invalid_argument(dev_flag + ": " + no_gpu_words(probe));
    if (device >= count)
      return invalid_argument(dev_flag + ": this machine has " + std::to_string(count) + " CUDA GPU" +
                              (count == 1 ? "" : "s") + " (0.." + std::to_string(count - 1) + ")");
  }
  if (name == "cuda") {
    if (!probe.built_with_cuda)
      return unavailable("--backend cuda: this build has no CUDA support (no nvcc at configure time)");
    if (count == 0) return unavailable("--backend cuda: " + no_gpu_words(probe));
    int d = device;
    for (int k = 0; d < 0 && k < count; ++k)
      if (probe.devices[k].cc_major >= 9) d = k;
    if (d < 0) d = 0;  // none is new enough: say so about the first
    const GpuProbe::Device& g = probe.devices[d];
    if (g.cc_major < 9)
      return unavailable("--backend cuda: GPU " + std::to_string(d) + " (" + g.name + ") has compute capability " +
                         cc_words(g) + "; the CUDA kernels need 9.0 (Hopper, sm_90a)");
    return BackendDecision{"cuda", d, "backend cuda on " + gpu_words(g, d)};
  }
  // auto
  if (!probe.built_with_cuda) return BackendDecision{"ref", -1, "backend auto: ref (this build has no CUDA)"};
  if (count == 0) return BackendDecision{"ref", -1, "backend auto: ref (" + no_gpu_words(probe) + ")"};
  if (device >= 0) {
    const GpuProbe::Device& g = probe.devices[device];
    if (g.cc_major < 9)
      return unavailable(dev_flag + ": GPU " + std::to_string(device) + " (" + g.name + ") has compute capability " +
                         cc_words(g) + "; the CUDA kernels need 9.0 (Hopper, sm_90a)");
    return BackendDecision{"cuda", device, "backend auto: cuda on " + gpu_words(g, device)};
  }
  for (int d = 0; d < count; ++d)
    if (probe.devices[d].cc_major >= 9)
      return BackendDecision{"cuda", d, "backend auto: cuda on " + gpu_words(probe.devices[d], d)};
  return BackendDecision{"ref", -1,
                         "backend auto: ref (no CUDA GPU of compute capability >= 9.0: GPU 0 is " +
                             probe.devices[0].name + ", " + cc_words(probe.devices[0]) + ")"};
}

void add_backend_flags(Flags& f) {
  f.add("backend",
        "auto (cuda when a GPU of compute capability >= 9.0 is present, else ref), ref (fp32 CPU reference) or cuda "
        "('layered' is accepted as its old name)",
        "auto")
      .add("device", "GPU index of the cuda backend (default: the first GPU of compute capability >= 9.0)")
      .add("load-format", "auto (read the checkpoint) or dummy (random weights of config.json's shape, no checkpoint)",
           "auto")
      .add("seed", "seed of the --load-format dummy weights", "0");
}

Result<LoadFormat> parse_load_format(const std::string& s) {
  if (s == "auto") return LoadFormat::kAuto;
  if (s == "dummy") return LoadFormat::kDummy;
  return invalid_argument("--load-format must be auto (read the checkpoint) or dummy (random weights of "
                          "config.json's shape), got '" + s + "'");
}

uint64_t ref_weight_bytes(const ModelConfig& cfg) { return uint64_t(cfg.param_count()) * sizeof(float); }

Status check_ref_memory(const ModelConfig& cfg, uint64_t extra_bytes, uint64_t available) {
  const uint64_t need = ref_weight_bytes(cfg) + extra_bytes;
  if (available == 0 || need <= available) return Status::ok();
  return resource_exhausted("the ref backend (fp32 on the CPU) needs " + format_gb(need) + " of memory for this model (" +
                            std::to_string(cfg.param_count() / 1000000) + "M parameters), and " +
                            format_gb(available) +
                            " is available: serve it on a GPU (--backend cuda, or auto on a machine with one), "
                            "or use a smaller model");
}

uint64_t available_host_memory() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) return uint64_t(kb) << 10;
  }
  return 0;
}

Result<std::unique_ptr<LoadedModel>> load_for_backend(const std::string& dir, LoadFormat format,
                                                      const std::string& backend, uint64_t seed,
                                                      const std::function<void(const std::string&)>& progress) {
  if (format == LoadFormat::kAuto) return load_model(dir, progress);
  MS_ASSIGN_OR_RETURN(ModelConfig cfg, load_model_config(dir));
  if (backend == "ref") {
    // The bf16 scratch copy (tmpfs) and the fp32 one live together for a moment.
    MS_RETURN_IF_ERROR(check_ref_memory(cfg, uint64_t(cfg.param_count()) * 2, available_host_memory())
                           .with_context("--load-format dummy"));
    if (progress) progress("generating random weights on the CPU (" + format_gb(uint64_t(cfg.param_count()) * 2) + " bf16)");
    MS_ASSIGN_OR_RETURN(auto m, random_model(cfg, seed));
    return m;
  }
  auto m = std::make_unique<LoadedModel>();
  m->config = std::move(cfg);  // the cuda backend generates the weights on the device
  return m;
}

Result<std::unique_ptr<Backend>> make_backend(const LoadedModel& model, const BackendChoice& choice) {
  if (!choice.random_weights && model.weights.layers.size() != size_t(model.config.n_layers))
    return invalid_argument("the model has no weights loaded (only its config.json)");
  if (choice.name == "ref") {
    if (choice.random_weights)
      return invalid_argument("the ref backend generates no weights: load them with load_for_backend (dummy)");
    RefBackendOptions o;
    o.block_size = choice.block_size;
    o.kv_bytes = choice.kv_bytes > 0 ? choice.kv_bytes : kRefKvDefaultBytes;
    o.threads = choice.threads;
    MS_RETURN_IF_ERROR(check_ref_memory(model.config, o.kv_bytes, available_host_memory()));
    MS_ASSIGN_OR_RETURN(auto b, RefBackend::create(model.config, model.weights, o));
    return std::unique_ptr<Backend>(std::move(b));
  }
  if (choice.name == "cuda" || choice.name == "layered") {
#ifdef MEGASERVE_WITH_CUDA
    gpu::GpuBackendOptions o;
    o.device = choice.device;
    o.block_size = choice.block_size;
    o.kv_bytes = choice.kv_bytes;
    o.gpu_memory_utilization = choice.gpu_memory_utilization;
    o.progress = choice.progress;
    if (choice.max_context > 0) o.max_context = choice.max_context;
    MS_ASSIGN_OR_RETURN(o.decode, gpu::parse_decode_path(choice.decode));
    std::unique_ptr<gpu::GpuBackend> b;
    if (choice.random_weights) {
      MS_ASSIGN_OR_RETURN(b, gpu::GpuBackend::create_random(model.config, choice.seed, o));
    } else {
      MS_ASSIGN_OR_RETURN(b, gpu::GpuBackend::create(model.config, model.weights, o));
    }
    return std::unique_ptr<Backend>(std::move(b));
#else
    return unavailable("--backend cuda: this build has no CUDA support (no nvcc at configure time)");
#endif
  }
  return invalid_argument("flag --backend: unknown backend '" + choice.name + "' (available: ref, cuda)");
}

}  // namespace ms
