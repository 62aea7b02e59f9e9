// Programmatic dependent launch (Hopper, PTX griddepcontrol) with L2 weight
// prefetch: the decode step is a chain of small kernels, each paying a launch
// gap and a DRAM ramp while the previous one drains (profile, docs/perf-notes
// "Measured outcomes"). A weight-streaming kernel launched with
// launch_with_pdl() may start while its predecessor still runs; before
// griddepcontrol.wait it may only touch data no running kernel writes (its
// weights, and outputs of kernels that finished before the predecessor
// started), so it prefetches its weights into L2 there — the megakernel idea
// of issuing weight loads before waiting on the input, between kernels.
// Predecessors call pdl_launch_dependents() at their start so the dependent
// grid can be scheduled as soon as they are all running. Without the launch
// attribute both instructions are no-ops. MEGASERVE_PDL=0 turns the attribute
// off (A/B timing, debugging).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace ms::gpu {

__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// This block's share of the 128-byte lines of [base, base + bytes), prefetched to L2.
__device__ __forceinline__ void prefetch_l2_share(const void* base, size_t bytes) {
  const size_t lines = (bytes + 127) / 128;
  const size_t per = (lines + gridDim.x - 1) / gridDim.x;
  const size_t l0 = size_t(blockIdx.x) * per;
  const size_t l1 = l0 + per < lines ? l0 + per : lines;
  const char* p = static_cast<const char*>(base);
  for (size_t l = l0 + threadIdx.x; l < l1; l += blockDim.x) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + l * 128));
}

bool pdl_enabled();

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream
// serialization allowed (when pdl_enabled()).
template <typename... KArgs, typename... Args>
cudaError_t launch_with_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                            Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace ms::gpu
