// The weight-streaming opcodes (kQkv, kOProj, kDenseGateUp, kDenseDown,
// kLmHead, the claimed expert tiles) on the tensor cores, swap-AB: a tile's
// 16 weight rows are the M of mma.sync m16n8k16, the step's (up to 8) token
// rows the N, so one pass over each weight byte serves every row of the
// batch. The weights stream through the ring (loader.cuh); the activation
// rows sit in the activation buffer (bf16, padded rows). Each consumer warp
// takes every 8th k-step of a stage; the 8 partial 16 x 8 tiles are summed
// through shared memory (double-buffered per tile) and the epilogue of the
// opcode writes the outputs. kRouter takes its fp32 input as bf16 hi + lo
// halves, two mma per k-step (op_router).
#pragma once

#include "gpu/common/mma.cuh"
#include "gpu/mk/consumer_ctx.cuh"

namespace ms::gpu::mk {

// This lane's shared addresses of its ldmatrix rows for k-step `warp` of a
// stage: A in stage 0's weight rows (add stage x kStageBytes), B in the
// activation rows; k-step warp + 8 i is i x 8 x 32 bytes further.
struct MmaLanes {
  uint32_t a, b;
};
__device__ __forceinline__ MmaLanes mma_lanes(const Ctx& c) {
  const int mi = c.lane() >> 3;
  const int a_row = (mi & 1) * 8 + (c.lane() & 7), a_col = (mi >> 1) * 8;
  const int b_row = c.lane() & 7, b_col = ((c.lane() >> 3) & 1) * 8;
  return {static_cast<uint32_t>(__cvta_generic_to_shared(c.s.stage[0])) + a_row * kRowBytes + a_col * 2 +
              c.warp() * 32,
          static_cast<uint32_t>(__cvta_generic_to_shared(c.s.act)) + b_row * kActStride + b_col * 2 + c.warp() * 32};
}

// The warp's partial 16 x 8 tile (the sum of its two accumulators, in the
// mma's fragment layout) into scratch buffer `buf`, then the consumer
// barrier that makes every warp's partials readable (tile_sum).
__device__ __forceinline__ void store_partials(Ctx& c, int buf, const float (&x)[4], const float (&y)[4]) {
  float* part = reinterpret_cast<float*>(c.s.scratch) + buf * (kConsumerWarps * 128) + c.warp() * 128;
  const int g = c.lane() >> 2, t = c.lane() & 3;
  part[g * 8 + 2 * t] = x[0] + y[0];
  part[g * 8 + 2 * t + 1] = x[1] + y[1];
  part[(g + 8) * 8 + 2 * t] = x[2] + y[2];
  part[(g + 8) * 8 + 2 * t + 1] = x[3] + y[3];
  consumer_sync();
}

// Streams one tile's n_chunks positions (k columns in all, chunk ch at
// activation columns [ch * kStageCols, ...)) through the tensor cores and
// leaves the 8 warps' partial sums in scratch buffer `buf` (0 / 1): float
// [warp][16 rows][8 tokens]. Syncs the consumers before returning (also in
// drain mode, where the sums are meaningless). A warp's k-steps of a stage
// (at most 8: ks = warp + 8 i) are unrolled with the shared addresses
// stepped by constants and two accumulators (two mma chains): at aac3eea
// Nsight put most of the consumers' per-stage time in the loop's scalar
// work (address conversion, trip counts, the ring's modulo), not the mma.
__device__ __forceinline__ void tile_mma(Ctx& c, int tile, int k, int buf) {
  constexpr int kStepsPerWarp = kStageCols / 16 / kConsumerWarps;  // 8
  float acc0[4] = {0.f, 0.f, 0.f, 0.f}, acc1[4] = {0.f, 0.f, 0.f, 0.f};
  const int n_chunks = (k + kStageCols - 1) / kStageCols;
  const MmaLanes lanes = mma_lanes(c);
  for (int ch = 0; ch < n_chunks; ++ch) {
    const bool have = c.acquire(tile, ch);
    const int nks = have ? min(kStageCols, k - ch * kStageCols) / 16 : 0;
    const int mine = nks > c.warp() ? (nks - c.warp() + kConsumerWarps - 1) / kConsumerWarps : 0;
    const uint32_t a_base = lanes.a + c.ring.stage() * kStageBytes, b_base = lanes.b + ch * kStageCols * 2;
#pragma unroll
    for (int i = 0; i < kStepsPerWarp; ++i) {
      if (i < mine) {
        uint32_t a[4], b[2];
        ldmatrix_x4_s(a, a_base + i * kConsumerWarps * 32);
        ldmatrix_x2_s(b, b_base + i * kConsumerWarps * 32);
        mma_bf16_16816(i & 1 ? acc1 : acc0, a, b[0], b[1]);
      }
    }
    c.release();
  }
  store_partials(c, buf, acc0, acc1);
}

// tile_mma for an expert down tile of up to two 16-row blocks (rows at
// row_bytes in the stage: Dims::down_rows), one ring position (k <=
// kStageCols), block b's partial sums in scratch buffer b.
__device__ __forceinline__ void tile_mma_down(Ctx& c, int tile, int k, int row_bytes, int blocks) {
  constexpr int kStepsPerWarp = kStageCols / 16 / kConsumerWarps;  // 8
  float acc[2][2][4] = {};
  const int mi = c.lane() >> 3;
  const uint32_t a_lane = static_cast<uint32_t>(__cvta_generic_to_shared(c.s.stage[0])) +
                          ((mi & 1) * 8 + (c.lane() & 7)) * row_bytes + (mi >> 1) * 16 + c.warp() * 32;
  const uint32_t b_base = mma_lanes(c).b;
  const bool have = c.acquire(tile, 0);
  const int nks = have ? k / 16 : 0;
  const int mine = nks > c.warp() ? (nks - c.warp() + kConsumerWarps - 1) / kConsumerWarps : 0;
  const uint32_t a_base = a_lane + c.ring.stage() * kStageBytes;
#pragma unroll
  for (int i = 0; i < kStepsPerWarp; ++i) {
    if (i < mine) {
      uint32_t b[2];
      ldmatrix_x2_s(b, b_base + i * kConsumerWarps * 32);
#pragma unroll
      for (int blk = 0; blk < 2; ++blk)
        if (blk < blocks) {
          uint32_t a[4];
          ldmatrix_x4_s(a, a_base + blk * kTileRows * row_bytes + i * kConsumerWarps * 32);
          mma_bf16_16816(acc[blk][i & 1], a, b[0], b[1]);
        }
    }
  }
  c.release();
  // Both blocks' partials, then one barrier (store_partials syncs after each).
  const int g = c.lane() >> 2, t = c.lane() & 3;
#pragma unroll
  for (int blk = 0; blk < 2; ++blk) {
    float* part = reinterpret_cast<float*>(c.s.scratch) + blk * (kConsumerWarps * 128) + c.warp() * 128;
    part[g * 8 + 2 * t] = acc[blk][0][0] + acc[blk][1][0];
    part[g * 8 + 2 * t + 1] = acc[blk][0][1] + acc[blk][1][1];
    part[(g + 8) * 8 + 2 * t] = acc[blk][0][2] + acc[blk][1][2];
    part[(g + 8) * 8 + 2 * t + 1] = acc[blk][0][3] + acc[blk][1][3];
  }
  consumer_sync();
}

// The sum over the warps of element (m, n) of scratch buffer `buf`.
__device__ __forceinline__ float tile_sum(const Ctx& c, int buf, int m, int n) {
  const float* part = reinterpret_cast<const float*>(c.s.scratch) + buf * (kConsumerWarps * 128) + m * 8 + n;
  float v = 0.f;
#pragma unroll
  for (int w = 0; w < kConsumerWarps; ++w) v += part[w * 128];
  return v;
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// The lane index read where it is used (volatile: not hoisted into a register
// live across the whole kernel, which spilled it: the kernel is at its
// 168-register ceiling).
__device__ __forceinline__ int lane_id() {
  int l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}

// One warp's pass over k-steps [0, nks) of a stage: the tile's 16 weight rows
// from this lane's ldmatrix address a (stage, k-step 0) against activation
// rows from b, stepping both by 32 bytes a k-step; two mma chains. The
// accumulators live in the lane's slot of shared memory between stages
// (acc_slot, float4): kept in registers across the ring waits of a
// multi-stage tile they would be live across code that is at the
// register ceiling.
__device__ __forceinline__ void warp_mma_stage(uint32_t a, uint32_t b, int nks, float4* acc_slot, bool first) {
  float acc0[4] = {0.f, 0.f, 0.f, 0.f}, acc1[4] = {0.f, 0.f, 0.f, 0.f};
  if (!first) {
    const float4 v = *acc_slot;
    acc0[0] = v.x, acc0[1] = v.y, acc0[2] = v.z, acc0[3] = v.w;
  }
  // Eight k-steps' fragments are loaded before their eight mma: the loads
  // are volatile asm, issued in source order, so a loop of load-then-mma
  // pairs waits out each ldmatrix's latency on its own. Measured at cb66db5
  // (bs 1 / 2 / 8 at 8K, one process): pairs 3.200 / 4.374 / 11.312 ms,
  // batches of 4 3.152 / 4.308 / 11.300, of 8 3.154 / 4.305 / 11.314.
  int ks = 0;
  for (; ks + 8 <= nks; ks += 8) {
    uint32_t fa[8][4], fb[8][2];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      ldmatrix_x4_s(fa[i], a + (ks + i) * 32);
      ldmatrix_x2_s(fb[i], b + (ks + i) * 32);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) mma_bf16_16816(i & 1 ? acc1 : acc0, fa[i], fb[i][0], fb[i][1]);
  }
  for (; ks < nks; ++ks) {  // the accumulator picked by a constant: a dynamic pick spilled the kernel
    uint32_t fa[4], fb[2];
    ldmatrix_x4_s(fa, a + ks * 32);
    ldmatrix_x2_s(fb, b + ks * 32);
    mma_bf16_16816(acc0, fa, fb[0], fb[1]);
  }
  *acc_slot = make_float4(acc0[0] + acc1[0], acc0[1] + acc1[1], acc0[2] + acc1[2], acc0[3] + acc1[3]);
}

// A warp's tile over all its n_chunks ring positions (every warp passes
// them; the owner, `mine`, runs the k-steps): tile `tile` of the current
// instruction, K columns, activation rows from b_lane (this lane's B
// address at column 0); first_held: the first position is already acquired
// (a claim loop read its header). The sums are left in acc_slot. False: no
// data (the warp's vote on the waits: a warp never splits).
// Expert down tiles of more than 16 rows (Dims::down_rows) are two mma row
// blocks: rows [16, 32) at 16 x row_bytes further, their sums in the slot
// kAccBlock float4s further (rows past the tile are whatever the stage holds
// there: their sums are never read).
constexpr int kAccBlock = kConsumerWarps * 32;
__device__ __forceinline__ bool warp_tile(Ctx& c, int tile, int K, bool mine, uint32_t b_lane, float4* acc_slot,
                                          bool first_held = false, int row_bytes = kRowBytes, int blocks = 1) {
  const int lane = lane_id(), mi = lane >> 3;
  const uint32_t a_lane = static_cast<uint32_t>(__cvta_generic_to_shared(c.s.stage[0])) +
                          ((mi & 1) * 8 + (lane & 7)) * row_bytes + (mi >> 1) * 16;
  const int n_chunks = (K + kStageCols - 1) / kStageCols;
  bool ok = true;
  for (int ch = 0; ch < n_chunks; ++ch) {
    if (ch > 0 || !first_held) ok = __all_sync(0xffffffffu, c.acquire(tile, ch)) && ok;
    if (ok && mine)
      for (int b = 0; b < blocks; ++b)
        warp_mma_stage(a_lane + c.ring.stage() * kStageBytes + b * kTileRows * row_bytes, b_lane + ch * kStageCols * 2,
                       min(kStageCols, K - ch * kStageCols) / 16, acc_slot + b * kAccBlock, ch == 0);
    c.release();
  }
  return ok;
}

// The activation rows instruction `in` (kQkv, kOProj, kDenseGateUp,
// kDenseDown, kLmHead) reads, staged at column 0 of the activation buffer
// (tagged: consecutive instructions over the same rows stage them once);
// returns its k (columns), 0 for another opcode.
__device__ __forceinline__ int gemv_input(Ctx& c, const Instruction& in) {
  const Params& p = c.p;
  const Dims& d = p.dims;
  const int R = p.rows;
  const bool second = !d.parallel_block;  // sequential blocks: the FFN reads the second norm's h
  switch (in.op) {
    case Opcode::kQkv:
    case Opcode::kLmHead:
      c.stage_act(act_tag(kActH, in.layer, 0, 0, d.hidden, 0), p.h, d.hidden, nullptr, R, 0, d.hidden);
      return d.hidden;
    case Opcode::kOProj: {
      const int kw = d.group * d.head_dim, c0 = in.gemv.kslice * kw;
      c.stage_act(act_tag(kActAttn, in.layer, 0, c0, kw, 0), p.attn_out + c0, d.q_width, nullptr, R, 0, kw);
      return kw;
    }
    case Opcode::kDenseGateUp:
      c.stage_act(act_tag(kActH, in.layer, second, 0, d.hidden, 0), p.h, d.hidden, nullptr, R, 0, d.hidden);
      return d.hidden;
    case Opcode::kDenseDown: {
      const bool shared = in.flags & ::ms::mk::kFlagShared;
      const int F = shared ? d.shared_ffn : d.dense_ffn;
      const ::ms::mk::RowRange cols = ::ms::mk::down_slice_cols(F, in.gemv.kslice);
      const int k = cols.end - cols.begin;
      c.stage_act(act_tag(shared ? kActShared : kActDense, in.layer, 0, cols.begin, k, 0),
                  (shared ? p.shared_act : p.dense_act) + cols.begin, F, nullptr, R, 0, k);
      return k;
    }
    default:
      return 0;
  }
}

// Output (m, n) of tile t of a plain gemv (kQkv, kOProj, kDenseDown,
// kLmHead): weight row m (0..15) of the tile against token row n (< rows).
__device__ __forceinline__ void gemv_store(const Ctx& c, const Instruction& in, int t, int m, int n, float v) {
  const Params& p = c.p;
  const Dims& d = p.dims;
  const int R = p.rows, row = t * kTileRows + m;
  const LayerPtrs* L = in.layer < d.n_layers ? &p.layers[in.layer] : nullptr;
  switch (in.op) {
    case Opcode::kQkv:
      if (row < d.qkv_width) p.qkv[int64_t(n) * d.qkv_width + row] = v + (L->qkv_b ? L->qkv_b[row] : 0.f);
      break;
    case Opcode::kOProj:
      if (row < d.hidden)
        p.o_part[(int64_t(in.gemv.kslice) * R + n) * d.hidden + row] =
            v + (in.gemv.kslice == 0 && L->o_b ? L->o_b[row] : 0.f);
      break;
    case Opcode::kDenseDown: {
      float* part = (in.flags & ::ms::mk::kFlagShared) ? p.shared_part : p.dense_part;
      if (row < d.hidden) part[(int64_t(in.gemv.kslice) * R + n) * d.hidden + row] = v;
      break;
    }
    case Opcode::kLmHead:
      if (row < d.vocab) p.logits[int64_t(n) * d.vocab + row] = v * d.logit_scale;
      break;
    default:
      break;
  }
}
// kDenseGateUp: intermediate column m (0..7) of pair tile t (weight rows m:
// gate, m + 8: up) for token row n: silu(gate) x up, bf16.
__device__ __forceinline__ void gemv_store_pair(const Ctx& c, const Instruction& in, int t, int m, int n, float gate,
                                                float up) {
  const Params& p = c.p;
  const bool shared = in.flags & ::ms::mk::kFlagShared;
  const int F = shared ? p.dims.shared_ffn : p.dims.dense_ffn, col = t * ::ms::mk::kPairCols + m;
  if (col < F)
    (shared ? p.shared_act : p.dense_act)[int64_t(n) * F + col] =
        __bfloat16_as_ushort(__float2bfloat16_rn(silu_mul(gate, up)));
}

// Params::gemv_warps, a plain gemv instruction of several tiles (the
// builder's runs: kQkv by qkv_run, kOProj by o_run, kLmHead): one warp per tile
// (tile k of the instruction is warp k % 8's, which runs all of its k-steps
// and writes its outputs from its own accumulators; the other warps pass its
// ring positions), as the claim loops do, instead of the CTA on each tile
// in turn. At bs 1 a QKV tile whose weights are already in the ring takes
// ~2.7 us from its wait to its end on the CTA (0.45 to its first position,
// 1.25 of k-steps, partial sums and epilogue, 0.5-0.8 of signal): latency,
// not bytes; one warp's k-steps of a whole tile are ~1.2 us, and the tiles
// of an instruction run side by side.
__device__ __forceinline__ bool gemv_warps(Ctx& c, const Instruction& in, int K) {
  const int R = c.p.rows, lane = lane_id(), w = c.warp();
  const uint32_t b_lane = smem_u32(c.s.act) + uint32_t(min(lane & 7, R - 1) * kActStride + ((lane >> 3) & 1) * 16);
  float4* acc_slot = reinterpret_cast<float4*>(c.s.scratch) + w * 32 + lane;
  for (int k = 0; k < in.gemv.n_tiles; ++k) {
    const int t = in.gemv.tile0 + k;
    const bool mine = k % kConsumerWarps == w;
    const bool ok = warp_tile(c, t, K, mine, b_lane, acc_slot);
    if (!mine || !ok || c.drain) continue;
    // Lane (g, q) holds rows g and g + 8 of token columns 2q and 2q + 1.
    // One inlined copy of the store (it switches over the opcodes; four
    // copies were ~10 KB more of a kernel already several times the
    // instruction cache).
    const float4 a = *acc_slot;
    const int g = lane >> 2, n0 = 2 * (lane & 3);
#pragma unroll 1
    for (int i = 0; i < 4; ++i) {
      const int n = n0 + (i & 1);
      const float v = i == 0 ? a.x : i == 1 ? a.y : i == 2 ? a.z : a.w;
      if (n < R) gemv_store(c, in, t, g + (i >> 1) * 8, n, v);
    }
  }
  return true;
}

// kQkv, kOProj, kDenseGateUp, kDenseDown, kLmHead: the CTA on each tile in
// turn (tile_mma: every warp takes every 8th k-step, partial sums through
// shared memory), or one warp per tile (gemv_warps).
__device__ __forceinline__ bool op_gemv(Ctx& c, const Instruction& in) {
  const auto& g = in.gemv;
  if (c.p.gemv_warps && g.n_tiles > 1 && in.op != Opcode::kDenseGateUp) {  // the builder's runs: QKV, O, LM head
    const int K = gemv_input(c, in);
    return K > 0 && gemv_warps(c, in, K);
  }
  for (int t = g.tile0; t < g.tile0 + g.n_tiles; ++t) {
    const int buf = (t - g.tile0) & 1;
    const int K = gemv_input(c, in);  // staged once (tagged)
    if (K == 0) return false;
    tile_mma(c, t, K, buf);
    const int m = c.tid() >> 3, n = c.tid() & 7;
    if (in.op == Opcode::kDenseGateUp) {
      if (c.tid() < 64 && n < c.p.rows)
        gemv_store_pair(c, in, t, m, n, tile_sum(c, buf, m, n), tile_sum(c, buf, m + 8, n));
    } else if (c.tid() < 128 && n < c.p.rows) {
      gemv_store(c, in, t, m, n, tile_sum(c, buf, m, n));
    }
  }
  return true;
}

// kRouter (16 experts x H, fp32 input) on the tensor cores: the tile's 16
// experts are M as in tile_mma, the fp32 input rows are staged per k-chunk
// as bf16 hi = bf16(x) in columns [0, kStageCols) and lo = bf16(x - hi) in
// [kStageCols, 2 kStageCols) of the activation rows (4112 bytes hold both),
// and each k-step runs two mma with the same weight fragment. The products
// are exact in fp32 and hi + lo is x to ~2^-17 of it, so the logits are
// those of an fp32 dot product up to the order of the sums. Measured at
// 6f2416a against the CUDA-core router it replaced (lane l dotting columns
// 8 l + 256 u in fp32; more than one row read its inputs with 8-way bank
// conflicts, and a conflict-free layout for it spilled the kernel): router
// tile 4.3 -> 2.5 us after its data, bs 1 / 2 / 8 at 8K 3.449 -> 3.411,
// 4.893 -> 4.793, 11.708 -> 11.623 ms (docs/megakernel.md, round 7).
// At one row every chunk is staged at once (chunk ch in activation row ch,
// the mma's B rows all pointed at it: the other token columns repeat the
// row and are never read): one L2 round trip and barrier on the MoE's
// critical chain instead of one a chunk (round 16).
// Columns 4 q .. 4 q + 3 of a router input row as bf16 hi = bf16(x) at
// row[8 q] and lo = bf16(x - hi) at row[2 kStageCols + 8 q] (op_router's
// activation layout).
__device__ __forceinline__ void stage_hilo(unsigned char* row, int q, const float4 v) {
  const __nv_bfloat162 h0 = __floats2bfloat162_rn(v.x, v.y), h1 = __floats2bfloat162_rn(v.z, v.w);
  const float2 f0 = __bfloat1622float2(h0), f1 = __bfloat1622float2(h1);
  const __nv_bfloat162 l0 = __floats2bfloat162_rn(v.x - f0.x, v.y - f0.y),
                       l1 = __floats2bfloat162_rn(v.z - f1.x, v.w - f1.y);
  *reinterpret_cast<uint2*>(row + q * 8) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&h0), *reinterpret_cast<const uint32_t*>(&h1));
  *reinterpret_cast<uint2*>(row + kStageCols * 2 + q * 8) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&l0), *reinterpret_cast<const uint32_t*>(&l1));
}

__device__ __forceinline__ bool op_router(Ctx& c, const Instruction& in) {
  constexpr int kStepsPerWarp = kStageCols / 16 / kConsumerWarps;
  const Params& p = c.p;
  const Dims& d = p.dims;
  const int R = p.rows, H = d.hidden;
  const int second = d.parallel_block ? 0 : 1;
  const MmaLanes lanes = mma_lanes(c);
  const int n_chunks = (H + kStageCols - 1) / kStageCols;
  const bool whole = R == 1 && n_chunks <= kMaxRows;
  // whole: this lane's B address in row 0 (its token row dropped)
  const uint32_t b_row0 = lanes.b - static_cast<uint32_t>((c.lane() & 7) * kActStride);
  if (whole) {
    const ActTag tag = act_tag(kActHf, in.layer, second, 0, H, 2);
    if (tag != c.act) {
      for (int i = c.tid(); i < H / 4; i += kConsumerThreads) {
        const int ch = (4 * i) / kStageCols, q = i - ch * (kStageCols / 4);
        stage_hilo(c.s.act + ch * kActStride, q, __ldcg(reinterpret_cast<const float4*>(p.hf) + i));
      }
      consumer_sync();
      c.act = tag;
    }
  }
  for (int t = in.gemv.tile0; t < in.gemv.tile0 + in.gemv.n_tiles; ++t) {
    const int buf = (t - in.gemv.tile0) & 1;
    float hi_acc[4] = {0.f, 0.f, 0.f, 0.f}, lo_acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int ch = 0; ch < n_chunks; ++ch) {
      const int c0 = ch * kStageCols, nc = min(kStageCols, H - c0);
      const ActTag tag = act_tag(kActHf, in.layer, second, c0, nc, 1);
      if (!whole && tag != c.act) {
        // Rows past the step stay as they are: their mma columns are never read.
        for (int i = c.tid(); i < R * nc / 4; i += kConsumerThreads) {
          const int n = i / (nc / 4), q = i % (nc / 4);
          stage_hilo(c.s.act + n * kActStride, q, __ldcg(reinterpret_cast<const float4*>(p.hf + int64_t(n) * H + c0) + q));
        }
        consumer_sync();
        c.act = tag;
      }
      const bool have = c.acquire(t, ch);
      const int nks = have ? nc / 16 : 0;
      const int mine = nks > c.warp() ? (nks - c.warp() + kConsumerWarps - 1) / kConsumerWarps : 0;
      const uint32_t a_base = lanes.a + c.ring.stage() * kStageBytes;
      const uint32_t b_base = whole ? b_row0 + ch * kActStride : lanes.b;
#pragma unroll
      for (int i = 0; i < kStepsPerWarp; ++i) {
        if (i < mine) {
          uint32_t a[4], bh[2], bl[2];
          ldmatrix_x4_s(a, a_base + i * kConsumerWarps * 32);
          ldmatrix_x2_s(bh, b_base + i * kConsumerWarps * 32);
          ldmatrix_x2_s(bl, b_base + kStageCols * 2 + i * kConsumerWarps * 32);
          mma_bf16_16816(hi_acc, a, bh[0], bh[1]);
          mma_bf16_16816(lo_acc, a, bl[0], bl[1]);
        }
      }
      c.release();
      if (!whole) consumer_sync();  // every warp is done with the staged rows before the next chunk's
    }
    store_partials(c, buf, hi_acc, lo_acc);
    if (c.tid() < 128) {
      const int m = c.tid() >> 3, n = c.tid() & 7, e = t * kTileRows + m;
      if (n < R && e < d.n_experts) p.router_logits[int64_t(n) * d.n_experts + e] = tile_sum(c, buf, m, n);
    }
  }
  return true;
}

// The layer's routing plan into shared memory (claim_plan), once per claim
// instruction, after its wait on kRoute; then a consumer barrier, unless
// the caller's next barrier publishes it (sync false). Indices are clamped:
// in drain mode the plan may be anything, and it is only read, never
// followed out of bounds.
__device__ __forceinline__ void load_claim_plan(Ctx& c, int layer, bool sync = true) {
  const Params& p = c.p;
  const Dims& d = p.dims;
  ClaimPlan& cp = claim_plan(c.s);
  const int E = d.n_experts, n_sel = min(p.rows * d.top_k, kMaxSelections);
  const int na = min(static_cast<int>(__ldcg(p.counters + p.ctr.n_active(layer))), kMaxSelections);
  if (c.tid() == 0) c.s.claim_slots = max(na, 0);
  // Not gated on na: the loads go out together with na's (one L2 round trip,
  // not two); entries past na are never read.
  for (int i = c.tid(); i < n_sel; i += kConsumerThreads) {
    if (i < E) {
      cp.offset[i] = __ldcg(p.plan + 1 + E + i);
      cp.count[i] = __ldcg(p.plan + 1 + 2 * E + i);
    }
    cp.member[i] = __ldcg(p.plan + 1 + 3 * E + i);
    cp.weight[i] = __ldcg(p.topk_w + i);
  }
  if (sync) consumer_sync();
}

__device__ __forceinline__ int clamp_sel(int i) { return min(max(i, 0), kMaxSelections - 1); }

// Params::local_route: the gate/up loop's plan from this SM's loader (one
// row: slot i is the i-th routed expert ascending, its one member the
// selection lr_member[i]) once it published the layer; false: the step is
// being given up. Ends with the barrier that publishes the plan.
__device__ __forceinline__ bool local_claim_plan(Ctx& c, int layer) {
  const Params& p = c.p;
  const int K = p.dims.top_k;
  int ok = 1;
  if (c.tid() == 0) {
    const volatile int32_t* flag = &c.s.lr_layer;
    for (uint32_t it = 0; *flag != layer + 1; ++it) {
      __nanosleep(32);  // the loader warp, routing on the critical path, may share this sub-partition
      if ((it & 255) == 255 && (c.drain || aborted(p))) {
        ok = 0;
        break;
      }
    }
    __threadfence_block();
    c.s.claim_slots = K;
  }
  ClaimPlan& cp = claim_plan(c.s);
  if (!c.broadcast(ok)) {
    c.drain = true;
    return false;
  }
  for (int i = c.tid(); i < K; i += kConsumerThreads) {
    cp.offset[i] = i;
    cp.count[i] = 1;
    cp.member[i] = min(max(c.s.lr_member[i], 0), K - 1);
    cp.weight[i] = 0.f;  // the gate/up loop applies no routing weight (the down loops use kRoute's plan)
  }
  consumer_sync();
  if (c.tid() == 0) {  // the loader may now route the next layer into lr_*
    __threadfence_block();
    *reinterpret_cast<volatile int32_t*>(&c.s.lr_ack) = layer + 1;
  }
  return true;
}

// The member rows of a claimed down tile's expert slot (thread 0, before
// the barrier that publishes the tile; claim_loop_cta): rows[n] the
// selection id of member n, rows[kMaxRows + 1 / + 2] the tile's expert slot
// (clamped) and its tile within the expert (one thread divides). Members
// are selection ids s = row * K + k, at most one per row, ascending.
__device__ __forceinline__ int32_t* claim_rows(Ctx& c) {
  return reinterpret_cast<int32_t*>(c.s.scratch + kScratchBytes - 128);  // (kMaxRows + 3)
}
__device__ __forceinline__ void write_claim_rows(Ctx& c, int tile) {
  const Dims& d = c.p.dims;
  const int tpe = ::ms::mk::expert_down_tiles(d);
  const ClaimPlan& cp = claim_plan(c.s);
  const int slot = clamp_sel(tile / tpe);
  const int off = clamp_sel(cp.offset[slot]), cnt = min(cp.count[slot], kMaxRows);
  int32_t* rows = claim_rows(c);
  rows[kMaxRows + 1] = slot;
  rows[kMaxRows + 2] = tile - (tile / tpe) * tpe;
  for (int n = 0; n < cnt; ++n) rows[n] = cp.member[clamp_sel(off + n)];
}

// One claimed down tile (its rows written by write_claim_rows, published by
// the loop's barrier) with the whole CTA: the slot's 16 output rows for its
// member selections, read from the plan's shared-memory copy. The slot's
// members' moe_act rows are restaged whenever the slot changes. Its
// completion is tallied in shared memory; the claim loop signals the tally
// at its end. No barrier at the end: the next tile's publishing barrier
// comes before anything this one reads is written again (the rows, the
// activation buffer, the partial sums).
__device__ __forceinline__ void expert_down_tile(Ctx& c, const Instruction& in, int tile) {
  const Params& p = c.p;
  const Dims& d = p.dims;
  const int I = d.moe_ffn, H = d.hidden;
  const int32_t* rows = claim_rows(c);
  const int slot = rows[kMaxRows + 1], j = rows[kMaxRows + 2];
  const ClaimPlan& cp = claim_plan(c.s);
  const int off = clamp_sel(cp.offset[slot]), n_rows = min(cp.count[slot], kMaxRows);
  c.stage_act(act_tag(kActMoe, in.layer, 0, 0, I, slot + 1), p.moe_act, I, rows, n_rows, 0, I);
  const int blocks = (d.down_rows + kTileRows - 1) / kTileRows;
  if (blocks > 1 && I <= kStageCols)
    tile_mma_down(c, tile, I, ::ms::mk::expert_down_row_bytes(d), blocks);
  else
    tile_mma(c, tile, I, 0);
  {  // thread (m, n): tile row m (< 32) of member n; block m / 16 in scratch buffer m / 16
    const int m = c.tid() >> 3, n = c.tid() & 7, row = j * d.down_rows + m;
    if (m < d.down_rows && n < n_rows && row < H) {
      const int s_id = cp.member[clamp_sel(off + n)];
      p.ybuf[int64_t(s_id) * H + row] = cp.weight[clamp_sel(s_id)] * tile_sum(c, m >> 4, m & 15, n);
    }
  }
  if (c.tid() == 0) ++c.s.claim_tally[0];
}

// The down loop's waits, all at once before its first tile: every routed
// slot's gate/up tiles are done (thread t < n_active polls slot t: one round
// trip for all, instead of one per tile). The gate/up loops do not depend on
// the down loops and come first in every SM's list, so this cannot wait on
// itself. Measured (docs/megakernel.md, round 3): a win at bs 8 (~35 tiles per
// loop); at bs 1 it waits ~14 us for SMs whose loader claimed a gate/up tile
// while their consumers were still in attention (experiment claim_near).
// Relies on kFlagWait1PlusSlot, which the schedule sets on every down claim.
__device__ __forceinline__ void wait_all_slots(Ctx& c, const Instruction& in) {
  const Params& p = c.p;
  const int na = c.s.claim_slots;  // load_claim_plan's barrier made it visible
  if (c.tid() == 0) c.s.claim_fail = 0;
  consumer_sync();
  if (c.tid() < na && !c.drain &&
      !wait_counter(p, in.wait[1].counter + uint32_t(c.tid()), in.wait[1].target, c.at, 0))
    c.s.claim_fail = 1;
  consumer_sync();
  if (c.s.claim_fail) c.drain = true;
  consumer_sync();
}

// A claimed tile's member row for this lane's mma column n = lane % 8 (the
// slot's member n, or its first when it has fewer): gate/up the member's
// token row, down its selection id, clamped to the n_src staged rows.
__device__ __forceinline__ int member_row(const Ctx& c, int tile, int tpe, bool gu, int n_src) {
  const ClaimPlan& cp = claim_plan(c.s);
  const int slot = clamp_sel(tile / tpe), n = c.lane() & 7;
  const int off = clamp_sel(cp.offset[slot]), cnt = min(cp.count[slot], kMaxRows);
  const int sel = cp.member[clamp_sel(off + (n < cnt ? n : 0))];
  return min(max(gu ? sel / c.p.dims.top_k : sel, 0), n_src - 1);
}

// The claim loop with one warp per tile: tile k of the loop belongs to warp
// k % 8, which runs all of its k-steps and writes its outputs from its own
// accumulators; the other warps only pass its ring positions (wait full,
// release), so no barrier is taken per tile and up to 8 tiles are in
// progress at once. The activation rows are staged once
// before the loop (act_base, stride): gate/up every token row of h, down
// every selection's moe_act row; each lane's ldmatrix B address picks its
// mma column's member row (gate/up: the member's token row, down: its
// selection id), so a slot's members need no staging of their own.
// Header reads are warp-uniform (every lane reads the same header; the
// verdict of the waits is the warp's vote), so a warp never splits.
// Params::down_window (batch > 2, a slot's members do not fit beside the
// others'): warp w's part of a down tile's window bookkeeping (every warp
// calls it for every tile, in loop order; see Smem::win). The owner of a
// run's first tile waits until every earlier run of the region is done
// (win_done, never reset within the loop, against the warp's running total
// of those runs' tiles: a count reset per run could be read by the run
// after next before the run in between reset it; round 11 review, found by
// a model of the protocol), stages the slot's member rows there and
// publishes them; the owners of the run's other tiles wait for that.
// Returns the region's address, or 0 when the warp gave up (drain).
__device__ __forceinline__ uint32_t window_rows(Ctx& c, int tile, int tpe, bool mine, uint32_t act_base, int stride) {
  const Params& p = c.p;
  const int lane = lane_id();
  Smem::WinRun& ws = c.s.win[c.warp()];
  const int slot = clamp_sel(tile / tpe);
  if (lane == 0) {
    if (ws.run < 0 || slot != ws.slot) {  // a new run (every warp sees it at the same tile)
      if (ws.run >= 0) ws.cum[ws.run & 1] += ws.len;
      ws.len = 0;
      ++ws.run;
      ws.slot = slot;
    }
    ++ws.len;
  }
  __syncwarp();
  const int run = ws.run, r = run & 1;
  const uint32_t rows0 = act_base + uint32_t(r * kMaxRows * stride);
  if (!mine) return rows0;
  int ok = 1;
  if (lane == 0) {
    volatile int32_t* done = &c.s.win_done[r];
    volatile int32_t* tag = &c.s.win_tag[r];
    const bool first = ws.len == 1;
    const int32_t want = first ? ws.cum[r] : run + 1;  // first: every earlier run of the region done (monotonic count)
    const uint64_t t0 = global_timer();
    for (uint32_t it = 0; (first ? *done : *tag) != want; ++it) {
      __nanosleep(32);
      if ((it & 255) == 255) {
        if (aborted(p)) {
          ok = 0;
          break;
        }
        if (p.watchdog_ns && global_timer() - t0 > 2 * p.watchdog_ns) {  // as a stage wait: its cause reports first
          report(p, kErrStageTimeout, c.at, 0xffffffffu, first ? *done : *tag, want, 0);
          ok = 0;
          break;
        }
      }
    }
    __threadfence_block();  // the region's readers done (first) / its rows staged (the others)
  }
  ok = __shfl_sync(0xffffffffu, ok, 0);
  __syncwarp();
  if (!ok) return 0;
  if (ws.len == 1) {  // stage the slot's member rows, then publish them
    const ClaimPlan& cp = claim_plan(c.s);
    const int I = p.dims.moe_ffn;
    const int off = clamp_sel(cp.offset[slot]), cnt = min(cp.count[slot], kMaxRows);
    for (int n = 0; n < cnt; ++n) {
      const uint16_t* src = p.moe_act + int64_t(cp.member[clamp_sel(off + n)]) * I;
      for (int q = lane; q < I / 8; q += 32) cp_async_16(rows0 + uint32_t(n * stride + q * 16), src + q * 8);
    }
    cp_async_wait_all();
    __syncwarp();
    if (lane == 0) {
      __threadfence_block();
      *reinterpret_cast<volatile int32_t*>(&c.s.win_tag[r]) = run + 1;
    }
  }
  return rows0;
}

__device__ __forceinline__ void claim_loop_warps(Ctx& c, const Instruction& in, uint32_t act_base, int stride,
                                                 bool window = false) {
  const Params& p = c.p;
  const Dims& d = p.dims;
  const bool gu = in.op == Opcode::kExpertGateUp;
  const int I = d.moe_ffn, H = d.hidden, K = gu ? H : I;
  const int tpe = gu ? ::ms::mk::expert_gu_tiles(d) : ::ms::mk::expert_down_tiles(d);
  const int n_src = gu ? p.rows : p.rows * d.top_k;  // staged activation rows
  const ClaimPlan& cp = claim_plan(c.s);
  for (int k = 0; k < in.claim.max_claims; ++k) {
    StageHeader h;
    const bool have = __all_sync(0xffffffffu, c.acquire(Ctx::kAnyTile, 0, &h));
    const int tile = have ? h.tile : -1;
    if (tile < 0) {
      c.release();
      break;
    }
    if (p.timeline && c.tid() == 0) ++c.t_tiles;
    const int lane = lane_id(), w = c.warp();
    const bool mine = k % kConsumerWarps == w;  // else another warp's tile: pass its positions
    // This lane's B row address: its mma column's member row. The tile's
    // slot and members are read again for the epilogue (kept from here, they
    // would sit in registers through the ring waits, code at the register
    // ceiling).
    uint32_t b_lane = act_base + member_row(c, tile, tpe, gu, n_src) * stride + ((lane >> 3) & 1) * 16;
    // The warp's vote: the branches below hold full-warp shuffles.
    if (window && __any_sync(0xffffffffu, c.drain)) c.drain = true;
    if (window) {
      const uint32_t rows0 = c.drain ? 0u : window_rows(c, tile, tpe, mine, act_base, stride);
      if (rows0 == 0) {
        c.drain = true;
      } else {
        const int slot = clamp_sel(tile / tpe), n = lane & 7;
        const int cnt = max(min(cp.count[slot], kMaxRows), 1);
        b_lane = rows0 + uint32_t((n < cnt ? n : 0) * stride) + ((lane >> 3) & 1) * 16;
      }
    }
    float4* acc_slot = reinterpret_cast<float4*>(c.s.scratch) + w * 32 + lane;
    const int row_bytes = gu ? kRowBytes : ::ms::mk::expert_down_row_bytes(d);
    const int blocks = gu ? 1 : (d.down_rows + kTileRows - 1) / kTileRows;
    const bool ok = warp_tile(c, tile, K, mine && !c.drain, b_lane, acc_slot, true, row_bytes, blocks);
    if (!mine || !ok || c.drain) continue;
    // Outputs from the accumulators: lane (g, t) holds rows g, g + 8 of
    // columns (members) 2t, 2t + 1.
    const float4 acc = *acc_slot;
    const float v0 = acc.x, v1 = acc.y, v2 = acc.z, v3 = acc.w;
    const int g = lane >> 2, t2 = 2 * (lane & 3);
    const int slot = clamp_sel(tile / tpe), j = tile - (tile / tpe) * tpe;
    const int off = clamp_sel(cp.offset[slot]), cnt = min(cp.count[slot], kMaxRows);
    const int s0 = cp.member[clamp_sel(off + t2)], s1 = cp.member[clamp_sel(off + t2 + 1)];
    if (gu) {
      const int col = j * ::ms::mk::kPairCols + g;
      if (col < I) {
        if (t2 < cnt) p.moe_act[int64_t(s0) * I + col] = __bfloat16_as_ushort(__float2bfloat16_rn(silu_mul(v0, v2)));
        if (t2 + 1 < cnt)
          p.moe_act[int64_t(s1) * I + col] = __bfloat16_as_ushort(__float2bfloat16_rn(silu_mul(v1, v3)));
      }
    } else {
      // Row block b: tile rows 16 b + g and 16 b + g + 8 (those below the
      // tile's down_rows and the hidden size).
      const float wt0 = cp.weight[clamp_sel(s0)], wt1 = cp.weight[clamp_sel(s1)];
      for (int b = 0; b < blocks; ++b) {
        const float4 a = b == 0 ? acc : acc_slot[kAccBlock];
        const int m = b * kTileRows + g, row = j * d.down_rows + m;
        const bool lo = m < d.down_rows && row < H, hi = m + 8 < d.down_rows && row + 8 < H;
        if (t2 < cnt) {
          if (lo) p.ybuf[int64_t(s0) * H + row] = wt0 * a.x;
          if (hi) p.ybuf[int64_t(s0) * H + row + 8] = wt0 * a.z;
        }
        if (t2 + 1 < cnt) {
          if (lo) p.ybuf[int64_t(s1) * H + row] = wt1 * a.y;
          if (hi) p.ybuf[int64_t(s1) * H + row + 8] = wt1 * a.w;
        }
      }
    }
    if (lane == 0) atomicAdd(&c.s.claim_tally[gu ? slot : 0], 1);
    if (window) {  // this tile's reads of its region are done (the mma is in registers)
      __syncwarp();
      if (lane == 0) {
        __threadfence_block();
        atomicAdd(&c.s.win_done[c.s.win[w].run & 1], 1);
      }
    }
  }
}

// The down loop with the whole CTA on each tile (when the step's selections
// do not fit the activation buffer at once: batch > 2 of a top-8 model at
// I = 768): thread 0's reading of the header decides the tile for every
// thread, and it writes the tile's member rows before the one barrier that
// publishes both (expert_down_tile has none at its end; see there).
__device__ __forceinline__ void claim_loop_cta(Ctx& c, const Instruction& in) {
  for (int k = 0; k < in.claim.max_claims; ++k) {
    StageHeader h;
    c.acquire(Ctx::kAnyTile, 0, &h);
    if (c.tid() == 0) {
      c.s.flag = h.tile;
      if (h.tile >= 0) write_claim_rows(c, h.tile);
    }
    consumer_sync();
    const int tile = c.s.flag;
    if (tile < 0) {
      c.release();
      break;
    }
    expert_down_tile(c, in, tile);
    if (c.p.timeline && c.tid() == 0) ++c.t_tiles;
  }
}

// kExpertGateUp / kExpertDown: the claim loop (the loader claimed the tiles;
// each position's header names the tile, -1 when the queue ran out). Which
// tile is the header's reading by one thread for the CTA (claim_loop_cta)
// or by the warp's vote (claim_loop_warps): the loop's control flow never
// depends on one thread's own (possibly abandoned) wait. The tiles' signals
// are tallied and sent together at the end (one release fence per loop
// instead of one per tile): the down loops wait for every slot anyway, and
// the next norm for every down tile.
__device__ __forceinline__ bool op_claims(Ctx& c, const Instruction& in) {
  const Params& p = c.p;
  const Dims& d = p.dims;
  const bool gu = in.op == Opcode::kExpertGateUp;
  const bool local = local_route(p, in);
  if (!local) c.wait(in.wait[0].counter, in.wait[0].target);  // the routing plan is visible
  for (int i = c.tid(); i < kMaxSelections; i += kConsumerThreads) c.s.claim_tally[i] = 0;
  const uint32_t act_base = static_cast<uint32_t>(__cvta_generic_to_shared(c.s.act));
  if (gu) {
    // One warp per tile over every token row of h (the QKV tiles' staging,
    // often still there); the plan's loads and the rows' go out together
    // and one barrier publishes both.
    const ActTag tag = act_tag(kActH, in.layer, d.parallel_block ? 0 : 1, 0, d.hidden, 0);
    const bool staged = c.act == tag;
    if (local)
      local_claim_plan(c, in.layer);  // its own barrier
    else
      load_claim_plan(c, in.layer, staged);
    if (!staged) c.stage_act(tag, p.h, d.hidden, nullptr, p.rows, 0, d.hidden);
    claim_loop_warps(c, in, act_base, kActStride);
  } else {
    load_claim_plan(c, in.layer);
    // One warp per tile when every selection's moe_act row fits the
    // activation buffer at once: up to kActBytes / (2 I + 16) selections
    // (21 at I = 768: batch 1 and 2 of a top-8 model); else the whole CTA
    // on each tile.
    const int I = d.moe_ffn, n_sel = p.rows * d.top_k, stride = I * 2 + 16;
    if (n_sel * stride <= kActBytes) {
      wait_all_slots(c, in);
      c.stage_act(act_tag(kActMoe, in.layer, 0, 0, I, 1022), p.moe_act, I, nullptr, n_sel, 0, I, stride);
      claim_loop_warps(c, in, act_base, stride);
    } else if (p.down_window && I % 8 == 0 && 2 * kMaxRows * stride <= kActBytes) {
      // One warp per tile with two slots' member rows in the buffer (Smem::win).
      wait_all_slots(c, in);
      if (c.tid() == 0) {
        c.s.win_tag[0] = c.s.win_tag[1] = 0;
        c.s.win_done[0] = c.s.win_done[1] = 0;
        for (int w = 0; w < kConsumerWarps; ++w) c.s.win[w] = Smem::WinRun{-1, -1, 0, {0, 0}, {0, 0, 0}};
      }
      c.act = 0;
      consumer_sync();
      claim_loop_warps(c, in, act_base, stride, true);
    } else {
      wait_all_slots(c, in);
      claim_loop_cta(c, in);
    }
  }
  consumer_sync();
  // A down loop's failed slot wait (wait_all_slots) gives the step up for
  // every thread; a value left from an earlier loop means the step is given
  // up already.
  if (!gu && c.s.claim_fail) c.drain = true;
  if (c.tid() == 0 && !c.drain) {
    release_fence();
    const int n = gu ? c.s.claim_slots : 1;
    for (int i = 0; i < n; ++i)
      if (c.s.claim_tally[i] > 0)
        red_relaxed_add(p.counters + in.signal[0] + uint32_t(i), uint32_t(c.s.claim_tally[i]));
  }
  return true;
}

}  // namespace ms::gpu::mk
