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
  std::unique_ptr<Checkpoint> checkpoint;  // null when the weights are not from a checkpoint (dummy on the GPU)
  ModelWeights weights;  // views into checkpoint
};

// config.json, with generation_config.json's eos ids added (HF generation uses them).
Result<ModelConfig> load_model_config(const std::string& dir);

// The whole checkpoint. `progress` gets one line per shard mapped, then the
// total ("mapped 61.04 GB of weights in 13 shards"); the bytes are read when
// a backend first touches them (the GPU upload reports that progress).
Result<std::unique_ptr<LoadedModel>> load_model(const std::string& dir,
                                                const std::function<void(const std::string&)>& progress = {});

}  // namespace ms
