// The schedule builder: the per-SM instruction lists of one decode step, for
// one (row count, context bucket). Built on the host once per key and cached
// by the executor; per step only the sequence lengths and block tables change
// (they are read by the instructions from the step's metadata).
//
// Every layer's instructions are placed in one global order that respects the
// dependencies (norm -> router -> route -> QKV -> attention -> combine ->
// O-projection -> dense / shared FFN -> expert claims), each on the SM that a
// cost model (bytes streamed per SM, dependency ready times) says finishes
// it first. Each SM's list is that global order restricted to the SM, so the
// lists can never deadlock: every wait's producers come earlier in the global
// order, and every CTA is resident (one per SM). The expert work is not
// placed: every SM gets one claim instruction per queue and layer, and takes
// tiles from the device-built queue until it is empty (backfill: SMs that
// finish their attention work early take more expert tiles).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "mk/counters.h"
#include "mk/dims.h"
#include "mk/instruction.h"

namespace ms::mk {

// The per-SM list order of a parallel-block MoE layer's second half.
enum class ListOrder {
  // O-projection tiles, then the gate/up and down claims (the first design).
  kOProjFirst,
  // Gate/up and down claims, then the O-projection: an SM whose attention
  // split ends early takes expert tiles instead of waiting on the attention
  // tail for its O tiles. Measured on the H200 at 04c5a7b (docs/megakernel.md,
  // round 3): bs 1 / 8K 4.89 ms vs 5.29 ms with the O-projection first, bs 8 /
  // 8K 16.30 vs 17.83.
  kClaimsFirst,
  // Gate/up claims, O-projection, down claims: the O tiles run while the
  // down loop would wait for the last gate/up tiles (every down tile needs
  // its expert's whole activation), instead of after the down loop, where the
  // timeline at 46efb17 shows them as the layer's last ~15 us at bs 1.
  // Measured at 348f61c: bs 1 / 8K 4.24 ms vs 4.64 (claims first), bs 8 13.95
  // vs 14.13. The default.
  kOProjBetween,
};
const char* list_order_name(ListOrder o);
// "oproj_first" | "claims_first" | "oproj_between".
Result<ListOrder> parse_list_order(const std::string& name);

struct ScheduleOptions {
  int rows = 1;        // decode rows of the step, 1..kMaxRows
  int context = 1024;  // bucket: the longest key range (position + 1) of a row this schedule serves
  int n_sm = 132;      // CTAs (one per SM)
  // Ablation: a grid-wide barrier (kBarrier instructions waiting on phase
  // counters) before every phase of every layer, to measure what the
  // fine-grained dependencies buy.
  bool barrier_between_phases = false;
  // Debug (watchdog test): the first kRoute (or the first norm of a dense
  // model) also waits on a counter nothing signals.
  bool plant_stuck_wait = false;
  // Where each SM's O-projection tiles of a parallel-block layer go relative
  // to its expert claims (ListOrder). Every order is deadlock-free: the
  // claims depend only on the route and on each other, the O tiles on the
  // attention chain, all earlier in the global order.
  ListOrder order = ListOrder::kOProjBetween;
  // Each claim instruction may take up to ceil(claim_factor x queue
  // capacity / n_sm) tiles, so SMs that are free early can take more than
  // their share.
  double claim_factor = 3.0;
  // Attention splits aim at this percentage of the SMs (one split each);
  // fewer splits leave SMs free for the expert claims sooner at small
  // batches, each split then streaming more stages (round 11 experiment).
  int attn_sm_percent = 100;
  // The splits' count rounded down, not up, so that every (row, KV head)'s
  // splits fit in those SMs at once: one wave (round 11 experiment; with
  // the count rounded up, 2-4 rows at 100% make more splits than SMs).
  bool attn_one_wave = false;
  // SMs (the last ones) kept for the serial head: every kNorm, kFinalNorm
  // and kRoute runs there and nothing else does (round 11 experiment: the
  // head's code stays in their instruction caches, and a norm never queues
  // behind its SM's claim loops). 0: none.
  int head_sms = 0;
  // O-projection tiles only on this many SMs (the last ones before the head
  // SMs), so the others go from their gate/up loop straight to their down
  // loop (round 11 experiment: at bs 1 the O-projection between the loops
  // costs every SM ~3 us of claim-to-data latency). 0: any SM.
  int oproj_sms = 0;
  // Expert tiles placed by the builder instead of claimed (round 11
  // experiment): this percentage of top_k experts' tiles (rounded down to
  // whole experts), which every routing has, split over the SMs by the cost
  // model into one contiguous range per claim instruction, which its loader
  // streams without atomics or the claim gate as soon as it knows the
  // routing (the LM head, a static stream, runs at the copy engine's 4.3
  // TB/s; the claim loops at ~2-3.5). The rest of the queue is claimed as
  // before. At batch 1 and 100 the layer's expert work is all static.
  int static_pct = 0;
  // Cost model of the placement: HBM bytes per nanosecond of the whole
  // device, and the fixed latency of an instruction (wait, activation load,
  // signal) in nanoseconds.
  double device_bytes_per_ns = 4600.0;
  double instr_overhead_ns = 800.0;
  // Fixed costs (ns) of the serial head and of the attention instructions
  // beyond the bytes they stream (fitted_costs), from the timeline at
  // 9268f8a (bs 1 / 8K, medians from each instruction's wait to its end):
  // the norm sums its sources and normalises in ~5.0 us, a router tile
  // takes ~5.3, the route (top-k and plan) ~8.2, an attention split ~3.5
  // more than its K/V bytes. With the uniform model (instr_overhead_ns x 1.5
  // / 1 / 2) the placer put QKV tiles on the SM that runs the route, after
  // it, and that KV group's attention waited ~10 us for them.
  bool fitted_costs = true;
  double norm_ns = 5000.0, router_ns = 5300.0, route_ns = 8200.0, combine_ns = 3000.0, attention_extra_ns = 3500.0;
  // Expert tiles stream at these fractions of an SM's share of
  // device_bytes_per_ns, and a full-attention layer's keys are taken as
  // this fraction of the context bucket (1: the model before round 11).
  double expert_gu_rate = 1.0, expert_down_rate = 1.0, bucket_keys = 1.0;
  // Tiles per instruction (consecutive tiles of one QKV group part / one
  // O-projection k-slice): one wait, one activation staging and one signal
  // for the run instead of per tile.
  int qkv_run = 1;
  int o_run = 4;
};

// The cost model's constants by MkTuning `costs`: 0 the uniform
// per-instruction overhead, 1 fitted to the 9268f8a timeline (the values
// above), 2 refit to the 9c2b8a8 timeline (round 11: the model put a bs 1 /
// 8K layer at 40 us where it took 62, attention ending 0.8 us after the
// route where it ended 6.3 us after; tools/plot_timeline.py --model).
void apply_cost_set(ScheduleOptions* o, int set);

struct Schedule {
  ScheduleOptions opt;
  Dims dims;
  std::vector<LayerInfo> layers;
  CounterLayout counters;
  int splits_full = 1;     // attention splits per (row, KV head), full-attention layers
  int splits_sliding = 1;  // sliding-window layers
  int gu_claims = 0;       // max_claims of each expert gate/up claim instruction
  int down_claims = 0;     // and of each expert down claim instruction
  std::vector<uint32_t> sm_begin;  // (n_sm + 1): SM s runs instrs[sm_begin[s], sm_begin[s + 1])
  std::vector<Instruction> instrs;
  // Estimated step time of the cost model (ns): a sanity figure for logs.
  double estimated_ns = 0;
  // The cost model's start and end (ns) of every instruction (as instrs;
  // claim instructions: from reaching the loop to the end of the tiles the
  // model gave them), for comparing with a measured timeline
  // (tools/plot_timeline.py --model).
  std::vector<float> est_start_ns, est_end_ns;

  int n_sm() const { return static_cast<int>(sm_begin.size()) - 1; }
  std::span<const Instruction> sm_list(int sm) const {
    return {instrs.data() + sm_begin[sm], instrs.data() + sm_begin[sm + 1]};
  }
  int splits(int layer) const { return layers[layer].sliding ? splits_sliding : splits_full; }
};

// The context bucket of a step whose longest row attends `keys` keys: the
// next power of two >= max(keys, 1024).
int context_bucket(int keys);

// Builds the lists. Errors: rows or context out of range, unsupported dims.
Result<Schedule> build_schedule(const Dims& d, const std::vector<LayerInfo>& layers, const ScheduleOptions& opt);

// Static invariants (tests, and the executor in debug builds): lists cover
// [0, instrs.size()) in order; every instruction's fields are in range; every
// static wait target equals the number of instructions signalling that
// counter; claim capacity covers the largest queue.
Status check_schedule(const Schedule& s);

// One line for logs and errors: "L3 attention row 0 kv 2 split 5/33".
std::string describe(const Instruction& in);

}  // namespace ms::mk
