// Opens a checkpoint directory: config.json -> ModelConfig, shards -> mmapped
// tensors bound to the model structure. Keeps the mappings alive.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace ms {

struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;
  ModelWeights weights;  // views into checkpoint
};

Result<std::unique_ptr<LoadedModel>> load_model(const std::string& dir,
                                                const std::function<void(const std::string&)>& progress = {});

}  // namespace ms
