#include "engine/kv_sizing.h"

#include <algorithm>
#include <cstdio>

#include "core/byte_progress.h"
#include "kv/kv_cache_manager.h"

namespace ms {

Result<KvMemoryPlan> plan_kv_memory(const DeviceMemory& mem, size_t weight_bytes, size_t explicit_bytes,
                                    double utilization, size_t reserve) {
  if (mem.total == 0 || mem.free > mem.total) return invalid_argument("device memory query returned nonsense");
  const size_t used = mem.total - mem.free;
  const size_t usable_free = mem.free > reserve ? mem.free - reserve : 0;
  KvMemoryPlan plan;
  if (explicit_bytes > 0) {
    if (explicit_bytes > usable_free)
      return resource_exhausted("--kv-cache-mb " + std::to_string(explicit_bytes >> 20) + " (" +
                                format_gib(explicit_bytes) + ") does not fit: " + format_gib(mem.free) + " of " +
                                format_gib(mem.total) + " are free after the weights (" + format_gib(weight_bytes) +
                                ") and the executors' buffers, and " + format_gib(reserve) +
                                " is kept for cuBLAS workspaces, CUDA graphs and lazily loaded kernels");
    plan.bytes = explicit_bytes;
    plan.explanation = "KV cache " + format_gib(explicit_bytes) + " as given (--kv-cache-mb; --gpu-memory-utilization ignored), " +
                       format_gib(mem.free) + " of " + format_gib(mem.total) + " were free";
    return plan;
  }
  if (!(utilization > 0.0 && utilization <= 1.0))
    return invalid_argument("--gpu-memory-utilization must be in (0, 1], got " + std::to_string(utilization));
  const double target = utilization * double(mem.total);
  char frac[32];
  std::snprintf(frac, sizeof frac, "%.2f", utilization);
  const std::string in_use = format_gib(used) + " in use (" + format_gib(weight_bytes) +
                             " weights; the executors' buffers, the CUDA context and any other process)";
  if (target <= double(used) + double(reserve))
    return resource_exhausted("--gpu-memory-utilization " + std::string(frac) + " allows " +
                              format_gib(size_t(target)) + " of the " + format_gib(mem.total) + " GPU, but " + in_use +
                              " plus a " + format_gib(reserve) +
                              " reserve leave nothing for the KV cache: raise --gpu-memory-utilization, or give "
                              "--kv-cache-mb");
  plan.bytes = size_t(target) - used - reserve;
  plan.explanation = "KV cache " + format_gib(plan.bytes) + " = " + frac + " x " + format_gib(mem.total) +
                     " (--gpu-memory-utilization) - " + in_use + " - " + format_gib(reserve) +
                     " reserve (cuBLAS workspaces, CUDA graphs, lazily loaded kernels)";
  return plan;
}

KvCapacity kv_capacity(const KvSpec& spec, int prefill_chunk) {
  KvCapacity cap;
  cap.block_size = spec.block_size;
  KvCacheConfig cfg;
  cfg.block_size = spec.block_size;
  int64_t full_tokens = -1;
  for (const KvGroupSpec& g : spec.groups) {
    cap.groups.push_back({g.window, static_cast<int>(g.layers.size()), g.num_blocks,
                          size_t(g.num_blocks) * g.bytes_per_block});
    cfg.groups.push_back({g.window, g.num_blocks});
    if (g.window == 0) {
      const int64_t t = int64_t(g.num_blocks) * spec.block_size;
      full_tokens = full_tokens < 0 ? t : std::min(full_tokens, t);
    }
  }
  cap.context_tokens = std::max<int64_t>(0, full_tokens);
  cap.max_request_tokens = max_sequence_tokens(cfg, prefill_chunk);
  return cap;
}

std::string describe(const KvCapacity& cap) {
  std::string out;
  for (size_t g = 0; g < cap.groups.size(); ++g) {
    const KvGroupCapacity& k = cap.groups[g];
    if (!out.empty()) out += "; ";
    out += "group " + std::to_string(g) + " (" + std::to_string(k.layers) +
           (k.window > 0 ? " sliding-window layers, window " + std::to_string(k.window) : " full-attention layers") +
           "): " + std::to_string(k.blocks) + " blocks x " + std::to_string(cap.block_size) + " tokens = " +
           std::to_string(int64_t(k.blocks) * cap.block_size) + " tokens, " + format_gib(k.bytes);
  }
  return out;
}

}  // namespace ms
