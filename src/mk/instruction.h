// The megakernel's instruction format: one header shared by the schedule
// builder (host), the CPU interpreter (src/ref/mk_vm), the device kernel
// (src/gpu/mk/) and the tests, so there is exactly one definition of the
// layout (STYLE.md: never two hand-kept copies).
//
// A decode step is a list of instructions per SM. Every instruction names
// what it computes (opcode, layer, opcode-specific fields), the dependency
// counters it waits on before it reads its inputs, and the counters it
// increments when its outputs are written. Weights never depend on
// activations, so the device's loader warp streams an instruction's weight
// tiles before the wait is satisfied (docs/megakernel.md).
//
// Plain C++ (no CUDA headers): the device includes it through MS_HD.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MS_HD __host__ __device__ __forceinline__
#else
#define MS_HD inline
#endif

namespace ms::mk {

// ---- Geometry shared by every opcode ----
// Rows (tokens) of a decode step the megakernel takes: the N of the swap-AB
// tensor-core tiles (mma m16n8k16: weights are the 16 M rows, tokens the 8 N).
constexpr int kMaxRows = 8;
// Output rows of one weight tile (the M of one mma) and columns of one
// shared-memory stage: a stage holds 16 weight rows x up to 1024 columns
// (32 KB bf16), each row copied by its own bulk copy into a padded row so the
// ldmatrix rows of a warp hit distinct banks.
constexpr int kTileRows = 16;
constexpr int kStageCols = 1024;
// Keys of one attention stage (K and V of 64 consecutive positions).
constexpr int kStageKeys = 64;
// Longest activation row an instruction loads into shared memory (hidden
// size, O-projection slice, expert width, dense-down slice); longer rows are
// split into k-slices whose partial sums the consumer adds.
constexpr int kMaxActCols = 2048;
// Bytes of one ring stage (gpu/mk/smem.cuh; its padded 16 rows of
// kStageCols columns fit, and the K and V of kStageKeys keys at head_dim 128).
constexpr int kStageBytes = 33792;
// Attention splits per (row, KV head) at most (partial-output workspace).
constexpr int kMaxSplits = 64;
// Experts a token picks at most, and so the routing selections of a step
// (rows x top_k: the claim loops keep the plan's copy in shared memory).
constexpr int kMaxTopK = 32;
constexpr int kMaxSelections = kMaxRows * kMaxTopK;
// Rows a norm adds to the residual at most (O-projection slices, the FFN's
// selections or down slices, the shared expert's down slices): kNorm keeps
// their addresses in shared memory.
constexpr int kMaxNormSources = 64;

// ---- Opcodes ----
// Fields used by each opcode are listed next to it; see Instruction below.
enum class Opcode : uint16_t {
  kNop = 0,
  // rows.row: residual update of the layer's input + norm (one row).
  // Layer 0: x = embedding row of the token. Otherwise x += the previous
  // layer's outputs (parallel blocks) or this layer's attention output
  // (the second norm of sequential blocks, flag kNormSecond). Writes x (fp32),
  // h (bf16, matmul input) and hf (fp32, router input).
  kNorm = 1,
  // gemv: QKV weight-row tiles [tile0, tile0 + n_tiles) of the fused
  // (q | k | v) matrix, all inside one KV group's rows; qkv (fp32) = h W^T (+ bias).
  kQkv = 2,
  // attn: one (row, kv_head, split of n_splits) of paged attention over the
  // row's keys; q/k norm + RoPE applied here; the last non-empty split adds
  // the new token's key and writes its K/V into the cache. Writes a partial
  // (o, lse) per query head of the group.
  kAttention = 3,
  // attn: merges the n_splits partials of (row, kv_head) -> attn_out (bf16).
  kAttnCombine = 4,
  // gemv: O-projection output-row tiles over the k-slice of KV group
  // `kslice` (its G heads) -> o_part[kslice] (fp32), summed by the next norm.
  kOProj = 5,
  // gemv: router logit tiles (experts) from hf (fp32 input as bf16 hi + lo, tensor cores).
  kRouter = 6,
  // (none): top-k of every row, the routing plan (routed experts ascending,
  // their members) and the sizes of the two claim queues.
  kRoute = 7,
  // claim: up to max_claims tiles of the gate/up queue (a static range
  // first, then claimed ones: ClaimFields), each
  // (expert slot, 8 intermediate columns: 8 gate rows + 8 up rows) ->
  // moe_act (bf16) = silu(gate) * up for the expert's member rows.
  kExpertGateUp = 8,
  // claim: up to max_claims tiles of the down queue, each (expert slot,
  // 16 output rows) -> ybuf (fp32) = weight * act W_down^T per member.
  kExpertDown = 9,
  // gemv: dense FFN (or shared expert: flag kShared) gate/up pair tiles
  // [tile0, tile0 + n_tiles), 8 intermediate columns each -> dense_act (bf16).
  kDenseGateUp = 10,
  // gemv: dense FFN (or shared expert) down output-row tiles over k-slice
  // `kslice` of the intermediate -> ffn_part[kslice] (fp32).
  kDenseDown = 11,
  // rows.row: residual update after the last layer + final norm -> h (bf16).
  kFinalNorm = 12,
  // gemv: LM-head vocabulary tiles -> logits (fp32, times logit_scale).
  kLmHead = 13,
  // (none): waits only (ablation: a grid-wide barrier made of counters).
  kBarrier = 14,
};
constexpr int kNumOpcodes = 15;

const char* opcode_name(Opcode op);

// Counter id meaning "no counter".
constexpr uint32_t kNoCounter = 0xffffffffu;

// Instruction flags.
enum InstrFlags : uint16_t {
  kFlagNone = 0,
  // kNorm of a sequential block: the second norm (before the FFN), which adds
  // this layer's attention output; without it a kNorm adds the previous
  // layer's outputs.
  kFlagNormSecond = 1u << 0,
  // kDenseGateUp / kDenseDown: the shared expert of an MoE layer (weights
  // and activation buffers of the shared expert, not the dense FFN's).
  kFlagShared = 1u << 1,
  // kExpertDown: wait[1].counter is the base of the per-expert "gate/up
  // done" counters; a claimed tile needs base + its expert slot. The kernel
  // waits on base + every routed slot before the loop's first tile
  // (stricter); the execution model (machine.cpp) checks the per-tile need.
  kFlagWait1PlusSlot = 1u << 2,
};

// Waits compare as signed 32-bit numbers: kRoute adds 1 - (routed experts x
// down tiles per expert) to the layer's "down done" counter when it knows
// the routing, so the next norm waits on a static target (the shared
// expert's down instructions + 1) although the number of routed experts is
// only known on the device.
struct Wait {
  uint32_t counter;  // kNoCounter: none
  int32_t target;    // proceed once (int32) counter >= target
};

// Opcode-specific fields (the union member the opcode names above).
struct GemvFields {
  int32_t tile0;    // first tile
  int32_t n_tiles;  // tiles in this instruction
  int32_t kslice;   // k-slice index (kOProj: KV group; kDenseDown: slice)
  int32_t reserved;
};
struct AttnFields {
  int32_t row;
  int32_t kv_head;
  int32_t split;     // kAttention only
  int32_t n_splits;
};
struct RowFields {
  int32_t row;
  int32_t reserved[3];
};
// A claim instruction's tiles: first the static range [static_tile0,
// static_tile0 + static_n) of the queue (placed by the builder: the first
// static_total tiles exist whatever the routing, ScheduleOptions::static_pct),
// then claimed ones, taken from queue index static_total on, up to
// max_claims tiles in all.
struct ClaimFields {
  int32_t max_claims;  // tiles this instruction may run (static ones included)
  int32_t static_tile0;
  int32_t static_n;
  int32_t static_total;  // the layer's statically placed tiles of this queue (the same in every instruction)
};

struct Instruction {
  Opcode op = Opcode::kNop;
  uint16_t layer = 0;
  uint16_t flags = 0;
  uint16_t reserved0 = 0;
  union {
    GemvFields gemv;
    AttnFields attn;
    RowFields rows;
    ClaimFields claim;
    int32_t raw[4];
  };
  Wait wait[2] = {{kNoCounter, 0}, {kNoCounter, 0}};
  // Counters incremented by one when the instruction's outputs are visible.
  // kExpertGateUp signals signal[0] + expert slot per tile (the per-expert
  // "gate/up done" counters); kExpertDown signals signal[0] once per tile.
  uint32_t signal[2] = {kNoCounter, kNoCounter};
  uint32_t reserved1[4] = {};

  Instruction() : raw{0, 0, 0, 0} {}
};
static_assert(sizeof(Instruction) == 64, "the instruction is four 16-byte loads");
static_assert(sizeof(GemvFields) == 16 && sizeof(AttnFields) == 16 && sizeof(RowFields) == 16 &&
              sizeof(ClaimFields) == 16);

}  // namespace ms::mk
