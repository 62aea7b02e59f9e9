#include "gpu/common/random_fill.h"

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"

namespace ms::gpu {

__global__ void random_fill_bf16_kernel(bf16* a, size_t n, uint64_t seed, float scale, float offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    a[i] = __float2bfloat16_rn(offset + scale * hash_uniform(seed, i));
}

__global__ void random_fill_f32_kernel(float* a, size_t n, uint64_t seed, float scale, float offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    a[i] = offset + scale * hash_uniform(seed, i);
}

static unsigned fill_blocks(size_t n) {
  size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65536 ? (b == 0 ? 1 : b) : 65536);
}

Status launch_random_fill_bf16(void* a, size_t n, uint64_t seed, float scale, float offset, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  random_fill_bf16_kernel<<<fill_blocks(n), 256, 0, stream>>>(static_cast<bf16*>(a), n, seed, scale, offset);
  MS_CUDA_LAUNCH_CHECK("random_fill_bf16_kernel");
  return Status::ok();
}

Status launch_random_fill_f32(float* a, size_t n, uint64_t seed, float scale, float offset, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  random_fill_f32_kernel<<<fill_blocks(n), 256, 0, stream>>>(a, n, seed, scale, offset);
  MS_CUDA_LAUNCH_CHECK("random_fill_f32_kernel");
  return Status::ok();
}

}  // namespace ms::gpu
