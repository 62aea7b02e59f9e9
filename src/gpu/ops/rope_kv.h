// QK-norm + RoPE + paged KV write, one kernel: the step between the fused QKV
// projection and attention.
//
// qkv (T, ld) fp32 holds per token [q (nh*hd) | k (nkv*hd) | v (nkv*hd)].
// Per token t at position pos[t]:
//   q heads: optional per-head RMSNorm (q_norm (hd) fp32), then RoPE (unless
//            inv_freq is null: NoPE layer); written back in place (fp32).
//   k heads: same with k_norm, then written to the cache as bf16.
//   v heads: written to the cache as bf16.
// Cache layout per layer: K and V each (num_blocks, nkv, block_size, hd) bf16;
// slots[t] = physical_block * block_size + pos % block_size.
// RoPE: interleaved pairs (2i, 2i+1) or NeoX halves (i, i + hd/2), angle
// inv_freq[i] * pos in fp32, accurate cosf/sinf (as the CPU reference).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"
#include "model/config.h"

namespace ms::gpu {

struct RopeKvArgs {
  float* qkv = nullptr;
  int ld = 0;
  int T = 0, nh = 0, nkv = 0, hd = 0, block_size = 0;
  const int32_t* pos = nullptr;    // (T)
  const int32_t* slots = nullptr;  // (T)
  const float* q_norm = nullptr;   // (hd) or null
  const float* k_norm = nullptr;   // (hd) or null
  float eps = 1e-6f;
  const float* inv_freq = nullptr;  // (hd / 2) or null (NoPE)
  RopeStyle style = RopeStyle::kNeox;
  void* k_cache = nullptr;  // bf16
  void* v_cache = nullptr;  // bf16
};

Status launch_rope_kv(const RopeKvArgs& a, cudaStream_t stream);

}  // namespace ms::gpu
