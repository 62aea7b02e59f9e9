#include "cli/backend_factory.h"

#include "ref/ref_backend.h"

namespace ms::cli {

Result<std::unique_ptr<Backend>> make_backend(const LoadedModel& model, const BackendChoice& choice) {
  if (choice.name == "ref") {
    RefBackendOptions o;
    o.block_size = choice.block_size;
    o.kv_bytes = choice.kv_bytes;
    o.threads = choice.threads;
    MS_ASSIGN_OR_RETURN(auto b, RefBackend::create(model.config, model.weights, o));
    return std::unique_ptr<Backend>(std::move(b));
  }
  return invalid_argument("flag --backend: unknown backend '" + choice.name + "' (available: ref)");
}

}  // namespace ms::cli
