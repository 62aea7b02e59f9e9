#include "gpu/ops/sampling.h"

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"

namespace ms::gpu {

constexpr int kArgmaxThreads = 1024;

// One block per row: pass 1 max + argmax, pass 2 sum of exp(v - max).
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* __restrict__ logits, int V,
                                                                 int32_t* __restrict__ tokens,
                                                                 float* __restrict__ logprobs) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float red[32];
  const float* row = logits + int64_t(blockIdx.x) * V;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = row[i];
    if (v > bv) {  // strided ascending: the first max this thread sees has its lowest index
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  bv = lane < nwarps ? sv[lane] : -INFINITY;
  bi = lane < nwarps ? si[lane] : 0x7fffffff;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  float s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(row[i] - bv);
  s = block_sum(s, red);
  if (threadIdx.x == 0) {
    tokens[blockIdx.x] = bi;
    if (logprobs) logprobs[blockIdx.x] = -logf(s);
  }
}

Status launch_argmax(const float* logits, int R, int V, int32_t* tokens, float* logprobs, cudaStream_t stream) {
  if (R == 0) return Status::ok();
  argmax_kernel<<<R, kArgmaxThreads, 0, stream>>>(logits, V, tokens, logprobs);
  MS_CUDA_LAUNCH_CHECK("argmax_kernel");
  return Status::ok();
}

}  // namespace ms::gpu
