// Prefill experts on the tensor cores: grouped GEMMs over the routed experts
// that read the MoE plan on the device (no host synchronisation, so a prefill
// step can be captured or overlapped like any other launch).
//
// Both projections are one launch each over a 1-D grid of tiles. The M
// dimension is the plan's gathered order: expert u owns rows [offset[u],
// offset[u] + count[u]); its rows are cut into BM-row tiles, and the tiles
// of all experts are numbered consecutively (tile j of the launch is found by
// a scan of the per-expert tile counts at block start). The grid is the upper
// bound ceil(n_sel / BM) + min(E, n_sel) m-tiles times the n-tiles; blocks
// past the real tile count exit at once.
//
// Rasterisation: consecutive blocks take kGroupM m-tiles (mostly of one
// expert) for one n-tile, then the next n-tile, so an expert's weight tile is
// read from HBM once and served from L2 to its other m-tiles, and a group's
// activation rows stay in L2 across the n-tiles.
//
// Block: 128 threads (4 warps as 2 x 2), a 64 x 128 tile of C = A B^T with A
// rows and B rows both K-contiguous (row.col mma), K in 64-wide stages, three
// cp.async stages in flight. Warp (wm, wn) computes 32 rows x 8 n8-tiles.
//   gate_up: A row = h[token of the member] (the gather is the load), B rows
//     [0, 64) = gate rows n0.., [64, 128) = up rows n0.. of the expert; the
//     warp's n8-tiles j and j + 4 are the gate and up values of the same
//     outputs, so SwiGLU is the epilogue: act (gathered row, I) bf16 =
//     silu(g) * u, rounded once, as the expert kernels.
//   down: A row = act (gathered row), B rows = down rows n0..n0+127; the
//     epilogue writes ybuf (member, H) fp32 = weight[member] * acc, the layout
//     launch_moe_combine reads (so the scatter is the store).
// fp32 accumulation; every output depends only on its own row, so the order
// of the members inside an expert does not change any value.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"
#include "gpu/common/mma.cuh"
#include "gpu/ops/moe.h"

namespace ms::gpu {

namespace {

// Block tile: WM x WN warps, each computing 32 rows x 8 n8-tiles (64 B rows);
// BM = 32 WM rows, BN = 64 WN B rows (gate_up: BN / 2 gate + BN / 2 up rows,
// BN / 2 outputs). 2 x 2 (64 x 128) is launched: the 8-warp tiles 64 x 256
// and 128 x 128 measured no faster on the H200 (docs/perf-notes.md).
constexpr int kGK = 64;      // K per stage
constexpr int kGStages = 3;  // cp.async stages in flight
constexpr int kGStride = kGK + 8;  // bf16 per smem row: +16 B, the 8 rows of an ldmatrix hit 8 bank groups
constexpr int kGroupM = 16;  // m-tiles per rasterisation group
__host__ __device__ constexpr size_t g_smem(int bm, int bn) {
  return size_t(kGStages) * (bm + bn) * kGStride * sizeof(bf16);
}

struct GroupedArgs {
  const bf16* a = nullptr;  // gate_up: h (T, Kd); down: act (n_sel, Kd) in gathered order
  const bf16* w = nullptr;  // (E, rows per expert, Kd)
  int Kd = 0;               // reduction length (gate_up: H, down: I)
  int N = 0;                // outputs per row (gate_up: I, down: H)
  int w_rows = 0;           // rows per expert in w (gate_up: 2I, down: H)
  int top_k = 0;
  int n_tiles_n = 0;
  MoePlan plan;
  const float* weights = nullptr;  // down: (n_sel) combine weight per member
  void* out = nullptr;             // gate_up: act (n_sel, I) bf16; down: ybuf (n_sel, H) fp32
};

// act[0..1] = bf16(silu(g) * u) of two adjacent outputs, one rounding (as the
// expert kernels and launch_swiglu).
__device__ __forceinline__ void store_swiglu2(bf16* act, float g0, float g1, float u0, float u1) {
  *reinterpret_cast<__nv_bfloat162*>(act) =
      __floats2bfloat162_rn(g0 / (1.0f + expf(-g0)) * u0, g1 / (1.0f + expf(-g1)) * u1);
}

struct TileInfo {
  int nt = 0;   // n-tile
  int m0 = 0;   // first row of the tile within its expert
  int e = 0;    // expert id
  int off = 0;  // the expert's first row in the gathered order
};

// The block's tile: m-tile mt and n-tile nt from the rasterised block index
// (kGroupM m-tiles per n-tile, then the next n-tile); which routed expert owns
// m-tile mt (tiles of BM rows, numbered across experts in plan order): warp 0
// scans the per-expert tile counts; then the tile's rows: row_src[r] = A row
// (gate_up: the member's token; down: its gathered row) or -1 past the
// expert's count, row_mem[r] = the member. Called by every thread; false
// (block-uniform) for blocks past the last tile.
template <bool kGateUp, int BM>
__device__ __forceinline__ bool setup_tile(const GroupedArgs& p, int32_t* row_src, int32_t* row_mem, TileInfo* ti) {
  __shared__ int tile_u, tile_m0;
  const int64_t groups_span = int64_t(kGroupM) * p.n_tiles_n;
  const int64_t bid = blockIdx.x;
  const int grp = static_cast<int>(bid / groups_span), in_grp = static_cast<int>(bid % groups_span);
  const int mt = grp * kGroupM + in_grp % kGroupM;
  ti->nt = in_grp / kGroupM;
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid < 32) {
    if (lane == 0) tile_u = -1;
    __syncwarp();  // before any lane can claim the tile
    const int n_active = *p.plan.n_active;
    int base_tiles = 0;
    for (int u0 = 0; u0 < n_active; u0 += 32) {
      const int u = u0 + lane;
      const int c = u < n_active ? p.plan.count[u] : 0;
      const int tiles = (c + BM - 1) / BM;
      int incl = tiles;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      const int excl = base_tiles + incl - tiles;
      if (tiles > 0 && mt >= excl && mt < excl + tiles) {
        tile_u = u;
        tile_m0 = (mt - excl) * BM;
      }
      base_tiles += __shfl_sync(0xffffffffu, incl, 31);
      if (mt < base_tiles) break;  // found (warp-uniform)
    }
  }
  __syncthreads();
  const int u = tile_u;
  if (u < 0) return false;
  ti->m0 = tile_m0;
  ti->e = p.plan.active[u];
  ti->off = p.plan.offset[u];
  const int cnt = p.plan.count[u];
  for (int r = tid; r < BM; r += blockDim.x) {
    const int m = ti->m0 + r;
    int src = -1, mem = 0;
    if (m < cnt) {
      mem = p.plan.members[ti->off + m];
      src = kGateUp ? mem / p.top_k : ti->off + m;
    }
    row_src[r] = src;
    row_mem[r] = mem;
  }
  __syncthreads();
  return true;
}

template <bool kGateUp, int WM, int WN>
__global__ void __launch_bounds__(WM * WN * 32, 8 / (WM * WN)) moe_grouped_mma_kernel(GroupedArgs p) {
  constexpr int kThreads = WM * WN * 32, BM = 32 * WM, BN = 64 * WN, kOutN = kGateUp ? BN / 2 : BN;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* stages = reinterpret_cast<bf16*>(smem_raw);  // (kGStages, BM + BN, kGStride): A rows then B rows
  __shared__ int32_t row_src[BM];  // A row index per tile row, -1 past the expert's count
  __shared__ int32_t row_mem[BM];  // member (selection id) per tile row

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int wm = warp / WN, wn = warp % WN;

  TileInfo ti;
  if (!setup_tile<kGateUp, BM>(p, row_src, row_mem, &ti)) return;  // past the real tiles (block-uniform)
  const int m0 = ti.m0, n0 = ti.nt * kOutN, e = ti.e, off = ti.off;

  const int Kd = p.Kd;
  const bf16* wexp = p.w + int64_t(e) * p.w_rows * Kd;
  // Stage `buf` <- K columns [k0, k0 + 64) of the tile's A and B rows: 8
  // 16-byte pieces per row, a thread per piece (rows tid / 8 + 16 i, piece
  // tid % 8); rows past the expert's count or N and pieces past Kd are
  // zero-filled. The source row pointers are fixed for the whole K loop, so
  // they are computed once here (a stage then costs one add and one cp.async
  // per piece instead of re-deriving the gather and weight rows).
  constexpr int kPieces = kGK / 8, kRowsPerPass = kThreads / kPieces, kPasses = (BM + BN) / kRowsPerPass;
  const int c = tid % kPieces;
  const bf16* src_row[kPasses];
  unsigned row_ok = 0;  // bit i: row of pass i exists
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int r = tid / kPieces + i * kRowsPerPass;
    const bf16* src = p.a;  // any valid address when nothing is read
    bool ok = false;
    if (i < BM / kRowsPerPass) {  // A rows (compile-time after unrolling)
      const int s = row_src[r];
      if (s >= 0) {
        src = p.a + int64_t(s) * Kd + c * 8;
        ok = true;
      }
    } else {
      const int j = r - BM;
      int wrow, n;
      if (kGateUp) {  // j < BN / 2: gate row n0 + j; else up row n0 + j - BN / 2
        n = n0 + (j % (BN / 2));
        wrow = (j < BN / 2 ? 0 : p.N) + n;
      } else {
        n = n0 + j;
        wrow = n;
      }
      if (n < p.N) {
        src = wexp + int64_t(wrow) * Kd + c * 8;
        ok = true;
      }
    }
    src_row[i] = src;
    row_ok |= unsigned(ok) << i;
  }
  const unsigned dst0 =
      static_cast<unsigned>(__cvta_generic_to_shared(stages + (tid / kPieces) * kGStride + c * 8));
  auto issue = [&](int buf, int k0) {
    const unsigned dst = dst0 + unsigned(buf * (BM + BN) * kGStride * sizeof(bf16));
    const bool kok = k0 + c * 8 < Kd;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const bool ok = kok && (row_ok >> i & 1u);
      cp_async_16_s(dst + unsigned(i * kRowsPerPass * kGStride * sizeof(bf16)), ok ? src_row[i] + k0 : p.a, ok);
    }
  };

  float acc[2][8][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

  const int n_k = (Kd + kGK - 1) / kGK;
#pragma unroll
  for (int s = 0; s < kGStages - 1; ++s) {
    if (s < n_k) issue(s, s * kGK);
    cp_async_commit();
  }
  // ldmatrix lane addresses. A (x4): matrix mi = lane / 8 covers rows
  // (mi & 1) * 8.. and k (mi >> 1) * 8.. of a 16 x 16 block. B (x4): rows
  // (n) (mi >> 1) * 8.., k (mi & 1) * 8.. of a 16-row pair of n8-tiles.
  const int mi = lane >> 3;
  const int a_row = wm * 32 + (lane & 7) + (mi & 1) * 8, a_col = (mi >> 1) * 8;
  const int b_row_in = (lane & 7) + (mi >> 1) * 8, b_col = (mi & 1) * 8;
  int b_row[4];  // smem B row of the warp's n8-tile pair np (tiles 2np, 2np + 1)
#pragma unroll
  for (int np = 0; np < 4; ++np)
    b_row[np] = BM +
                (kGateUp ? (np < 2 ? wn * 32 + np * 16 : BN / 2 + wn * 32 + (np - 2) * 16) : wn * 64 + np * 16) +
                b_row_in;

  for (int it = 0; it < n_k; ++it) {
    cp_async_wait<kGStages - 2>();
    __syncthreads();
    {
      const int nx = it + kGStages - 1;
      if (nx < n_k) issue(nx % kGStages, nx * kGK);
      cp_async_commit();
    }
    const bf16* sa = stages + size_t(it % kGStages) * (BM + BN) * kGStride;
#pragma unroll
    for (int kk = 0; kk < kGK / 16; ++kk) {
      uint32_t af[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) ldmatrix_x4(af[i], sa + (a_row + i * 16) * kGStride + kk * 16 + a_col);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];  // (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
        ldmatrix_x4(b, sa + b_row[np] * kGStride + kk * 16 + b_col);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma_bf16_16816(acc[i][2 * np], af[i], b[0], b[1]);
          mma_bf16_16816(acc[i][2 * np + 1], af[i], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue. acc[i][j] = rows wm*32 + i*16 + g (+8), columns 2t, 2t + 1 of n8-tile j.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * 32 + i * 16 + g + h * 8;
      if (row_src[r] < 0) continue;
      if (kGateUp) {
        bf16* act = static_cast<bf16*>(p.out) + int64_t(off + m0 + r) * p.N;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int n = n0 + wn * 32 + j * 8 + 2 * t;
          if (n >= p.N) continue;  // N even: n + 1 < N too
          store_swiglu2(act + n, acc[i][j][2 * h], acc[i][j][2 * h + 1], acc[i][j + 4][2 * h],
                        acc[i][j + 4][2 * h + 1]);
        }
      } else {
        const int mem = row_mem[r];
        const float wt = p.weights[mem];
        float* y = static_cast<float*>(p.out) + int64_t(mem) * p.N;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int n = n0 + wn * 64 + j * 8 + 2 * t;
          if (n >= p.N) continue;
          *reinterpret_cast<float2*>(y + n) = make_float2(wt * acc[i][j][2 * h], wt * acc[i][j][2 * h + 1]);
        }
      }
    }
  }
}

template <bool kGateUp, int WM, int WN>
Status launch_grouped_t(GroupedArgs p, int n_sel, int E, cudaStream_t stream, const char* name) {
  constexpr int BM = 32 * WM, BN = 64 * WN, kOutN = kGateUp ? BN / 2 : BN;
  p.n_tiles_n = (p.N + kOutN - 1) / kOutN;
  const int64_t m_tiles = (n_sel + BM - 1) / BM + std::min(E, n_sel);
  const int64_t m_span = (m_tiles + kGroupM - 1) / kGroupM * kGroupM;  // whole rasterisation groups
  const int64_t blocks = m_span * p.n_tiles_n;
  if (blocks > INT32_MAX) return invalid_argument(std::string(name) + ": too many tiles");
  auto* fn = moe_grouped_mma_kernel<kGateUp, WM, WN>;
  constexpr size_t smem = g_smem(BM, BN);
  MS_CUDA_RETURN(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  fn<<<static_cast<unsigned>(blocks), WM * WN * 32, smem, stream>>>(p);
  MS_CUDA_LAUNCH_CHECK(name);
  return Status::ok();
}

// ---- The wgmma variant (sm_90a warpgroup MMA): one warpgroup per block, a
// 64 x 256 tile (gate_up: 128 gate + 128 up rows, 128 outputs; down: 256
// outputs), wgmma.mma_async m64n256k16 with both operands in shared memory
// (K-major, 128-byte swizzle, written by cp.async at the swizzled position),
// 4 stages of K = 64 (40 KB each, one block per SM), the next stages' loads in
// flight while the tensor cores work on this one. Same tile numbering,
// rasterisation, row gather and epilogues as the mma.sync kernel.
constexpr int kWgBM = 64, kWgBN = 256, kWgStages = 4;
constexpr int kWgRow = 128;                                // bytes per smem row: 64 bf16 of K
constexpr int kWgStageBytes = (kWgBM + kWgBN) * kWgRow;    // A rows then B rows
constexpr size_t kWgSmem = size_t(kWgStages) * kWgStageBytes + 1024;  // + 1024-byte alignment slack

template <bool kGateUp>
__global__ void __launch_bounds__(128, 1) moe_grouped_wgmma_kernel(GroupedArgs p) {
  constexpr int BM = kWgBM, BN = kWgBN, kOutN = kGateUp ? BN / 2 : BN;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ int32_t row_src[BM];
  __shared__ int32_t row_mem[BM];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;

  TileInfo ti;
  if (!setup_tile<kGateUp, BM>(p, row_src, row_mem, &ti)) return;  // past the real tiles (block-uniform)
  const int m0 = ti.m0, n0 = ti.nt * kOutN, off = ti.off, Kd = p.Kd;
  const bf16* wexp = p.w + int64_t(ti.e) * p.w_rows * Kd;

  // Loads: thread tid owns 16-byte chunk c = tid % 8 of rows r0 + 16 i of the
  // stage (r0 = tid / 8; A rows 0..63, B rows 64..319), stored at chunk
  // c ^ (row % 8) = c ^ (r0 % 8) of its 128-byte row.
  const unsigned sbase = (static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  const int c = tid & 7, r0 = tid >> 3;
  const unsigned dst0 = sbase + unsigned(r0 * kWgRow) + unsigned((c ^ (r0 & 7)) << 4);
  const bf16* a_src[BM / 16];
  unsigned a_ok = 0;
#pragma unroll
  for (int i = 0; i < BM / 16; ++i) {
    const int s = row_src[r0 + 16 * i];
    a_src[i] = s >= 0 ? p.a + int64_t(s) * Kd + c * 8 : p.a;
    a_ok |= unsigned(s >= 0) << i;
  }
  // B row j = r0 + 16 i: gate_up: i < 8 gate row n0 + j, else up row N + n0 + j - 128; down: row n0 + j.
  const int64_t b_step = int64_t(16) * Kd;
  const bf16* b_lo = wexp + int64_t(n0 + r0) * Kd + c * 8;
  const bf16* b_hi = kGateUp ? b_lo + int64_t(p.N) * Kd : b_lo + 8 * b_step;
  unsigned b_ok = 0;
#pragma unroll
  for (int i = 0; i < BN / 16; ++i) b_ok |= unsigned(n0 + r0 + 16 * (kGateUp ? i % 8 : i) < p.N) << i;
  auto issue = [&](int buf, int k0) {
    const unsigned dst = dst0 + unsigned(buf * kWgStageBytes);
    const bool kok = k0 + c * 8 < Kd;
#pragma unroll
    for (int i = 0; i < BM / 16; ++i) {
      const bool ok = kok && (a_ok >> i & 1u);
      cp_async_16_s(dst + unsigned(16 * i * kWgRow), ok ? a_src[i] + k0 : p.a, ok);
    }
#pragma unroll
    for (int i = 0; i < BN / 16; ++i) {
      const bool ok = kok && (b_ok >> i & 1u);
      const bf16* src = (i < 8 ? b_lo + i * b_step : b_hi + (i - 8) * b_step) + k0;
      cp_async_16_s(dst + unsigned((BM + 16 * i) * kWgRow), ok ? src : p.a, ok);
    }
  };

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  wgmma_fence_operands(acc);
  const int n_k = (Kd + 63) / 64;
#pragma unroll
  for (int s = 0; s < kWgStages - 1; ++s) {
    if (s < n_k) issue(s, s * 64);
    cp_async_commit();
  }
  for (int it = 0; it < n_k; ++it) {
    cp_async_wait<kWgStages - 2>();  // this thread's pieces of stage `it` landed
    fence_proxy_async_smem();        // ... and are visible to the tensor cores' (async) reads
    __syncthreads();                 // everyone's are
    const unsigned sa = sbase + unsigned((it % kWgStages) * kWgStageBytes), sb = sa + unsigned(BM * kWgRow);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_m64n256k16_bf16(acc, wgmma_desc_sw128(sa + 32 * kk), wgmma_desc_sw128(sb + 32 * kk), 1);
    wgmma_commit();
    wgmma_wait<1>();  // the previous stage's MMAs are done: its buffer can be refilled
    __syncthreads();
    const int nx = it + kWgStages - 1;
    if (nx < n_k) issue(nx % kWgStages, nx * 64);
    cp_async_commit();
  }
  wgmma_wait<0>();
  wgmma_fence_operands(acc);  // the epilogue's reads of acc stay after the wait
  cp_async_wait<0>();

  // Epilogue: acc[4j + q] = row 16 warp + g + 8 (q >> 1), column 8j + 2t + (q & 1) of the tile.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * warp + g + 8 * h;
    if (row_src[r] < 0) continue;
    if (kGateUp) {
      bf16* act = static_cast<bf16*>(p.out) + int64_t(off + m0 + r) * p.N;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int n = n0 + 8 * j + 2 * t;
        if (n >= p.N) continue;  // N even: n + 1 < N too
        store_swiglu2(act + n, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], acc[4 * (j + 16) + 2 * h],
                      acc[4 * (j + 16) + 2 * h + 1]);
      }
    } else {
      const int mem = row_mem[r];
      const float wt = p.weights[mem];
      float* y = static_cast<float*>(p.out) + int64_t(mem) * p.N;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int n = n0 + 8 * j + 2 * t;
        if (n >= p.N) continue;
        *reinterpret_cast<float2*>(y + n) = make_float2(wt * acc[4 * j + 2 * h], wt * acc[4 * j + 2 * h + 1]);
      }
    }
  }
}

template <bool kGateUp>
Status launch_grouped_wgmma(GroupedArgs p, int n_sel, int E, cudaStream_t stream, const char* name) {
  constexpr int kOutN = kGateUp ? kWgBN / 2 : kWgBN;
  p.n_tiles_n = (p.N + kOutN - 1) / kOutN;
  const int64_t m_tiles = (n_sel + kWgBM - 1) / kWgBM + std::min(E, n_sel);
  const int64_t m_span = (m_tiles + kGroupM - 1) / kGroupM * kGroupM;
  const int64_t blocks = m_span * p.n_tiles_n;
  if (blocks > INT32_MAX) return invalid_argument(std::string(name) + ": too many tiles");
  auto* fn = moe_grouped_wgmma_kernel<kGateUp>;
  MS_CUDA_RETURN(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kWgSmem)));
  fn<<<static_cast<unsigned>(blocks), 128, kWgSmem, stream>>>(p);
  MS_CUDA_LAUNCH_CHECK(name);
  return Status::ok();
}

std::atomic<int>& gemm_kernel_choice() {
  static std::atomic<int> choice{[] {
    const char* e = std::getenv("MEGASERVE_MOE_GEMM");
    return e && std::string(e) == "mma" ? static_cast<int>(MoeGemmKernel::kMma)
                                        : static_cast<int>(MoeGemmKernel::kWgmma);
  }()};
  return choice;
}

template <bool kGateUp>
Status launch_grouped(const GroupedArgs& p, int n_sel, int E, cudaStream_t stream, const char* name) {
  if (moe_gemm_kernel() == MoeGemmKernel::kWgmma) return launch_grouped_wgmma<kGateUp>(p, n_sel, E, stream, name);
  return launch_grouped_t<kGateUp, 2, 2>(p, n_sel, E, stream, name);
}

}  // namespace

void set_moe_gemm_kernel(MoeGemmKernel k) { gemm_kernel_choice().store(static_cast<int>(k)); }
MoeGemmKernel moe_gemm_kernel() { return static_cast<MoeGemmKernel>(gemm_kernel_choice().load()); }

Status launch_moe_grouped_gate_up(const void* h, const void* gate_up, int H, int I, int T, int K, int E,
                                  const MoePlan& plan, void* act, cudaStream_t stream) {
  if (T <= 0 || I <= 0) return Status::ok();
  if (H % 8 != 0 || I % 2 != 0) return invalid_argument("moe grouped gate_up: needs hidden % 8 == 0, width even");
  GroupedArgs p;
  p.a = static_cast<const bf16*>(h);
  p.w = static_cast<const bf16*>(gate_up);
  p.Kd = H;
  p.N = I;
  p.w_rows = 2 * I;
  p.top_k = K;
  p.plan = plan;
  p.out = act;
  return launch_grouped<true>(p, T * K, E, stream, "moe_grouped_mma_kernel<gate_up>");
}

Status launch_moe_grouped_down(const void* act, const void* down, const float* weights, int H, int I, int T, int K,
                               int E, const MoePlan& plan, float* ybuf, cudaStream_t stream) {
  if (T <= 0 || H <= 0) return Status::ok();
  if (I % 8 != 0 || H % 2 != 0) return invalid_argument("moe grouped down: needs width % 8 == 0, hidden even");
  GroupedArgs p;
  p.a = static_cast<const bf16*>(act);
  p.w = static_cast<const bf16*>(down);
  p.Kd = I;
  p.N = H;
  p.w_rows = H;
  p.top_k = K;
  p.plan = plan;
  p.weights = weights;
  p.out = ybuf;
  return launch_grouped<false>(p, T * K, E, stream, "moe_grouped_mma_kernel<down>");
}

}  // namespace ms::gpu
