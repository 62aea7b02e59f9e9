// Hash-based random fill of device arrays (no host copy): weights of the
// full-shape random models and random KV for the decode benchmark.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace ms::gpu {

// a (n) bf16 = offset + scale * U[-1, 1) drawn from hash(seed, i).
Status launch_random_fill_bf16(void* a, size_t n, uint64_t seed, float scale, float offset, cudaStream_t stream);
// a (n) fp32, same distribution.
Status launch_random_fill_f32(float* a, size_t n, uint64_t seed, float scale, float offset, cudaStream_t stream);

}  // namespace ms::gpu
