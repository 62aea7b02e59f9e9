// Sampling on the GPU, so a decode step copies token ids (not logits rows)
// back to the host. Greedy: argmax per row (ties to the lowest id, as
// std::max_element) and its log-probability log_softmax(logits)[argmax].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace ms::gpu {

// logits (R, V) fp32 -> tokens (R) int32, logprobs (R) fp32 (may be null).
Status launch_argmax(const float* logits, int R, int V, int32_t* tokens, float* logprobs, cudaStream_t stream);

}  // namespace ms::gpu
