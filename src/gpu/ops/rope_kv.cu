#include "gpu/ops/rope_kv.h"

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"

namespace ms::gpu {

// Grid (T, ceil(heads / 8)): warp w of block (t, y) handles head 8 y + w of
// the nh + 2 nkv heads of token t (and + 8 gridDim.y, ... if more). The first
// version ran one 16-warp block per token, so at one token each warp did 2-3
// heads one after another, each a dependent load round trip (7.3 us per
// layer at bs 1); now every head of a decode token has its own warp. A lane reads both elements of each pair it rotates
// before writing them, and pairs are disjoint across lanes, so the in-place
// update of q needs no barrier.
__global__ void rope_kv_kernel(RopeKvArgs a, int neox) {
  const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int hd = a.hd, half = hd / 2;
  const float p = static_cast<float>(a.pos[t]);
  const int32_t slot = a.slots[t];
  const int64_t blk = slot / a.block_size, off = slot % a.block_size;
  float* row = a.qkv + int64_t(t) * a.ld;
  for (int head = blockIdx.y * nwarps + warp; head < a.nh + 2 * a.nkv; head += nwarps * gridDim.y) {
    const bool is_q = head < a.nh, is_k = !is_q && head < a.nh + a.nkv;
    float* x = row + int64_t(head) * hd;  // q, k, v heads are contiguous in the row
    if (!is_q && !is_k) {
      const int kvh = head - a.nh - a.nkv;
      bf16* dst = static_cast<bf16*>(a.v_cache) + ((blk * a.nkv + kvh) * a.block_size + off) * hd;
      for (int d = lane; d < hd; d += 32) dst[d] = __float2bfloat16_rn(x[d]);
      continue;
    }
    const float* nw = is_q ? a.q_norm : a.k_norm;
    float rstd = 1.f;
    if (nw) {
      float ss = 0.f;
      for (int d = lane; d < hd; d += 32) ss += x[d] * x[d];
      ss = warp_sum(ss);
      rstd = 1.0f / sqrtf(ss / float(hd) + a.eps);
    }
    bf16* dst = nullptr;
    if (is_k) {
      const int kvh = head - a.nh;
      dst = static_cast<bf16*>(a.k_cache) + ((blk * a.nkv + kvh) * a.block_size + off) * hd;
    }
    for (int i = lane; i < half; i += 32) {
      const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
      float va = x[ia], vb = x[ib];
      if (nw) {
        va = nw[ia] * (va * rstd);
        vb = nw[ib] * (vb * rstd);
      }
      if (a.inv_freq) {
        const float ang = a.inv_freq[i] * p;
        const float c = cosf(ang), s = sinf(ang);
        const float ra = va * c - vb * s, rb = vb * c + va * s;
        va = ra;
        vb = rb;
      }
      if (is_q) {
        x[ia] = va;
        x[ib] = vb;
      } else {
        dst[ia] = __float2bfloat16_rn(va);
        dst[ib] = __float2bfloat16_rn(vb);
      }
    }
  }
}

Status launch_rope_kv(const RopeKvArgs& a, cudaStream_t stream) {
  if (a.T == 0) return Status::ok();
  if (a.hd % 2 != 0) return invalid_argument("launch_rope_kv: odd head_dim");
  const int heads = a.nh + 2 * a.nkv;
  const int warps = heads < 8 ? heads : 8;
  const dim3 grid(a.T, (heads + warps - 1) / warps);
  rope_kv_kernel<<<grid, warps * 32, 0, stream>>>(a, a.style == RopeStyle::kNeox ? 1 : 0);
  MS_CUDA_LAUNCH_CHECK("rope_kv_kernel");
  return Status::ok();
}

}  // namespace ms::gpu
