// The loader warp: walks its SM's instruction list ahead of the consumers and
// streams every instruction's weights (and attention's K/V pages) into the
// stage ring, before the instruction's dependencies are satisfied: weights
// never depend on activations, so the next instructions' bytes are in
// flight while the consumers wait or compute. The exception is the expert
// claims, which need the layer's routing: the loader waits for kRoute, then
// takes tiles from the claim queue one at a time as ring space frees.
#pragma once

#include "gpu/mk/smem.cuh"
#include "gpu/ops/moe_route.cuh"

namespace ms::gpu::mk {

using ::ms::mk::Opcode;
static_assert(kRouteScratch == kRouteMaxK && kRouteMaxExperts == 32 * kRouteMaxPerLane,
              "local_route's limits are route_token's");

// Which global row stage row m (0..15) of a tile holds, or -1.
struct RowMap {
  enum Kind { kPlain, kPair } kind = kPlain;
  int64_t tile_row0 = 0;  // plain: first row; pair: first intermediate column
  int n_valid = 0;        // plain: rows in the matrix; pair: intermediate width F
  __device__ __forceinline__ int64_t row(int m) const {
    if (kind == kPlain) return tile_row0 + m < n_valid ? tile_row0 + m : -1;
    const int64_t i = tile_row0 + (m & 7);
    if (i >= n_valid) return -1;
    return m < 8 ? i : n_valid + i;  // gate rows [0, F), up rows [F, 2F)
  }
};

// Where a static weight tile's rows live: rows map.row(m) of a row-major
// matrix w with ld columns, columns [c0, c0 + k).
struct TileSrc {
  const uint16_t* w = nullptr;
  int ld = 0;
  RowMap map;
  int c0 = 0, k = 0;
};

// The weight tiles of the opcodes whose bytes are known from the list alone
// (not the claims, not attention): tile t of instruction `in`. False: the
// opcode streams no weights of its own.
__device__ __forceinline__ bool static_tile(const Params& p, const Instruction& in, int t, TileSrc* out) {
  const Dims& d = p.dims;
  const LayerPtrs* L = in.layer < d.n_layers ? &p.layers[in.layer] : nullptr;
  TileSrc& s = *out;
  switch (in.op) {
    case Opcode::kQkv:
      s = {L->qkv_w, d.hidden, RowMap{RowMap::kPlain, int64_t(t) * kTileRows, d.qkv_width}, 0, d.hidden};
      return true;
    case Opcode::kOProj:
      s = {L->o_w, d.q_width, RowMap{RowMap::kPlain, int64_t(t) * kTileRows, d.hidden},
           in.gemv.kslice * d.group * d.head_dim, d.group * d.head_dim};
      return true;
    case Opcode::kRouter:
      s = {L->router, d.hidden, RowMap{RowMap::kPlain, int64_t(t) * kTileRows, d.n_experts}, 0, d.hidden};
      return true;
    case Opcode::kDenseGateUp: {
      const bool shared = in.flags & ::ms::mk::kFlagShared;
      s = {shared ? L->shared_gate_up : L->gate_up, d.hidden,
           RowMap{RowMap::kPair, int64_t(t) * ::ms::mk::kPairCols, shared ? d.shared_ffn : d.dense_ffn}, 0, d.hidden};
      return true;
    }
    case Opcode::kDenseDown: {
      const bool shared = in.flags & ::ms::mk::kFlagShared;
      const int F = shared ? d.shared_ffn : d.dense_ffn;
      const ::ms::mk::RowRange cols = ::ms::mk::down_slice_cols(F, in.gemv.kslice);
      s = {shared ? L->shared_down : L->down, F, RowMap{RowMap::kPlain, int64_t(t) * kTileRows, d.hidden}, cols.begin,
           cols.end - cols.begin};
      return true;
    }
    case Opcode::kLmHead:
      s = {p.lm_head, d.hidden, RowMap{RowMap::kPlain, int64_t(t) * kTileRows, d.vocab}, 0, d.hidden};
      return true;
    default:
      return false;
  }
}

class Loader {
 public:
  __device__ Loader(const Params& p, const CUtensorMap* kv_map, Smem& s)
      : p_(p), kv_map_(kv_map), s_(s), lane_(threadIdx.x & 31), pol_(policy_evict_first()) {}

  __device__ void run() {
    const uint32_t b = p_.sm_begin[blockIdx.x], e = p_.sm_begin[blockIdx.x + 1];
    for (uint32_t i = b; i < e && ok_; ++i) {
      const Instruction in = p_.instrs[i];
      instr_ = i - b;
      at_ = site_of(instr_, in);
      issued_ = false;
      issue(in);
      if (p_.timeline && lane_ == 0 && !issued_) p_.timeline[i].issue = 0;
    }
    if (!ok_) drain();
  }

 private:
  __device__ void issue(const Instruction& in) {
    const LayerPtrs* L = in.layer < p_.dims.n_layers ? &p_.layers[in.layer] : nullptr;
    TileSrc src;
    switch (in.op) {
      case Opcode::kAttention:
        attention(in, *L);
        break;
      case Opcode::kExpertGateUp:
      case Opcode::kExpertDown:
        claims(in, *L);
        break;
      default:
        if (!static_tile(p_, in, in.gemv.tile0, &src)) break;  // no weights: norm, route, combine, barrier
        for (int t = in.gemv.tile0; t < in.gemv.tile0 + in.gemv.n_tiles && ok_; ++t) {
          static_tile(p_, in, t, &src);
          rows_tile(src.w, src.ld, src.map, src.c0, src.k, t);
        }
        break;
    }
  }

  // The step was given up: before the CTA exits, the copies already issued
  // must land (shared memory written after the CTA is gone could belong to
  // the next kernel's). Each armed position completes once its bytes arrive;
  // bounded in case memory itself is faulting.
  __device__ void drain() {
    if (lane_ != 0) return;
    const uint64_t t0 = global_timer();
    for (uint32_t q = ring_.pos > uint32_t(kStages) ? ring_.pos - kStages : 0; q < ring_.pos; ++q) {
      const Ring r = Ring::at(q);
      while (!mbar_try_wait(&s_.full[r.stage()], r.parity()) && global_timer() - t0 < 20000000ull) {
      }
    }
  }

  // Lane 0: until the consumers have started instruction `at` or a later
  // one. They get there without this warp (everything before the claim loop
  // is issued); false when the step is abandoned, or after twice the
  // watchdog (reported).
  __device__ bool wait_consumers(int32_t at) {
    const volatile int32_t* ci = &s_.consumer_instr;
    if (*ci >= at) return true;
    const uint64_t t0 = global_timer();
    for (uint32_t it = 0;; ++it) {
      __nanosleep(64);
      if (*ci >= at) return true;
      if ((it & 63) == 63) {
        if (aborted(p_)) return false;
        if (p_.watchdog_ns && global_timer() - t0 > 2 * p_.watchdog_ns) {
          report(p_, kErrStageTimeout, at_, 0xffffffffu, *ci, at, 1);
          return false;
        }
      }
    }
  }

  // Lane 0: until the consumers have acknowledged the last local plan
  // published (Smem::lr_ack == lr_layer); false when the step is abandoned,
  // or after twice the watchdog (reported).
  __device__ bool wait_ack() {
    const volatile int32_t* ack = &s_.lr_ack;
    const int32_t want = *reinterpret_cast<const volatile int32_t*>(&s_.lr_layer);
    const uint64_t t0 = global_timer();
    for (uint32_t it = 0; *ack != want; ++it) {
      __nanosleep(64);
      if ((it & 63) == 63) {
        if (aborted(p_)) return false;
        if (p_.watchdog_ns && global_timer() - t0 > 2 * p_.watchdog_ns) {
          report(p_, kErrStageTimeout, at_, 0xffffffffu, *ack, want, 1);
          return false;
        }
      }
    }
    __threadfence_block();  // the consumers' reads of the old plan before the rewrite
    return true;
  }

  // Waits for a free stage (lane 0) and broadcasts whether the step goes on.
  __device__ bool acquire(int st) {
    int ok = 1;
    if (lane_ == 0) {
      ok = wait_stage(p_, &s_.empty[st], ring_.parity() ^ 1u, at_, 1) ? 1 : 0;
      if (p_.timeline && !issued_) p_.timeline[p_.sm_begin[blockIdx.x] + instr_].issue = global_timer();
    }
    issued_ = true;
    ok = __shfl_sync(0xffffffffu, ok, 0);
    ok_ = ok != 0;
    return ok_;
  }

  __device__ void publish_header(int st, int tile, int chunk) {
    if (lane_ == 0) s_.header[st] = StageHeader{static_cast<int32_t>(instr_), tile, chunk, 0};
  }

  // One tile of n_rows (16, or up to 32 for expert down tiles) weight rows
  // (map) x columns [c0, c0 + k) of a row-major matrix with `ld` columns, as
  // ceil(k / kStageCols) stage positions, row m at m x row_bytes of the
  // stage (first_held: the first stage is already acquired).
  __device__ void rows_tile(const uint16_t* w, int ld, RowMap map, int c0, int k, int tile, bool first_held = false,
                            int n_rows = kTileRows, int row_bytes = kRowBytes) {
    const int n_chunks = (k + kStageCols - 1) / kStageCols;
    for (int ch = 0; ch < n_chunks && ok_; ++ch) {
      const int cb = c0 + ch * kStageCols, nc = min(kStageCols, c0 + k - cb);
      const int st = ring_.stage();
      if (!(ch == 0 && first_held) && !acquire(st)) return;
      const int64_t r = int(lane_) < n_rows ? map.row(lane_) : -1;
      const uint32_t valid = __ballot_sync(0xffffffffu, r >= 0);
      const uint32_t bytes = uint32_t(nc) * 2;
      publish_header(st, tile, ch);
      if (lane_ == 0) mbar_arrive_expect_tx(&s_.full[st], __popc(valid) * bytes);
      __syncwarp();
      if (r >= 0) bulk_copy(s_.stage[st] + lane_ * row_bytes, w + r * ld + cb, bytes, &s_.full[st], pol_);
      ring_.advance();
    }
  }

  // One box of an attention stage (lane < 2 x boxes per half): which rows of
  // the KV tensor map it copies and where in the stage it lands. A box wholly
  // outside [lo, pos] reads zeros (a row past the map: no HBM read, and no
  // stale table entry past the sequence's end is followed).
  struct KvBox {
    int32_t col, row;
    int dst;  // byte offset in the stage
  };
  __device__ __forceinline__ bool kv_box(const Instruction& in, const LayerPtrs& L, const ::ms::mk::SplitRange& sr,
                                         int stg, int box, KvBox* out) const {
    const Dims& d = p_.dims;
    const int hd = d.head_dim, bs = d.block_size;
    const int box_rows = bs < kStageKeys ? bs : kStageKeys, subs = kStageKeys / box_rows;
    const int per_half = kv_slices(hd) * subs;  // boxes for K (and again for V)
    if (box >= 2 * per_half) return false;
    const int v = box / per_half, rest = box % per_half, cs = rest / subs, sub = rest % subs;
    const int key = stg * kStageKeys + sub * box_rows;
    const int page = key / bs, slot = key % bs;
    const bool needed = key <= sr.pos && key + box_rows > sr.lo;
    const int32_t* table = p_.tables + (int64_t(in.attn.row) * p_.n_groups + L.kv_group) * p_.table_stride;
    const int32_t blk = needed && page < p_.table_stride ? table[page] : -1;
    const int64_t row0 = v ? L.v_row0 : L.k_row0;
    const int64_t row = blk >= 0 ? row0 + (int64_t(blk) * d.n_kv_heads + in.attn.kv_head) * bs + slot : p_.kv_rows;
    *out = {cs * 64, static_cast<int32_t>(row), v * kv_half_bytes(hd) + cs * kv_slice_bytes(hd) + sub * box_rows * kv_row_bytes(hd)};
    return true;
  }
  __device__ __forceinline__ ::ms::mk::SplitRange split_of(const Instruction& in) const {
    const int pos = p_.meta->pos[in.attn.row];
    const int window = p_.layer_info[in.layer].sliding ? p_.dims.sliding_window : 0;
    return ::ms::mk::split_range(pos, window, in.attn.split, in.attn.n_splits);
  }
  __device__ __forceinline__ uint32_t kv_stage_bytes() const { return 2u * kStageKeys * p_.dims.head_dim * 2; }

  // K and V of the split's key stages, one ring position per 64 keys.
  __device__ void attention(const Instruction& in, const LayerPtrs& L) {
    const ::ms::mk::SplitRange sr = split_of(in);
    const uint32_t bytes = kv_stage_bytes();
    for (int stg = sr.stage_begin; stg < sr.stage_end && ok_; ++stg) {
      const int st = ring_.stage();
      if (!acquire(st)) return;
      publish_header(st, 0, stg);
      if (lane_ == 0) mbar_arrive_expect_tx(&s_.full[st], bytes);
      __syncwarp();
      KvBox b;
      if (kv_box(in, L, sr, stg, lane_, &b)) tensor_copy_2d(s_.stage[st] + b.dst, kv_map_, b.col, b.row, &s_.full[st], pol_);
      ring_.advance();
    }
  }

  // Claim loop: wait for the routing, then take tiles until the queue is
  // empty or max_claims are taken, each only once a stage is free for it (a
  // busy SM does not hoard tiles that idle SMs could run); an empty queue is
  // told to the consumers by a position without data whose header tile is -1.
  __device__ void claims(const Instruction& in, const LayerPtrs& L) {
    const Dims& d = p_.dims;
    const bool gu = in.op == Opcode::kExpertGateUp;
    const bool local = local_route(p_, in);
    int ok = 1;
    if (lane_ == 0)
      ok = (local ? wait_counter(p_, p_.ctr.router(in.layer), ::ms::mk::router_tiles(d), at_, 1)
                  : wait_counter(p_, in.wait[0].counter, in.wait[0].target, at_, 1))
               ? 1
               : 0;
    ok_ = __shfl_sync(0xffffffffu, ok, 0) != 0;
    if (!ok_) return;
    __syncwarp();  // lane 0's acquire ordered before every lane's reads of the plan / logits
    // The layer's queue size (kept per layer: the shared plan is rewritten
    // by the next layer's route) and the plan's slot -> expert list (once
    // per claim instruction, not an L2 round trip per tile), every load
    // issued before any result is used: one round trip, before the claim
    // gate, while the consumers may still be on their way (round 9: with
    // the reads after the gate, gate/up's first data came ~0.5 us later at
    // bs 1). Entries past the queue's size are never read.
    int n_active = 0;
    if (local) {
      // The consumers must have copied the previous local plan before it is
      // rewritten (they ack it after their copy; with the claim gates off a
      // loader can reach the next layer's loop first).
      int acked = 1;
      if (lane_ == 0) acked = wait_ack() ? 1 : 0;
      ok_ = __shfl_sync(0xffffffffu, acked, 0) != 0;
      if (!ok_) return;
      // The layer's routing of the one row, as kRoute computes it: top-k by
      // route_token (the ids alone: the gate/up loop applies no weights; the
      // down loops take kRoute's plan), the routed experts ascending
      // (distinct within a row), one member each. Published to the
      // consumers once written. The logits are read microseconds after the
      // router tiles land; the next layer's router overwrites them only
      // after this layer's whole MoE (the same assumption as the global
      // plan's read below, which the next layer's kRoute rewrites).
      __syncwarp();
      route_token(p_.router_logits, 0, d.n_experts, d.top_k, d.router_sigmoid, d.softmax_over_topk, d.norm_topk_prob,
                  nullptr, nullptr, s_.lr_val, s_.lr_id, /*ids_only=*/true);
      __syncwarp();
      const int K = d.top_k;
      if (int(lane_) < K) {
        const int id = s_.lr_id[lane_];
        int rank = 0;
        for (int j = 0; j < K; ++j) rank += s_.lr_id[j] < id;
        s_.lr_member[rank] = int(lane_);
        s_.loader_expert[rank] = id;
      }
      __syncwarp();
      if (lane_ == 0) {
        __threadfence_block();
        *reinterpret_cast<volatile int32_t*>(&s_.lr_layer) = int32_t(in.layer) + 1;
      }
      n_active = K;
    } else {
      constexpr int kPer = (kMaxSelections + 31) / 32;
      const int n_list = min(d.n_experts, kMaxSelections);
      const int na_raw = lane_ == 0 ? int(__ldcg(p_.counters + p_.ctr.n_active(in.layer))) : 0;
      int ex[kPer];
#pragma unroll
      for (int u = 0; u < kPer; ++u) ex[u] = lane_ + 32 * u < n_list ? __ldcg(p_.plan + 1 + lane_ + 32 * u) : 0;
#pragma unroll
      for (int u = 0; u < kPer; ++u)
        if (lane_ + 32 * u < n_list) s_.loader_expert[lane_ + 32 * u] = ex[u];
      __syncwarp();
      n_active = __shfl_sync(0xffffffffu, na_raw, 0);
    }
    // The instruction's static tiles (ClaimFields: placed by the builder,
    // tiles every routing has) go first, as soon as the routing is known and
    // a stage is free, without atomics or the claim gate; then the claimed
    // ones, from queue index static_total on.
    // The claim gate: no tile is claimed while the consumers are more than
    // `gate` instructions before the loop (they would hold it, and with
    // it every wait on its expert, until they get here: docs/megakernel.md,
    // round 4).
    const int gate = gu ? p_.gate_gu : p_.gate_down;
    // Tiles are claimed in runs of `batch` consecutive ones (one atomic a run;
    // a run stays inside one expert when batch divides its tiles, so the
    // consumers stage its activation once), one run ahead: the next run's
    // atomic is in flight while the current run's last tile is issued. A
    // claimed tile is always loaded: the loop ends only on an empty queue (no
    // run pending) or once max_claims tiles were taken (the runs are cut to
    // fit), so every tile of the queue is run by whoever took it.
    const int batch = max(1, gu ? p_.claim_batch_gu : p_.claim_batch_down);
    const int max_claims = in.claim.max_claims, n_static = in.claim.static_n;
    const int max_claimed = max_claims - n_static;
    int next = 0, next_n = 0, taken = 0;  // lane 0: the pending run and the tiles claimed so far
    const uint32_t claim_ctr = gu ? p_.ctr.gu_claim(in.layer) : p_.ctr.down_claim(in.layer);
    auto take_run = [&]() {
      next_n = min(batch, max_claimed - taken);
      if (next_n > 0) next = in.claim.static_total + static_cast<int>(atomicAdd(p_.counters + claim_ctr, uint32_t(next_n)));
      taken += next_n;
    };
    const int tpe = gu ? ::ms::mk::expert_gu_tiles(d) : ::ms::mk::expert_down_tiles(d);
    const int n_tiles = n_active * tpe;
    int cur = 0, have = 0;  // the run being issued (every lane)
    for (int c = 0; c < max_claims && ok_; ++c) {
      if (c == n_static) {  // the claimed part: the gate, then the first run
        if (gate >= 0) {
          int near = 1;
          if (lane_ == 0) near = wait_consumers(static_cast<int32_t>(instr_) - gate) ? 1 : 0;
          ok_ = __shfl_sync(0xffffffffu, near, 0) != 0;
          if (!ok_) return;
        }
        // A run past the queue's end is a terminator (below), whatever the size.
        if (lane_ == 0) take_run();
      }
      const int st = ring_.stage();
      if (!acquire(st)) return;
      int t = in.claim.static_tile0 + c;
      if (c >= n_static) {
        if (have == 0) {
          cur = __shfl_sync(0xffffffffu, next, 0);
          have = __shfl_sync(0xffffffffu, next_n, 0);
        }
        t = cur;
        if (have == 0 || t >= n_tiles) {
          publish_header(st, -1, 0);
          if (lane_ == 0) mbar_arrive(&s_.full[st]);
          ring_.advance();
          return;
        }
        ++cur;
        if (--have == 0 && lane_ == 0) take_run();
      }
      const int slot = t / tpe, j = t % tpe;
      const int e = s_.loader_expert[min(slot, kMaxSelections - 1)];
      if (gu) {
        const uint16_t* w = L.experts_gate_up + int64_t(e) * 2 * d.moe_ffn * d.hidden;
        rows_tile(w, d.hidden, RowMap{RowMap::kPair, int64_t(j) * ::ms::mk::kPairCols, d.moe_ffn}, 0, d.hidden, t,
                  true);
      } else {
        const uint16_t* w = L.experts_down + int64_t(e) * d.hidden * d.moe_ffn;
        rows_tile(w, d.moe_ffn, RowMap{RowMap::kPlain, int64_t(j) * d.down_rows, d.hidden}, 0, d.moe_ffn, t, true,
                  d.down_rows, ::ms::mk::expert_down_row_bytes(d));
      }
    }
  }

  const Params& p_;
  const CUtensorMap* kv_map_;
  Smem& s_;
  const uint32_t lane_;
  const uint64_t pol_;
  Ring ring_;
  uint32_t instr_ = 0;
  InstrSite at_;
  bool ok_ = true;
  bool issued_ = false;  // timeline: this instruction's first position was acquired
};

}  // namespace ms::gpu::mk
