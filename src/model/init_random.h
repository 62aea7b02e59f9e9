// Writes a loadable random-weight checkpoint (config.json + safetensors,
// sharded with an index past `shard_bytes`) for a ModelConfig: what
// `megaserve init-random` does. Deterministic in the seed.
#pragma once

#include <functional>
#include <string>

#include "model/config.h"

namespace ms {

struct InitRandomOptions {
  uint64_t seed = 0;
  uint64_t shard_bytes = uint64_t(4) << 30;
  float stddev = 0.02f;  // matrices ~ N(0, stddev); norms = 1
  std::function<void(uint64_t done, uint64_t total)> progress;
};

Status write_random_checkpoint(const ModelConfig& cfg, const std::string& dir, const InitRandomOptions& opt);

}  // namespace ms
