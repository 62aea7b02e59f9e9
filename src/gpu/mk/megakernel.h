// Host entry points of the decode megakernel (megakernel.cu).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "core/status.h"
#include "gpu/mk/params.h"

namespace ms::gpu::mk {

// One decode step: p.n_sm CTAs (one per SM, all resident), the KV pool's
// tensor map (rows of head_dim bf16, boxes of min(block_size, 64) rows x
// min(head_dim, 64) columns, 128-byte swizzle, 64-byte at head_dim 32).
Status launch_megakernel(const Params& p, const CUtensorMap& kv_map, cudaStream_t stream);
size_t megakernel_smem_bytes();
int megakernel_threads();
// CTAs of the megakernel one SM holds (must be >= 1).
Result<int> megakernel_blocks_per_sm();

}  // namespace ms::gpu::mk
