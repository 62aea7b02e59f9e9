#include "gpu/ops/linear.h"

#include "gpu/common/cuda_check.h"
#include "gpu/ops/elementwise.h"
#include "gpu/ops/gemv_core.cuh"

namespace ms::gpu {

constexpr int kGemvWarps = 8;  // warps per block
constexpr int kGemvCols = 2;   // output columns per warp: each activation chunk read serves two weight rows

// Tiles: ceil(N / (2 * 8 / KS)) of 8 warps. Warp w on tile b owns the
// columns n0 = 2 (b * 8 / KS + w / KS) and n0 + 1 (streamed together, 8 loads
// in flight per lane) over the K slice w % KS of KS equal slices; the KS
// partial sums are added in slice order through shared memory (deterministic).
// Split K (KS > 1) is for short, wide matrices at one row: o_proj (N 2048,
// K 4096) had 128 blocks, one per SM, each warp running 4 dependent rounds of
// loads (measured 14.6 us for 16.8 MB); with KS = 4 it has 512 blocks and one
// round per warp. MR: compile-time row bound (1 for a single row: fewer
// registers, more resident warps). Persistent grid (round 3): min(tiles,
// resident blocks) blocks loop over the tiles with a grid stride (QKV: 640
// tiles on 528 resident blocks was a full wave plus a partial wave of 113
// blocks, each new block paying its launch and first round trip again).
template <int MR, int KS>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const bf16* __restrict__ x, int ldx,
                                                               const bf16* __restrict__ w,
                                                               const float* __restrict__ bias, float alpha,
                                                               float* __restrict__ y, int ldy, int R, int N, int K,
                                                               int n_tiles) {
  constexpr int kGroups = kGemvWarps / KS;  // column pairs per block
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int cg = warp / KS, ks = warp % KS;
  const int kc = ((K + KS - 1) / KS + 7) / 8 * 8;  // slice length, a multiple of 8 (16-byte aligned slices)
  const int kb = min(K, ks * kc), kl = min(K, kb + kc) - kb;
  __shared__ float part[kGemvWarps][kGemvCols][MR];
  // Persistent: tile b (kGroups column pairs, all K) for b = blockIdx.x, + gridDim.x, ...
  // The loop bound is uniform over the block (the __syncthreads below).
  for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int n0 = (tile * kGroups + cg) * kGemvCols;
    float acc[kGemvCols][MR];
#pragma unroll
    for (int j = 0; j < kGemvCols; ++j)
#pragma unroll
      for (int r = 0; r < MR; ++r) acc[j][r] = 0.f;
    if (n0 < N) {
      const bf16* xr[MR];
#pragma unroll
      for (int r = 0; r < MR; ++r) xr[r] = x + int64_t(r < R ? r : 0) * ldx + kb;
      const bf16* wr[kGemvCols];
#pragma unroll
      for (int j = 0; j < kGemvCols; ++j) wr[j] = w + int64_t(min(n0 + j, N - 1)) * K + kb;  // clamped, unused
      warp_dot_multi<kGemvCols, 4, MR>(wr, xr, R, kl, acc);
    }
    if constexpr (KS == 1) {
      if (n0 < N) {
#pragma unroll
        for (int j = 0; j < kGemvCols; ++j) {
          const int n = n0 + j;
          const float b = bias && n < N ? bias[n] : 0.f;
#pragma unroll
          for (int r = 0; r < MR; ++r) {
            const float s = warp_sum(acc[j][r]);
            if (r < R && n < N && lane == 0) y[int64_t(r) * ldy + n] = alpha * s + b;
          }
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kGemvCols; ++j)
#pragma unroll
        for (int r = 0; r < MR; ++r) {
          const float s = warp_sum(acc[j][r]);
          if (lane == 0) part[warp][j][r] = s;
        }
      __syncthreads();
      for (int t = threadIdx.x; t < kGroups * kGemvCols * MR; t += blockDim.x) {
        const int g = t / (kGemvCols * MR), j = (t / MR) % kGemvCols, r = t % MR;
        const int n = (tile * kGroups + g) * kGemvCols + j;
        if (r < R && n < N) {
          float s = part[g * KS][j][r];
#pragma unroll
          for (int q = 1; q < KS; ++q) s += part[g * KS + q][j][r];
          y[int64_t(r) * ldy + n] = alpha * s + (bias ? bias[n] : 0.f);
        }
      }
      __syncthreads();  // part is rewritten by the next tile
    }
  }
}

template <int MR, int KS>
Status launch_gemv_t(const void* x, int ldx, const void* w, const float* bias, float alpha, float* y, int ldy, int R,
                     int N, int K, cudaStream_t stream) {
  const int per_block = kGemvWarps / KS * kGemvCols;
  const int n_tiles = (N + per_block - 1) / per_block;
  MS_ASSIGN_OR_RETURN(const int blocks, persistent_blocks(gemv_kernel<MR, KS>, kGemvWarps * 32, n_tiles));
  gemv_kernel<MR, KS><<<blocks, kGemvWarps * 32, 0, stream>>>(static_cast<const bf16*>(x), ldx,
                                                              static_cast<const bf16*>(w), bias, alpha, y, ldy, R, N,
                                                              K, n_tiles);
  MS_CUDA_LAUNCH_CHECK("gemv_kernel");
  return Status::ok();
}

// One activation row (decode at batch 1): the tiles of gemv_kernel<1, KS>
// (same columns, same K slices, same slice-order sum in shared memory) walked
// as a stream of rounds (stream_rows, gemv_core.cuh): a round is the warp's
// two columns x 4 chunks per lane (1024 elements of its slice), the next
// round's 8 loads per lane issued before the current one is used, across
// tile boundaries too. Every warp of a block walks the same tiles and rounds,
// so emit can synchronise the block.
template <int KS>
struct GemvRowWalker {
  static constexpr int kU = 4, kRound = kU * 256, kGroups = kGemvWarps / KS;
  struct Step {
    const bf16* w[kGemvCols];
    const bf16* x;
    int len;
    bool last;
    int tile, r;
  };
  const bf16* x;
  const bf16* w;
  const float* bias;
  float alpha;
  float* y;
  int N, K, n_tiles, cg, ks, kb, kl, rounds;
  float (*part)[kGemvCols];  // (kGemvWarps, kGemvCols) shared

  __device__ __forceinline__ void make(int tile, int r, Step& s) const {
    const int n0 = (tile * kGroups + cg) * kGemvCols;
    const int k = kb + r * kRound;
#pragma unroll
    for (int j = 0; j < kGemvCols; ++j) s.w[j] = w + int64_t(min(n0 + j, N - 1)) * K + k;  // clamped, unused
    s.x = x + k;
    s.len = kl - r * kRound;
    s.last = r == rounds - 1;
    s.tile = tile;
    s.r = r;
  }
  __device__ __forceinline__ bool first(Step& s) const {
    if (int(blockIdx.x) >= n_tiles) return false;
    make(blockIdx.x, 0, s);
    return true;
  }
  __device__ __forceinline__ bool next(const Step& c, Step& s) const {
    if (c.r + 1 < rounds) {
      make(c.tile, c.r + 1, s);
      return true;
    }
    const int t = c.tile + gridDim.x;
    if (t >= n_tiles) return false;
    make(t, 0, s);
    return true;
  }
  __device__ __forceinline__ void emit(const Step& s, float (&acc)[kGemvCols]) const {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n0 = (s.tile * kGroups + cg) * kGemvCols;
    if constexpr (KS == 1) {
#pragma unroll
      for (int j = 0; j < kGemvCols; ++j) {
        const int n = n0 + j;
        const float sum = warp_sum(acc[j]);
        if (n < N && lane == 0) y[n] = alpha * sum + (bias ? bias[n] : 0.f);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kGemvCols; ++j) {
        const float sum = warp_sum(acc[j]);
        if (lane == 0) part[warp][j] = sum;
      }
      __syncthreads();
      if (threadIdx.x < kGroups * kGemvCols) {
        const int g = threadIdx.x / kGemvCols, j = threadIdx.x % kGemvCols;
        const int n = (s.tile * kGroups + g) * kGemvCols + j;
        if (n < N) {
          float sum = part[g * KS][j];
#pragma unroll
          for (int q = 1; q < KS; ++q) sum += part[g * KS + q][j];
          y[n] = alpha * sum + (bias ? bias[n] : 0.f);
        }
      }
      __syncthreads();  // part is rewritten by the next tile
    }
  }
};

template <int KS>
__global__ void __launch_bounds__(kGemvWarps * 32, 2) gemv_row_kernel(const bf16* __restrict__ x,
                                                                      const bf16* __restrict__ w,
                                                                      const float* __restrict__ bias, float alpha,
                                                                      float* __restrict__ y, int N, int K,
                                                                      int n_tiles) {
  __shared__ float part[kGemvWarps][kGemvCols];
  using Walker = GemvRowWalker<KS>;
  const int warp = threadIdx.x >> 5;
  const int kc = ((K + KS - 1) / KS + 7) / 8 * 8;  // as gemv_kernel
  Walker wk;
  wk.x = x;
  wk.w = w;
  wk.bias = bias;
  wk.alpha = alpha;
  wk.y = y;
  wk.N = N;
  wk.K = K;
  wk.n_tiles = n_tiles;
  wk.cg = warp / KS;
  wk.ks = warp % KS;
  wk.kb = min(K, wk.ks * kc);
  wk.kl = min(K, wk.kb + kc) - wk.kb;
  wk.rounds = (kc + Walker::kRound - 1) / Walker::kRound;  // same for every warp (block-uniform steps)
  wk.part = part;
  stream_rows<kGemvCols, Walker::kU>(wk);
}

template <int KS>
Status launch_gemv_row_t(const void* x, const void* w, const float* bias, float alpha, float* y, int N, int K,
                         cudaStream_t stream) {
  const int per_block = kGemvWarps / KS * kGemvCols;
  const int n_tiles = (N + per_block - 1) / per_block;
  MS_ASSIGN_OR_RETURN(const int blocks, persistent_blocks(gemv_row_kernel<KS>, kGemvWarps * 32, n_tiles));
  gemv_row_kernel<KS><<<blocks, kGemvWarps * 32, 0, stream>>>(static_cast<const bf16*>(x),
                                                              static_cast<const bf16*>(w), bias, alpha, y, N, K,
                                                              n_tiles);
  MS_CUDA_LAUNCH_CHECK("gemv_row_kernel");
  return Status::ok();
}

template <int MR>
Status launch_gemv_mr(const void* x, int ldx, const void* w, const float* bias, float alpha, float* y, int ldy, int R,
                      int N, int K, cudaStream_t stream) {
  // Split K until there are >= ~4 blocks per SM (132 SMs), keeping >= 1024
  // elements (4 chunks per lane per column: one full round of loads) per slice.
  constexpr int kWantBlocks = 512;
  const int blocks1 = (N + kGemvWarps * kGemvCols - 1) / (kGemvWarps * kGemvCols);
  const int ks = blocks1 >= kWantBlocks || K < 2048 ? 1 : 2 * blocks1 >= kWantBlocks || K < 4096 ? 2 : 4;
  if constexpr (MR == 1) {  // one row: the pipelined stream (y row 0 only, ldy unused)
    if (ks == 1) return launch_gemv_row_t<1>(x, w, bias, alpha, y, N, K, stream);
    if (ks == 2) return launch_gemv_row_t<2>(x, w, bias, alpha, y, N, K, stream);
    return launch_gemv_row_t<4>(x, w, bias, alpha, y, N, K, stream);
  } else {
    if (ks == 1) return launch_gemv_t<MR, 1>(x, ldx, w, bias, alpha, y, ldy, R, N, K, stream);
    if (ks == 2) return launch_gemv_t<MR, 2>(x, ldx, w, bias, alpha, y, ldy, R, N, K, stream);
    return launch_gemv_t<MR, 4>(x, ldx, w, bias, alpha, y, ldy, R, N, K, stream);
  }
}

Status launch_gemv(const void* x, int ldx, const void* w, const float* bias, float alpha, float* y, int ldy, int R,
                   int N, int K, cudaStream_t stream) {
  if (R <= 0 || N <= 0) return Status::ok();
  if (R > kGemvMaxRows) return invalid_argument("launch_gemv: more than 8 rows");
  if (K % 8 != 0 || ldx % 8 != 0) return invalid_argument("launch_gemv: K and ldx must be multiples of 8");
  if (R == 1) return launch_gemv_mr<1>(x, ldx, w, bias, alpha, y, ldy, R, N, K, stream);
  // Row bound of the kernel: its accumulators and activation pointers scale with MR, and rows past R
  // are skipped at run time, so 2 and 4 rows on the 8-row kernel paid for 8 (H200, NMC bs 2 / 8K:
  // 4.46 -> 4.12 ms per step, bs 4 / 8K: 7.27 -> 6.70).
  if (R <= 2) return launch_gemv_mr<2>(x, ldx, w, bias, alpha, y, ldy, R, N, K, stream);
  if (R <= 4) return launch_gemv_mr<4>(x, ldx, w, bias, alpha, y, ldy, R, N, K, stream);
  return launch_gemv_mr<kGemvMaxRows>(x, ldx, w, bias, alpha, y, ldy, R, N, K, stream);
}

// Router GEMV (fp32 activations, bf16 weights; N = E is small, so every
// weight row must stream fast). Grid (ceil(N / 4), R): warp owns column n of
// row blockIdx.y; a lane issues four 16-byte weight loads (8 bf16 each)
// before using them, and reads the matching fp32 x as float4 pairs. The first
// version used 2-byte loads, one per lane per iteration, on 16 blocks.
constexpr int kRouterWarps = 4;

__global__ void __launch_bounds__(kRouterWarps * 32) gemv_f32x_kernel(const float* __restrict__ x,
                                                                      const bf16* __restrict__ w,
                                                                      float* __restrict__ y, int N, int K) {
  constexpr int U = 4;
  const int n = blockIdx.x * kRouterWarps + (threadIdx.x >> 5), r = blockIdx.y, lane = threadIdx.x & 31;
  if (n >= N) return;
  const float* xr = x + int64_t(r) * K;
  const bf16* wr = w + int64_t(n) * K;
  float acc = 0.f;
  for (int k0 = lane * 8; k0 < K; k0 += U * 256) {
    uint4 wv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) wv[u] = k0 + u * 256 < K ? ld_weight(wr + k0 + u * 256) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = k0 + u * 256;
      if (k >= K) break;
      float wf[8];
      bf16x8_to_f32(wv[u], wf);
      const float4 xa = *reinterpret_cast<const float4*>(xr + k), xb = *reinterpret_cast<const float4*>(xr + k + 4);
      acc = fmaf(wf[0], xa.x, acc);
      acc = fmaf(wf[1], xa.y, acc);
      acc = fmaf(wf[2], xa.z, acc);
      acc = fmaf(wf[3], xa.w, acc);
      acc = fmaf(wf[4], xb.x, acc);
      acc = fmaf(wf[5], xb.y, acc);
      acc = fmaf(wf[6], xb.z, acc);
      acc = fmaf(wf[7], xb.w, acc);
    }
  }
  acc = warp_sum(acc);
  if (lane == 0) y[int64_t(r) * N + n] = acc;
}

// Any K (scalar loads): the fallback when K % 8 != 0.
__global__ void gemv_f32x_scalar_kernel(const float* __restrict__ x, const bf16* __restrict__ w,
                                        float* __restrict__ y, int N, int K) {
  const int n = blockIdx.x * kRouterWarps + (threadIdx.x >> 5), r = blockIdx.y, lane = threadIdx.x & 31;
  if (n >= N) return;
  const float* xr = x + int64_t(r) * K;
  const bf16* wr = w + int64_t(n) * K;
  float acc = 0.f;
  for (int k = lane; k < K; k += 32) acc = fmaf(__bfloat162float(wr[k]), xr[k], acc);
  acc = warp_sum(acc);
  if (lane == 0) y[int64_t(r) * N + n] = acc;
}

Status launch_gemv_f32x(const float* x, const void* w, float* y, int R, int N, int K, cudaStream_t stream) {
  if (R <= 0 || N <= 0) return Status::ok();
  if (R > 65535) return invalid_argument("launch_gemv_f32x: too many rows");
  const dim3 grid((N + kRouterWarps - 1) / kRouterWarps, R);
  if (K % 8 == 0) {
    gemv_f32x_kernel<<<grid, kRouterWarps * 32, 0, stream>>>(x, static_cast<const bf16*>(w), y, N, K);
    MS_CUDA_LAUNCH_CHECK("gemv_f32x_kernel");
  } else {
    gemv_f32x_scalar_kernel<<<grid, kRouterWarps * 32, 0, stream>>>(x, static_cast<const bf16*>(w), y, N, K);
    MS_CUDA_LAUNCH_CHECK("gemv_f32x_scalar_kernel");
  }
  return Status::ok();
}

Status launch_gemm_f32(cublasHandle_t handle, const float* x, const float* w, float* y, int R, int N, int K,
                       cudaStream_t stream) {
  if (R <= 0 || N <= 0) return Status::ok();
  MS_CUBLAS_RETURN(cublasSetStream(handle, stream));
  // Row-major y (R, N) = x (R, K) . w (N, K)^T, as launch_gemm.
  const float alpha = 1.f, beta = 0.f;
  MS_CUBLAS_RETURN(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, R, K, &alpha, w, CUDA_R_32F, K, x, CUDA_R_32F, K,
                                &beta, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
  return Status::ok();
}

Status launch_gemm(cublasHandle_t handle, const void* x, int ldx, const void* w, const float* bias, float alpha,
                   float* y, int ldy, int R, int N, int K, cudaStream_t stream) {
  if (R <= 0 || N <= 0) return Status::ok();
  MS_CUBLAS_RETURN(cublasSetStream(handle, stream));
  // Row-major y (R, N) is column-major y^T (N, R): y^T = W (N, K) . x^T (K, R),
  // where row-major W is column-major (K, N) (op T) and row-major x is
  // column-major (K, R) (op N).
  const float beta = 0.f;
  MS_CUBLAS_RETURN(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, R, K, &alpha, w, CUDA_R_16BF, K, x, CUDA_R_16BF,
                                ldx, &beta, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bias) MS_RETURN_IF_ERROR(launch_add_bias(y, ldy, bias, R, N, stream));
  return Status::ok();
}

}  // namespace ms::gpu
