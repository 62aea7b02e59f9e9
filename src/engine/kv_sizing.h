// KV-cache sizing, as pure functions the CPU tests check:
//  - how many bytes the KV pool gets on a GPU (--gpu-memory-utilization F,
//    vLLM's meaning: the server may use F x the device's total memory, so the
//    pool gets F x total minus everything already in use once the weights and
//    both executors' buffers are allocated, minus a reserve for what is
//    allocated later), or an explicit --kv-cache-mb checked against what is
//    free;
//  - what a KV layout then holds: blocks per group, tokens of context in the
//    full-attention group, and the largest request one sequence can run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/backend.h"

namespace ms {

// Device memory allocated after the KV pool, which the budget must leave
// room for: the cuBLAS workspaces of the two executor handles (the cuBLAS
// guide's size for Hopper is 32 MiB each; cuBLAS may allocate them at their
// first GEMM, after the pool), the device sampler's scratch (8
// rows x vocab fp32: 8 MiB at a 262K vocabulary, allocated at the first
// sample), the instantiated decode CUDA graphs (one per batch size), kernel
// modules loaded lazily at their first launch (CUDA_MODULE_LOADING=LAZY is
// the default) and the local-memory (stack) reservation the driver grows at
// the first launch of a kernel that spills, which scales with SMs x resident
// threads (132 x 2048 on an H200: 0.27 GB per KB of stack per thread). 1 GiB
// covers these with room to spare and costs 0.7% of an H200 (~40K tokens of
// North Mini Code context).
inline constexpr size_t kKvRuntimeReserveBytes = size_t(1) << 30;

// What cudaMemGetInfo reports for the device.
struct DeviceMemory {
  size_t total = 0;
  size_t free = 0;
};

struct KvMemoryPlan {
  size_t bytes = 0;         // the KV pool's budget
  std::string explanation;  // one line for the startup log, with the numbers
};

// explicit_bytes > 0 (--kv-cache-mb): that budget, an error naming the
// numbers when it exceeds free - reserve. Otherwise utilization x total -
// (total - free) - reserve, an error naming the numbers when that is not
// positive. weight_bytes only explains the log line (it is part of "in use").
// utilization must be in (0, 1].
Result<KvMemoryPlan> plan_kv_memory(const DeviceMemory& mem, size_t weight_bytes, size_t explicit_bytes,
                                    double utilization, size_t reserve = kKvRuntimeReserveBytes);

// One KV group's fixed size (groups in the backend's KvSpec order).
struct KvGroupCapacity {
  int window = 0;    // 0: full attention; else the sliding window in tokens
  int layers = 0;    // layers sharing the group's block tables
  int blocks = 0;    // physical blocks
  size_t bytes = 0;  // memory of the group's blocks
};

// What the KV cache holds, fixed when the engine starts (startup log, /metrics).
struct KvCapacity {
  int block_size = 0;
  std::vector<KvGroupCapacity> groups;
  // Tokens of context the full-attention groups hold, all requests together
  // (the smallest group's; 0 when every layer is sliding).
  int64_t context_tokens = 0;
  // The largest request (prompt + max_tokens) one sequence can run alone in
  // steps of `prefill_chunk` tokens (INT64_MAX when no group bounds it). The
  // engine then lowers it to its max_model_len.
  int64_t max_request_tokens = 0;
  // The engine lowered the model's context length to what the cache holds.
  bool bounds_context = false;
};

KvCapacity kv_capacity(const KvSpec& spec, int prefill_chunk);
// "group 0 (13 full-attention layers): 9342 blocks x 64 tokens = 597888 tokens, 14.25 GiB; group 1 ...".
std::string describe(const KvCapacity& cap);

}  // namespace ms
