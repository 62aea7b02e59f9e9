// The megakernel's launch parameters and the device-side tables the
// executor fills once (per-layer weight pointers) or per step (metadata):
// plain structs shared by the host executor and the kernel.
#pragma once

#include <cstdint>

#include "mk/counters.h"
#include "mk/dims.h"
#include "mk/instruction.h"

namespace ms::gpu::mk {

using ::ms::mk::CounterLayout;
using ::ms::mk::Dims;
using ::ms::mk::Instruction;
using ::ms::mk::LayerInfo;

// One layer's weights on the device (DeviceModel's buffers; null where the
// layer has none) and its KV caches as rows of the pool's tensor map.
struct LayerPtrs {
  const uint16_t* qkv_w = nullptr;   // (qkvw, H) bf16
  const float* qkv_b = nullptr;      // (qkvw)
  const uint16_t* o_w = nullptr;     // (H, qw)
  const float* o_b = nullptr;        // (H)
  const float* attn_norm = nullptr;  // (H)
  const float* ffn_norm = nullptr;   // (H), sequential blocks
  const float* q_norm = nullptr;     // (hd)
  const float* k_norm = nullptr;     // (hd)
  const uint16_t* gate_up = nullptr;     // dense (2F, H)
  const uint16_t* down = nullptr;        // dense (H, F)
  const uint16_t* router = nullptr;      // (E, H)
  const uint16_t* experts_gate_up = nullptr;  // (E, 2I, H)
  const uint16_t* experts_down = nullptr;     // (E, H, I)
  const uint16_t* shared_gate_up = nullptr;   // (2S, H)
  const uint16_t* shared_down = nullptr;      // (H, S)
  uint16_t* k_cache = nullptr;  // (blocks, nkv, block_size, hd) bf16, for the new token's write
  uint16_t* v_cache = nullptr;
  int64_t k_row0 = 0;  // first row of this layer's K cache in the KV tensor map (pool elements / hd)
  int64_t v_row0 = 0;
  int32_t kv_group = 0;  // block-table group of the layer
  int32_t reserved = 0;
};

// Per-step metadata (pinned on the host, copied before each launch).
struct StepMeta {
  int32_t tokens[::ms::mk::kMaxRows];
  int32_t pos[::ms::mk::kMaxRows];  // position of each row's new token
};

// The first wait that timed out (all zero while none did).
struct MkError {
  uint32_t code;  // 0: none; 1: counter wait timed out; 2: stage wait timed out; 3: bad instruction
  uint32_t sm, instr, opcode, layer, counter;
  int32_t value, target;
  uint32_t role;  // 0: consumer, 1: loader
  uint32_t reserved[7];
};
static_assert(sizeof(MkError) == 64);

// Per-instruction times of one step (optional), globaltimer ns. Consumers:
// the instruction's start, when its waits were satisfied, when its first
// ring position was full (0: it reads none; norms and routes mark a point
// inside them instead: sources summed, top-k done), its end, the tiles it
// ran (claims: the tiles it took; weight streams: n_tiles), and its stall:
// ns spent waiting on full ring positions after the first one (large: the
// instruction is loader-bound), and when its work was done and its signal
// began (ns after start: end minus that is the signal's barrier and
// release). Loader: when it had ring space for the instruction's first
// position and issued its copies (0: it loads nothing). Each role writes
// only its own fields.
struct TimelineEntry {
  uint64_t start, ready, data, end;
  uint64_t issue;
  uint16_t opcode, layer;
  uint32_t tiles;
  uint32_t stall;
  uint32_t presignal;
};
static_assert(sizeof(TimelineEntry) == 56);

struct Params {
  // Instruction lists: SM s runs instrs[sm_begin[s], sm_begin[s + 1]).
  const Instruction* instrs = nullptr;
  const uint32_t* sm_begin = nullptr;
  int32_t n_sm = 0;
  int32_t rows = 0;  // decode rows of this schedule
  Dims dims;
  CounterLayout ctr;
  const LayerInfo* layer_info = nullptr;  // (n_layers)
  const LayerPtrs* layers = nullptr;      // (n_layers)
  const uint16_t* embed = nullptr;        // (V, H) bf16
  const uint16_t* lm_head = nullptr;      // (V, H) bf16 (the embedding when tied)
  const float* final_norm = nullptr;      // (H)
  const float* inv_freq = nullptr;        // (hd / 2)
  // Step inputs.
  const StepMeta* meta = nullptr;
  const int32_t* tables = nullptr;  // (kMaxRows, groups, table_stride) physical block ids, -1: none
  int32_t table_stride = 0;         // entries per (row, group)
  int32_t n_groups = 0;             // group stride of `tables`
  int64_t kv_rows = 0;              // rows of the KV tensor map (a row index past it loads zeros)
  // Counters: this step's bank (words() entries) and the bank to zero.
  uint32_t* counters = nullptr;
  uint32_t* counters_next = nullptr;
  int32_t bank_words = 0;  // words per bank (the largest layout): all of the next bank is zeroed
  // Step buffers (device), shapes as in ref/mk_vm.h's Step.
  float* x = nullptr;               // (R, H)
  uint16_t* h = nullptr;            // (R, H) bf16
  float* hf = nullptr;              // (R, H)
  float* qkv = nullptr;             // (R, qkvw)
  float* part_o = nullptr;          // (R, nh, max_splits, hd)
  float* part_lse = nullptr;        // (R, nh, max_splits)
  int32_t max_splits = 0;
  uint16_t* attn_out = nullptr;     // (R, qw) bf16
  float* o_part = nullptr;          // (nkv, R, H)
  float* router_logits = nullptr;   // (R, E)
  int32_t* topk_ids = nullptr;      // (R, K)
  float* topk_w = nullptr;          // (R, K)
  int32_t* plan = nullptr;          // n_active, active (E), offset (E), count (E), members (R K)
  uint16_t* moe_act = nullptr;      // (R K, I) bf16
  float* ybuf = nullptr;            // (R K, H)
  uint16_t* dense_act = nullptr;    // (R, F) bf16
  float* dense_part = nullptr;      // (down_slices(F), R, H)
  uint16_t* shared_act = nullptr;   // (R, S) bf16
  float* shared_part = nullptr;     // (down_slices(S), R, H)
  float* logits = nullptr;          // (R, V)
  // Claim loops (MkTuning, measured by bench decode --mk-variants): tiles
  // taken per atomic from the gate/up and the down queue (consecutive tiles,
  // so one expert's: one activation staging for the run), and how close the
  // consumers must be before the loader takes a loop's first tile (-1: no
  // limit; n: the consumers have started the instruction n before the loop).
  int32_t claim_batch_gu = 1;
  int32_t claim_batch_down = 1;
  int32_t gate_gu = -1;
  int32_t gate_down = -1;
  // Round 11 experiment: at batch 1 each SM's loader routes the layer itself
  // for its gate/up loop (waits for the router tiles, runs route_token, sorts
  // the experts) and hands the plan to its consumers, who then skip the wait
  // for kRoute (1); kRoute still writes the global plan for the down loops.
  int32_t local_route = 0;
  // Round 11 experiment: each instruction's counter signals are posted to
  // the signal warp (1), which releases them while the consumers go on,
  // instead of thread 0 releasing them before the next instruction (0).
  int32_t async_signal = 0;
  // Round 11 experiment: a gemv instruction of several tiles runs one warp
  // per tile (1) instead of the CTA on each tile in turn (0).
  int32_t gemv_warps = 0;
  // Round 11 experiment: at batch > 2 the down loop runs one warp per tile
  // with a window of two expert slots' member rows in the activation buffer
  // (1) instead of the whole CTA on each tile (0).
  int32_t down_window = 0;
  // Round 13 measurement only (the results are wrong): an attention stage
  // skips its Q K^T mma (1), its P V ldmatrix / mma (2), or all its math
  // (3: the ring's acquire and release alone).
  int32_t attn_ablate = 0;
  // Round 13: the packed attention kernel where the model allows it (1:
  // megakernel.cu's launch takes megakernel<true> at G <= 8) or never (0).
  int32_t attn_pack = 1;
  // kRoute at batch 1 writes the plan from the sorted top-k alone (1) or
  // by the general counts / compaction / member ranks (0).
  int32_t route_fast = 0;
  // The longest sleep (ns) between two polls of a dependency counter
  // (wait_counter: 32 ns, doubling up to it; 0: spin without sleeping).
  uint32_t poll_ns = 256;
  // Norms release their counter from consumer thread 0 (1) rather than
  // through the signal warp (0): everything of the next layer waits on it.
  int32_t norm_direct = 0;
  // Watchdog and diagnostics.
  uint64_t watchdog_ns = 0;
  MkError* error = nullptr;
  uint32_t* abort_flag = nullptr;   // set by the first timeout; every wait gives up when it is set
  TimelineEntry* timeline = nullptr;  // (instructions) or null
  // Debug (tests): every MoE layer's routing, or null: expert ids (n_layers,
  // R, K) and router logits (n_layers, R, E).
  int32_t* routing_log = nullptr;
  float* router_log = nullptr;
};

}  // namespace ms::gpu::mk
