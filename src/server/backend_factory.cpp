#include "server/backend_factory.h"

#include "ref/ref_backend.h"
#ifdef MEGASERVE_WITH_CUDA
#include "gpu/common/device_info.h"
#include "gpu/gpu_backend.h"
#endif

namespace ms {

Result<std::unique_ptr<Backend>> make_backend(const LoadedModel& model, const BackendChoice& choice) {
  if (choice.name == "ref") {
    RefBackendOptions o;
    o.block_size = choice.block_size;
    o.kv_bytes = choice.kv_bytes;
    o.threads = choice.threads;
    MS_ASSIGN_OR_RETURN(auto b, RefBackend::create(model.config, model.weights, o));
    return std::unique_ptr<Backend>(std::move(b));
  }
  if (choice.name == "cuda" || choice.name == "layered") {
#ifdef MEGASERVE_WITH_CUDA
    if (!gpu::has_gpu()) return unavailable("--backend cuda: no CUDA GPU is available");
    gpu::GpuBackendOptions o;
    o.block_size = choice.block_size;
    o.kv_bytes = choice.kv_bytes;
    if (choice.max_context > 0) o.max_context = choice.max_context;
    MS_ASSIGN_OR_RETURN(o.decode, gpu::parse_decode_path(choice.decode));
    MS_ASSIGN_OR_RETURN(auto b, gpu::GpuBackend::create(model.config, model.weights, o));
    return std::unique_ptr<Backend>(std::move(b));
#else
    return unavailable("--backend cuda: this build has no CUDA support (no nvcc at configure time)");
#endif
  }
  return invalid_argument("flag --backend: unknown backend '" + choice.name + "' (available: ref, cuda)");
}

}  // namespace ms
