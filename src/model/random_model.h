// Random weights of a config's shape generated on the CPU: what
// `--load-format dummy` serves on the ref backend (the GPU backend generates
// its own on the device, GpuBackend::create_random). The weights are the ones
// `megaserve init-random --seed N` writes (the same generator), written as a
// scratch checkpoint in `scratch_dir` (default: /dev/shm when it exists, so
// memory rather than disk; else the system temp directory), mapped, and
// unlinked at once: they go through the same validated loader as a
// checkpoint on disk and vanish with the process.
#pragma once

#include <memory>
#include <string>

#include "model/model_loader.h"

namespace ms {

Result<std::unique_ptr<LoadedModel>> random_model(const ModelConfig& cfg, uint64_t seed,
                                                  const std::string& scratch_dir = "");

}  // namespace ms
