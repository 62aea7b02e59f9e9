// Creates the backend named by --backend for a loaded model (serve, generate).
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"
#include "model/model_loader.h"

namespace ms {

struct BackendChoice {
  std::string name = "ref";  // ref | cuda ("layered": the old name of cuda)
  std::string decode = "layered";  // cuda: megakernel | layered
  int block_size = 64;
  size_t kv_bytes = size_t(512) << 20;
  int threads = 0;         // ref: CPU threads (0: all)
  int max_context = 0;     // cuda: longest sequence (0: model default)
};

Result<std::unique_ptr<Backend>> make_backend(const LoadedModel& model, const BackendChoice& choice);

}  // namespace ms
