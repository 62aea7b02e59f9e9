// Shared memory of one megakernel CTA and the stage ring between the loader
// warp and the consumer warps.
//
// Ring: kStages stages of kStageBytes. The loader fills stage positions in
// instruction order (weights of tiles, K/V of attention stages, claimed
// expert tiles), each completing on its "full" mbarrier by transaction
// bytes; every consumer warp waits on every position's full barrier (also
// positions it does not read, so no warp runs a ring cycle ahead) and
// arrives on its "empty" barrier (count: the consumer warps). The loader
// waits "empty" before refilling. Positions carry a header (instruction
// index, tile) that the consumers check against their own walk.
//
// Weight stage: 16 rows x up to kStageCols bf16 columns, row m at m *
// kRowBytes (padded by 16 bytes so the 8 row addresses of an ldmatrix hit
// 8 different bank groups). KV stage: K then V, each in the tensor map's
// swizzled layout (see kv_chunk_offset).
#pragma once

#include <cstdint>

#include "gpu/mk/sync.cuh"

namespace ms::gpu::mk {

using ::ms::mk::kMaxActCols;
using ::ms::mk::kMaxRows;
using ::ms::mk::kStageCols;
using ::ms::mk::kStageKeys;
using ::ms::mk::kTileRows;

constexpr int kStages = 5;
constexpr int kRowBytes = kStageCols * 2 + 16;  // 2064
using ::ms::mk::kStageBytes;  // 33 KB, a multiple of 1024 (swizzle alignment)
static_assert(kStageBytes % 1024 == 0);
static_assert(kTileRows * kRowBytes <= kStageBytes);
static_assert(2 * kStageKeys * 128 * 2 <= kStageBytes, "K and V of 64 keys at head_dim 128");
// Activation rows staged for the tensor cores (bf16, up to kMaxActCols) or
// the router (fp32, up to kStageCols per k-chunk).
constexpr int kActStride = kMaxActCols * 2 + 16;  // 4112 bytes
constexpr int kActBytes = kMaxRows * kActStride;
static_assert(kActStride >= kStageCols * 4 + 16);
constexpr int kScratchBytes = 17408;  // reductions, attention q prep and merge
using ::ms::mk::kMaxSelections;
constexpr int kRouteScratch = 32;      // top-k of one row at most (gpu/ops/moe_route.cuh's kRouteMaxK)
constexpr int kRouteMaxExperts = 256;  // route_token's experts at most

// The claim loops' copy of the layer's routing plan (kRoute's moe_plan_view:
// per routed-expert slot its members' offset and count, the members'
// selection ids, and every selection's combine weight), read once per claim
// instruction instead of from L2 on every tile. It lives in the consumers'
// scratch after the two tile-sum buffers (float [2][warps][16 x 8]).
struct ClaimPlan {
  int32_t offset[kMaxSelections];
  int32_t count[kMaxSelections];
  int32_t member[kMaxSelections];
  float weight[kMaxSelections];
};
constexpr int kClaimPlanOffset = 2 * kConsumerWarps * 128 * 4;
static_assert(kClaimPlanOffset + sizeof(ClaimPlan) <= kScratchBytes - 128, "below the member rows and block_sum");

struct StageHeader {
  int32_t instr;  // instruction index in the SM's list
  int32_t tile;   // tile of the instruction (claims: the claimed tile, -1: queue empty)
  int32_t chunk;  // k-chunk or attention stage
  int32_t pad;
};

// Params::async_signal: the consumers' thread 0 posts an instruction's
// counter signals into a ring of kSigSlots entries (sig_full completes when
// one is written, sig_empty when the signal warp has released it); the
// signal warp fences once for every entry it has taken (release is
// cumulative: the consumers' barrier and the arrive order their stores
// before it) and adds. A counter kSigExit ends the signal warp.
constexpr int kSigSlots = 8;
constexpr uint32_t kSigExit = 0xfffffffeu;
struct SigEntry {
  uint32_t counter[2];  // kNoCounter: none
  uint32_t add[2];
};

struct Smem {
  unsigned char stage[kStages][kStageBytes];
  unsigned char act[kActBytes];
  unsigned char scratch[kScratchBytes];
  uint64_t full[kStages];
  uint64_t empty[kStages];
  StageHeader header[kStages];
  int32_t flag;          // consumer broadcast (abort, skip)
  int32_t claim_fail;    // a claim loop's up-front waits: some thread's wait was abandoned
  int32_t claim_slots;   // the claim loop's layer: routed expert slots (load_claim_plan)
  int32_t consumer_instr;  // the consumers' current instruction (thread 0 writes it; the loader reads it)
  // A claim loop's finished tiles per expert slot (gate/up) or in all (down,
  // entry 0), signalled together when the loop ends.
  int32_t claim_tally[kMaxSelections];
  int32_t loader_expert[kMaxSelections];  // the loader's claim loop: slot -> expert of the layer's plan
  // Params::local_route (batch 1): the loader's own routing of the layer for
  // its gate/up loop, handed to the consumers (published by lr_layer =
  // layer + 1): route_token's scratch (lr_id: the chosen experts in
  // selection order) and slot -> selection.
  float lr_val[kRouteScratch];
  int32_t lr_id[kRouteScratch];
  int32_t lr_member[kRouteScratch];
  int32_t lr_layer;
  int32_t lr_ack;  // the consumers have copied the plan of layer lr_ack - 1 (the loader may rewrite lr_*)
  // Params::down_window (batch > 2): the down loop's two activation regions
  // of one expert slot's member rows each. Run c of the loop (consecutive
  // tiles of one slot) uses region c % 2: win_tag[r] = c + 1 once its rows
  // are staged, win_done[r] counts the region's tiles done in this loop (it
  // is free for run c + 2 once the count covers every earlier run of it).
  // win[w]: warp w's copy of the run bookkeeping (every warp sees every
  // header, so all agree).
  int32_t win_tag[2];
  int32_t win_done[2];
  struct WinRun {
    int32_t run, slot, len, cum[2], pad[3];  // cum[r]: tiles of the finished runs of region r
  } win[kConsumerWarps];
  SigEntry sig[kSigSlots];
  uint64_t sig_full[kSigSlots];
  uint64_t sig_empty[kSigSlots];
  uint32_t sig_pos;  // consumer thread 0's next entry (in shared memory: no register held across the list)
};
// Params::local_route: this SM's gate/up loop routes the layer itself (one
// row: the loader warp runs route_token on the router's logits and sorts the
// routed experts, the plan kRoute builds for one row, into Smem::lr_*) and
// its consumers take that plan instead of waiting for kRoute.
__device__ __forceinline__ bool local_route(const Params& p, const ::ms::mk::Instruction& in) {
  return p.local_route && p.rows == 1 && in.op == ::ms::mk::Opcode::kExpertGateUp &&
         p.dims.top_k <= kRouteScratch && p.dims.n_experts <= kRouteMaxExperts;
}

// Dynamic shared memory requested: the struct plus room to align it to 1024.
constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
static_assert(kSmemBytes <= 232448, "the sm_90 opt-in shared memory limit per block");

// A role's cursor over the ring's positions: the position, and its stage
// and phase parity kept as it advances (pos % 5 and pos / 5 on every use
// were a visible share of the consumers' per-stage instructions).
struct Ring {
  uint32_t pos = 0;
  int st = 0;
  uint32_t ph = 0;
  __device__ static Ring at(uint32_t q) {
    Ring r;
    r.pos = q;
    r.st = static_cast<int>(q % kStages);
    r.ph = (q / kStages) & 1u;
    return r;
  }
  __device__ __forceinline__ int stage() const { return st; }
  __device__ __forceinline__ uint32_t parity() const { return ph; }
  __device__ __forceinline__ void advance() {
    ++pos;
    if (++st == kStages) {
      st = 0;
      ph ^= 1u;
    }
  }
};

// ---- KV stage layout (the tensor map's swizzle) ----
// A K (or V) stage holds 64 keys of head_dim hd: hd / 64 slices of 64 keys x
// 128 bytes (hd 64, 128; 128-byte swizzle) or one slice of 64 keys x 64
// bytes (hd 32; 64-byte swizzle). 16-byte chunk c of key j lives at
//   slice(c) base + j * row_bytes + ((c % cpr) ^ swz(j)) * 16
// with cpr = 16-byte chunks per row (8 or 4), swz(j) = j % 8 (128B) or
// (j / 2) % 4 (64B): the XOR of the address bits [4, 7) with bits [7, 10)
// (128B) or [4, 6) with [7, 9) (64B) that the copy engine applies.
__device__ __forceinline__ int kv_row_bytes(int hd) { return hd >= 64 ? 128 : 64; }
__device__ __forceinline__ int kv_slices(int hd) { return hd >= 64 ? hd / 64 : 1; }
__device__ __forceinline__ int kv_slice_bytes(int hd) { return kStageKeys * kv_row_bytes(hd); }
__device__ __forceinline__ int kv_half_bytes(int hd) { return kv_slices(hd) * kv_slice_bytes(hd); }  // K or V
__device__ __forceinline__ int kv_chunk_offset(int hd, int key, int chunk) {
  const int cpr = kv_row_bytes(hd) / 16;
  const int slice = chunk / cpr, c = chunk % cpr;
  const int swz = hd >= 64 ? (key & 7) : ((key >> 1) & 3);
  return slice * kv_slice_bytes(hd) + key * kv_row_bytes(hd) + ((c ^ swz) << 4);
}

__device__ __forceinline__ ClaimPlan& claim_plan(Smem& s) {
  return *reinterpret_cast<ClaimPlan*>(s.scratch + kClaimPlanOffset);
}

// The 1024-aligned Smem inside the dynamic shared memory. Pointer arithmetic
// on `raw` (not a round trip through an integer) keeps it a shared-memory
// pointer to the compiler, so every field access is ld / st.shared with
// 32-bit addresses: through uintptr_t all of them were generic (PTX at
// 1e88cb3: 973 generic loads, 0 ld.shared; SASS LD.E / ST.E with 64-bit
// addresses), 167 -> 155 registers.
__device__ __forceinline__ Smem& smem_of(unsigned char* raw) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  return *reinterpret_cast<Smem*>(raw + ((1024u - (a & 1023u)) & 1023u));
}

}  // namespace ms::gpu::mk
