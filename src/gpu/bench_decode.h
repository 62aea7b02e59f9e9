// Decode benchmark library for `megaserve bench decode` (the CLI lives in
// src/cli/): for each (batch, context) it fills the KV cache with random bf16
// (no token-by-token prefill, so 128K contexts cost nothing to set up), times
// decode steps (metadata upload + the decode path + on-device greedy) with
// CUDA events on each requested decode path of one backend (layered and
// megakernel side by side), and counts the bytes a step must read to report
// % of speed of light against the nominal bandwidth and the measured
// read-bandwidth probe.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gpu/gpu_backend.h"

namespace ms::gpu {

struct BenchDecodeOptions {
  std::vector<int> batches = {1};
  std::vector<int> contexts = {8192};
  int warmup = 5;
  int iters = 30;
  bool probe = true;  // run the read-bandwidth probe
  uint64_t seed = 1;
  std::vector<DecodePath> paths = {DecodePath::kLayered};
  // The megakernel is timed once per variant (empty: once, as created).
  std::vector<MkTuning> mk_variants;
  // (batch, context) points not run, with why (plan_bench_kv: their KV
  // cache does not fit the device); each gets a skipped row per path.
  std::map<std::pair<int, int>, std::string> skip;
};

struct BenchDecodeRow {
  std::string backend;           // decode path: "layered" or "megakernel"
  std::string variant;           // megakernel: mk_tuning_name of the variant timed
  int batch = 0, context = 0;
  double ms_per_step = 0;        // median
  double tok_per_s = 0;
  double weight_bytes = 0;       // active weights read per step (distinct experts routed)
  double kv_bytes = 0;           // KV read per step
  double achieved_gbs = 0;       // (weight + kv bytes) / time
  double sol_tok_per_s_nominal = 0, sol_tok_per_s_probe = 0;
  double pct_sol_nominal = 0, pct_sol_probe = 0;
  std::string skipped;           // non-empty: why this point did not run
};

struct BenchDecodeResult {
  std::string device;
  double nominal_gbs = 0, probe_gbs = 0;
  std::vector<BenchDecodeRow> rows;
};

// KV blocks per group (GpuBackendOptions::kv_blocks) for `batch` sequences
// of `context` tokens: full-attention groups hold every key, sliding groups
// a window (+1 block) per sequence.
std::vector<int> kv_blocks_for(const ModelConfig& cfg, int block_size, int batch, int context);

// Bytes of a KV pool of `blocks` blocks per group (bf16 K and V, every layer).
size_t kv_pool_bytes(const ModelConfig& cfg, int block_size, const std::vector<int>& blocks);

// The KV pool of a decode bench over batches x contexts (each context + pad
// tokens) within `budget` bytes: per group the blocks of the points that fit
// together, the largest dropped first until they do (an 80 GB H100 holds the
// 61 GB of NMC's weights with 8 rows of 32K keys, not of 128K). `blocks` is
// empty when no point fits; `skipped` says why each dropped point was.
struct BenchKvPlan {
  std::vector<int> blocks;
  std::map<std::pair<int, int>, std::string> skipped;  // (batch, context) -> why
};
BenchKvPlan plan_bench_kv(const ModelConfig& cfg, int block_size, const std::vector<int>& batches,
                          const std::vector<int>& contexts, int pad, size_t budget);

Result<BenchDecodeResult> bench_decode(GpuBackend& backend, const BenchDecodeOptions& opt);

// One megakernel step of `batch` rows at `context` with per-instruction times
// (the backend's megakernel must record its timeline): JSON with one entry
// per instruction {sm, index, op, layer, start_ns, ready_ns, end_ns}, times
// relative to the step's first start (tools/plot_timeline.py draws it).
Result<std::string> megakernel_timeline_json(GpuBackend& backend, int batch, int context);

// One JSON object (for --json) and a text table.
std::string bench_decode_json(const BenchDecodeResult& r);
std::string bench_decode_table(const BenchDecodeResult& r);

// Prefill benchmark for `megaserve bench prefill`: one sequence of N random
// prompt tokens from position 0 through Backend::step (the engine's path:
// sub-steps of max_step_tokens, cuBLAS GEMMs, grouped expert kernels, paged
// prefill attention, the last token's logits copied back), wall-clock time
// per prefill (the time to first token of an N-token prompt without queueing).
struct BenchPrefillOptions {
  std::vector<int> tokens = {512, 2048, 8192};
  int warmup = 1;
  int iters = 5;
  uint64_t seed = 1;
  // Also time every op of the first sub-step of each length once
  // (LayeredExecutor::profile_step), into BenchPrefillRow::profile.
  bool profile = false;
};

struct BenchPrefillRow {
  int tokens = 0;
  double ms = 0;        // median per prefill
  double tok_per_s = 0;
  double tflops = 0;    // 2 x active parameters per token (attention score FLOPs not counted) / time
  std::string skipped;
  int profile_tokens = 0;                                 // tokens of the profiled sub-step
  std::vector<std::pair<std::string, double>> profile;    // microseconds per op name, summed over layers
};

struct BenchPrefillResult {
  std::string device;
  int max_step_tokens = 0;
  std::string moe_prefill;  // the MoE prefill path (moe_prefill_name), empty for dense models
  std::vector<BenchPrefillRow> rows;
};

// KV blocks per group for one sequence of `tokens` tokens with every layer's
// table covering all of them (no sliding-window ring: a prefill writes all).
std::vector<int> prefill_kv_blocks_for(const ModelConfig& cfg, int block_size, int tokens);

Result<BenchPrefillResult> bench_prefill(GpuBackend& backend, const BenchPrefillOptions& opt);
std::string bench_prefill_json(const BenchPrefillResult& r);
std::string bench_prefill_table(const BenchPrefillResult& r);

}  // namespace ms::gpu
