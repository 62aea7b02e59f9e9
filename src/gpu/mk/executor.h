// MkExecutor: runs decode steps as one megakernel launch on a borrowed
// DeviceModel (the weights and the KV pool the layered executor prefilled).
//
// Per (rows, context bucket) it builds the instruction lists once (the
// schedule builder, src/mk/) and keeps them on the device; per step it
// uploads only what changed: the rows' tokens and positions (one small
// copy) and the block-table entries that differ from what the device holds
// for that row (usually none; one entry when a sequence crosses a block).
// Logits rows stay on the device for the sampler.
//
// A step the watchdog abandons (a dependency counter or stage that never
// completes) returns an Internal error naming the instruction, the counter
// and its value, and the executor stays failed: the engine then reports
// itself unhealthy with that reason.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "gpu/common/device_buffer.h"
#include "gpu/device_model.h"
#include "gpu/mk/params.h"
#include "mk/schedule.h"

namespace ms::gpu {

// The megakernel's tuning: the list order and how the claim loops take
// tiles. The default-constructed one is what ships; variants are timed
// against it in one process (bench decode --mk-variants) and the winner
// becomes the default (STYLE.md: A/B variants live in the harness; the
// numbers of each round are in docs/megakernel.md).
struct MkTuning {
  // Measured on the H200 at 348f61c (docs/megakernel.md, round 4): bs 1 / 8K
  // 4.24 ms with the O-projection between the claim loops vs 4.64 with the
  // claims first; bs 8 13.95 vs 14.13.
  ::ms::mk::ListOrder order = ::ms::mk::ListOrder::kOProjBetween;
  // Tiles taken per atomic (Params::claim_batch_*); 0: by the step's rows,
  // 2 / 4 (gate/up / down) up to 2 rows, else 4 / 8, the best measured at
  // 0f419a4 (round 5: bs 1 runs of 4 / 8 were slower than 2 / 4, bs 8 the
  // other way round).
  int gu_batch = 0;
  int down_batch = 0;
  // Params::gate_gu / gate_down (-1: none). Measured at 0f419a4: gate 0 for
  // both loops, bs 1 / 8K 4.30 -> 3.99 ms; bs 8 neutral with runs. At
  // 9268f8a: no gate on the gate/up loop 4.11 ms vs 3.83 at bs 1 / 8K; the
  // down loop's gate (-1, 0, 1, 2) within 0.5%.
  int gu_gate = 0;
  int down_gate = 0;
  // Schedule (mk::ScheduleOptions): tiles per QKV / O-projection
  // instruction, and the placer's cost model (mk::apply_cost_set: 1 fitted
  // to the 9268f8a timeline, 2 refit to 9c2b8a8's (round 11 experiment), 0
  // the uniform per-instruction overhead).
  // Round 11 (H200, 2026-12-05, docs/megakernel.md): qkv_run=3 with
  // gemv_warps, costs=2, attn_pct by shape, the static tiles, local_route,
  // down_slot_wait, down_window and async_signal together: bs 1 / 8K 3.223
  // -> 3.054 ms, bs 8 / 8K 10.786 -> 9.940. Each undone alone (call 4):
  // static tiles +6.1 / +1.6%, local_route +4.2 / 0, QKV runs one warp a
  // tile +3.3 / +0.2, costs=1 +1.8 / 0, down_window 0 / +6.1, async_signal
  // +0.2 / +0.2, down_slot_wait -1.0 / 0 (bs 1 / bs 8). Round 12 (H200,
  // bs 1..8 x 1K..128K): without the per-slot down wait bs 1 is 0.4-1.1%
  // faster, bs 2 0.7-2.0%, bs 3-8 within 0.1%; it is removed (the down loop
  // waits for every routed slot before its first tile, at every batch).
  int qkv_run = 3;
  int o_run = 4;
  int costs = 2;
  // ScheduleOptions::attn_sm_percent; 0: by shape (attn_percent_for).
  int attn_pct = 0;
  // ScheduleOptions::attn_one_wave; -1: by shape (attn_one_wave_for).
  int attn_wave = -1;
  // Params::route_fast (round 10: noise alone; round 11: with attn_pct).
  int route_fast = 0;
  // ScheduleOptions::head_sms; -1: by shape (head_sms_for).
  int head_sms = -1;
  // ScheduleOptions::oproj_sms (round 11 experiment).
  int o_sms = 0;
  // Params::local_route (round 11).
  int local_route = 1;
  // Params::async_signal (round 11).
  int async_signal = 1;
  // Params::gemv_warps (round 11; with qkv_run / o_run > 1).
  int gemv_warps = 1;
  // ScheduleOptions::static_pct (round 11).
  int static_pct = 100;
  // Params::down_window (round 11).
  int down_window = 1;
  // Params::attn_pack (round 13): 1, q's hi / lo halves packed into one
  // mma where G <= 8 (megakernel<true>); 0, the separate mma everywhere.
  int attn_pack = 1;
  // Params::attn_ablate (round 13 measurement only: wrong results).
  int attn_ablate = 0;
  // Params::poll_ns (round 16): the longest sleep between two polls of a
  // dependency counter (0: spin). Spinning measured -0.6% and +0.9% at bs 1
  // / 8K in two calls (noise): 256 as before.
  int poll_ns = 256;
  // Params::norm_direct (round 16, H100, builds alternating: bs 1 / 8K
  // 3.287 -> 3.221 ms with it, bs 8 / 8K 11.465 -> 11.470).
  int norm_direct = 1;
  bool operator==(const MkTuning&) const = default;
  int gu_run(int rows) const { return gu_batch > 0 ? gu_batch : rows <= 2 ? 2 : 4; }
  int down_run(int rows) const { return down_batch > 0 ? down_batch : rows <= 2 ? 4 : 8; }
  // The attention's share of the SMs (ScheduleOptions::attn_sm_percent)
  // for `rows` rows at context bucket `context`: attn_pct when set, else
  // three quarters of them (fewer, longer splits; the SMs left take expert
  // tiles from the route on), but all of them for one row at 64K keys and
  // more, where the one row's attention is the step's longest chain.
  // Measured over bs 1..8 x 1K..128K at d347fc0 (H200, docs/megakernel.md
  // round 11): 75% is the best or within 1% of it at every point but those;
  // at 64K / 128K it is 5-18% ahead of both 50% and 100% from bs 2 on
  // (bs 4 / 128K 11.19 ms against 12.78 and 13.40); bs 1 / 128K 4.24 at
  // 100% against 4.34 at 75%. Round 12 (H200): all of them in one wave of
  // splits (attn_one_wave_for) at 2-4 rows and 64K keys and more: bs 2 / 3 /
  // 4 x 128K 6.706 -> 6.438, 9.624 -> 8.627, 11.219 -> 10.544 ms; x 64K
  // -0.2 / -0.3 / -0.8%; bs 6 and 8 within 0.1% either way (bs 5 not
  // measured: 75%).
  int attn_percent_for(int rows, int context) const {
    if (attn_pct > 0) return attn_pct;
    if (rows <= 4 && context >= 65536) return 100;
    return rows == 2 ? 50 : 75;
  }
  // ScheduleOptions::head_sms: head_sms when set, else SMs that run only
  // the norms and routes: one at one row (on a grid of at least 8 SMs), two
  // at two rows below 64K keys (with half the SMs for the attention:
  // attn_percent_for), none otherwise. Measured on an H100
  // (docs/megakernel.md, round 16): at 3e9017a, bs 1 in four rounds of
  // separate processes, the grids in three: bs 1 / 8K 3.45 -> 3.30 ms
  // (-4.4%), 64K 4.08 -> 3.86 (-5.4%), 128K 4.66 -> 4.66; with more rows
  // the R norms queue on the head SM: head_sms=1 bs 2 / 3 / 4 / 8 x 8K +4 /
  // +7 / +12 / +18%; head_sms = rows bs 2 -1.8%, bs 3 -1.0% at 8K but +22%
  // at 128K, bs 4 0. At 3246934 in one process: bs 2 / 8K with two head
  // SMs and attn_pct=50 4.906 -> 4.657 ms (-5.1%), 32K 5.249 -> 5.114
  // (-2.6%); at one row neither helps (head_sms=2 -0.5 / +0.6%, attn_pct=50
  // +1.5 / +2.1% at 8K / 32K).
  int head_sms_for(int rows, int context, int n_sm) const {
    if (head_sms >= 0) return head_sms;
    if (rows == 1 && n_sm >= 8) return 1;
    if (rows == 2 && context < 65536 && n_sm >= 16) return 2;
    return 0;
  }
  // ScheduleOptions::attn_one_wave: attn_wave when set, else on where
  // attn_percent_for gives 2-4 rows all the SMs (at one row it measured
  // the same either way; at 8K it cost bs 1 2.6%).
  bool attn_one_wave_for(int rows, int context) const {
    if (attn_wave >= 0) return attn_wave != 0;
    return rows >= 2 && attn_percent_for(rows, context) == 100;
  }
};

// "default" or "" (the shipped tuning), else comma-separated settings
// applied to `base`: order=oproj_first|claims_first|oproj_between,
// gu_batch=N, down_batch=N (0..64, 0: by rows), gu_gate=N, down_gate=N
// (-1..8), qkv_run=N, o_run=N (1..64), costs=0|1|2, attn_pct=N (0: by shape, or 10..400), attn_wave=-1|0|1 (-1: by shape),
// route_fast=0|1, head_sms=-1..4 (-1: by shape), o_sms=0..132,
// local_route=0|1, async_signal=0|1, gemv_warps=0|1, static_pct=0..100,
// down_window=0|1, attn_pack=0|1, attn_ablate=0..3 (measurement only: the
// attention's results are wrong under it), poll_ns=0..4096, norm_direct=0|1. An unknown or malformed setting is an error that names it.
Result<MkTuning> parse_mk_tuning(const std::string& spec, MkTuning base = {});
// The tuning as a spec parse_mk_tuning reads back ("default" when it is).
std::string mk_tuning_name(const MkTuning& t);

struct MkOptions {
  int max_context = 0;  // longest sequence (tokens); 0: min(max_position, 262144)
  int64_t watchdog_ms = 2000;  // a wait longer than this abandons the step
  int n_sm = 0;                // CTAs; 0: the device's SM count
  bool record_timeline = false;
  // Ablation: grid-wide barriers (counters) between the phases of each layer.
  bool barrier_between_phases = false;
  // Debug: plant a wait nothing signals (watchdog test).
  bool plant_stuck_wait = false;
  // Debug (tests): keep every MoE layer's expert ids and router logits.
  bool record_routing = false;
  // The environment's MEGASERVE_MK_EXPERIMENTS (a parse_mk_tuning spec) is
  // applied on top (the GPU tests run under it to check a variant).
  MkTuning tuning;
};

class MkExecutor {
 public:
  // Shapes the megakernel does not take, named (the caller keeps decode on
  // the layered path and logs why).
  static Status check_supported(const ModelConfig& cfg, int block_size);
  // Allocates the step buffers, counters and tables (before the model's KV
  // pool, which bind_kv() then maps).
  static Result<std::unique_ptr<MkExecutor>> create(DeviceModel& model, cudaStream_t stream, const MkOptions& opt);
  ~MkExecutor();
  // Builds the KV pool's tensor map and the per-layer table (after
  // DeviceModel::alloc_kv).
  Status bind_kv();

  // Whether `batch` is a decode step this executor runs: every row one
  // token, at most mk::kMaxRows rows, within max_context.
  bool accepts(const std::vector<SeqWork>& batch) const;
  // Enqueues one decode step on the stream (metadata, kernel); the logits
  // rows (batch order) are then in logits(). No synchronisation.
  Status enqueue(const std::vector<SeqWork>& batch);
  // Waits for the last enqueued step (bounded by the watchdog) and turns a
  // watchdog abort into an error.
  Status finish();
  // A step failed; every later one fails the same way (sticky).
  bool failed() const { return !failed_.is_ok(); }
  // The failure was the kernel's own report (a watchdog abort, a bad
  // instruction): the kernel ended and the device takes other work.
  bool failed_cleanly() const { return failed_clean_; }
  // enqueue + finish + every row's logits copied to the host.
  Status step(const std::vector<SeqWork>& batch, StepResult* out);
  // enqueue + greedy argmax on the device (benchmarks: the layered decode
  // graph ends with the same argmax).
  Status enqueue_greedy(const std::vector<SeqWork>& batch);
  // Greedy decode step: token ids and their log-probabilities only.
  Status decode_greedy(const std::vector<SeqWork>& batch, std::vector<int32_t>* tokens, std::vector<float>* logprobs);
  const float* logits() const { return logits_.get(); }
  cudaStream_t stream() const { return stream_; }
  const MkOptions& options() const { return opt_; }
  // Switches the variant for the next steps (benchmarks time several in one
  // process); a new list order drops the cached schedules.
  Status set_tuning(const MkTuning& t);
  // The schedule of the last step (its per-SM lists, the timeline's index).
  const ::ms::mk::Schedule* last_schedule() const { return last_; }
  // Per-instruction times of the last step (record_timeline), indexed like
  // last_schedule()->instrs.
  Status timeline(std::vector<mk::TimelineEntry>* out);
  // Debug / tests: a step buffer after the last step, as floats (names as
  // MkVm::buffer: "x", "h", "hf", "qkv", "attn_out", "o_part",
  // "router_logits", "moe_act", "ybuf", "dense_act", "logits").
  Status download(const std::string& name, std::vector<float>* out);
  // record_routing: the expert ids (rows x top_k, best first) and router
  // logits (rows x experts) of `layer` in the last step; empty for dense layers.
  Status last_routing(int layer, std::vector<int32_t>* ids, std::vector<float>* logits = nullptr);

 private:
  struct Cached {
    ::ms::mk::Schedule schedule;
    DeviceBuffer<mk::Instruction> instrs;
    DeviceBuffer<uint32_t> sm_begin;
    DeviceBuffer<mk::TimelineEntry> timeline;
  };
  // Which sequence's table the device holds for a row.
  struct RowMirror {
    int64_t seq_id = -1;
    std::vector<std::vector<int32_t>> tables;  // [group]
  };

  MkExecutor(DeviceModel& model, cudaStream_t stream) : model_(model), cfg_(model.config()), stream_(stream) {}
  Status init(const MkOptions& opt);
  Result<Cached*> schedule_for(int rows, int context);
  Status stage_tables(const std::vector<SeqWork>& batch);

  DeviceModel& model_;
  const ModelConfig& cfg_;
  cudaStream_t stream_;
  MkOptions opt_;
  ::ms::mk::Dims dims_;
  int n_sm_ = 0;
  int max_blocks_ = 0;  // block-table entries per (row, group)
  uint64_t epoch_ = 0;  // steps run: picks the counter bank
  Status failed_;       // sticky: a watchdog abort or a device fault
  bool failed_clean_ = false;  // failed_ is the kernel's own report
  const ::ms::mk::Schedule* last_ = nullptr;
  Cached* last_cached_ = nullptr;
  std::map<std::pair<int, int>, std::unique_ptr<Cached>> cache_;

  mk::Params base_;  // the pointers that do not change between steps
  CUtensorMap kv_map_{};
  bool kv_bound_ = false;
  DeviceBuffer<mk::LayerPtrs> layer_ptrs_;
  DeviceBuffer<mk::LayerInfo> layer_info_;
  DeviceBuffer<int32_t> tables_;      // (kMaxRows, groups, max_blocks)
  DeviceBuffer<mk::StepMeta> meta_;
  PinnedBuffer<mk::StepMeta> meta_host_;
  PinnedBuffer<int32_t> table_host_;  // staging for table uploads
  cudaEvent_t meta_copied_ = nullptr; // the last uploads have read the pinned staging
  cudaEvent_t done_ = nullptr;        // the last step's kernel finished
  std::vector<RowMirror> rows_;
  DeviceBuffer<uint32_t> counters_;   // 2 banks
  DeviceBuffer<uint32_t> errbuf_;     // MkError (16 words) + abort flag
  PinnedBuffer<uint32_t> err_host_;
  // Step buffers.
  DeviceBuffer<float> x_, hf_, qkv_, part_o_, part_lse_, o_part_, router_logits_, topk_w_, ybuf_, dense_part_,
      shared_part_, logits_;
  DeviceBuffer<uint16_t> h_, attn_out_, moe_act_, dense_act_, shared_act_;
  DeviceBuffer<int32_t> topk_ids_, plan_;
  DeviceBuffer<int32_t> routing_log_;  // record_routing: (n_layers, kMaxRows, K)
  DeviceBuffer<float> router_log_;     // (n_layers, kMaxRows, E)
  int last_rows_ = 0;
  DeviceBuffer<int32_t> tokens_out_;   // (kMaxRows) greedy
  DeviceBuffer<float> logprobs_out_;   // (kMaxRows)
};

}  // namespace ms::gpu
