// Sampling on the GPU, so a step copies token ids (not logits rows) back to
// the host.
//
// launch_argmax: greedy only, argmax per row (ties to the lowest id, as
// std::max_element) and its log-probability log_softmax(logits)[argmax].
//
// launch_sample: the whole CPU sampler of src/sampling/sampler.h (steps 0-9,
// the specification) for a batch of rows, one 1024-thread block per row.
// Step 0, the allowed-token mask of grammar-constrained rows: a row with
// mask_row >= 0 reads its logits through masks[mask_row] (V/32 words, bit t
// clear: logit -inf), so every later pass, logprobs included, sees the
// constrained row (as the CPU sampler and vLLM V1 do).
// No full sort anywhere: every threshold is a radix select over the row
// (three passes of 11/11/10 bits of an order-preserving key of the float
// value), which the row being L2-resident (<= 1 MB) makes cheap:
//   - penalties and logit_bias: a per-row list of (token, output count, in
//     prompt, bias) entries,
//     built on the host from the sequence's history (pack_sample_row), marked
//     in a shared-memory bitmap so one pass over the row applies them;
//   - logprobs: log_softmax of the raw row (online max / sum in one pass),
//     top-N by a count radix select on the raw values, ties at the N-th value
//     taken in ascending id order;
//   - top-k: count radix select for the k-th largest kept value;
//   - top-p: mass radix select (histogram bins accumulate exp(l - max) in
//     2^-44 fixed point, so sums are exact and order independent) for the
//     value at which the descending-order prefix reaches top_p of the mass;
//     the cut may fall inside a tie group, whose tokens are kept in ascending
//     id order (the spec's "l desc, then id asc");
//   - RNG: the same splitmix64 counter draw as sampler_uniform, bit-identical;
//   - inverse CDF in ascending id order: warp segment sums, a scan over the
//     segments, then a block scan inside the crossing segment (fp64 sums).
//
// Known differences from the CPU sampler (fp64 sequential sums, exp in fp64):
// the device computes each token's weight as expf(l - max) in fp32 (relative
// error ~1e-7) and sums in fp64 in another order, so a draw u that lands
// within ~1e-7 (relative) of a CDF boundary, or a top-p target within that of
// a group boundary, can pick a neighbouring token; the number of tied tokens
// kept inside a top-p tie group is ceil((target - mass above) / e) rather
// than the sequential fp64 walk; a top-N logprob candidate whose raw logit
// differs from another's but rounds to the same fp32 logprob is ordered by
// logit (the CPU orders such a pair by id).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace ms::gpu {

// logits (R, V) fp32 -> tokens (R) int32, logprobs (R) fp32 (may be null).
Status launch_argmax(const float* logits, int R, int V, int32_t* tokens, float* logprobs, cudaStream_t stream);

// Largest vocabulary launch_sample handles (its penalty bitmap lives in
// shared memory: V / 8 bytes).
inline constexpr int kMaxSampleVocab = 262144;

// One repetition / frequency / presence penalty or logit_bias target of a row.
struct SamplePenalty {
  int32_t token = 0;
  int32_t out_count = 0;  // occurrences in the output (frequency / presence)
  int32_t in_seen = 0;    // 1: in prompt or output (repetition penalty applies)
  float bias = 0.f;       // logit_bias, added after the penalties (sampler.h step 3b)
};
static_assert(sizeof(SamplePenalty) == 16);

// One row to sample, packed on the host (pack_sample_row).
struct SampleRowParams {
  float temperature = 1.f;  // <= 0: greedy (after penalties)
  float top_p = 1.f;
  int32_t top_k = 0;        // applied when 0 < top_k < V
  float min_p = 0.f;
  float log_min_p = 0.f;    // std::log(min_p) on the host: the CPU sampler's exact float
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  float repetition_penalty = 1.f;
  int32_t logprobs = -1;    // -1: none; 0..kMaxTopLogprobs
  int32_t logits_row = 0;   // row of the logits matrix to read
  int32_t pen_offset = 0;   // first entry of this row in the penalty list
  int32_t pen_count = 0;
  uint64_t seed = 0;
  uint64_t index = 0;       // draw index: tokens this sequence sampled before
  int32_t mask_row = -1;    // allowed-token mask: row of `masks` in launch_sample; -1: none
  int32_t pad[3] = {};
};
static_assert(sizeof(SampleRowParams) == 80);

// One sampled row's result.
struct SampleRowOut {
  int32_t token = 0;
  float logprob = 0.f;  // of token under log_softmax(raw); when logprobs >= 0
  int32_t n_top = 0;
  int32_t pad = 0;
  int32_t top_token[kMaxTopLogprobs] = {};
  float top_logprob[kMaxTopLogprobs] = {};
};
static_assert(sizeof(SampleRowOut) == 16 + 8 * kMaxTopLogprobs);

// Packs one row: parameters, the seed and draw index (= output.size()), and
// appends its penalty entries (distinct tokens of prompt + output in range,
// only when a penalty is active, and the logit_bias tokens in range; one
// entry per token, sorted) to *penalties.
void pack_sample_row(const SamplingParams& p, std::span<const int32_t> prompt, std::span<const int32_t> output,
                     uint64_t seed, int logits_row, int V, SampleRowParams* row, std::vector<SamplePenalty>* penalties);

// The SampleResult of a row (top list sorted by logprob desc, then id).
SampleResult to_sample_result(const SampleRowOut& o, int logprobs);

// uint32 words of one allowed-token mask row.
inline int sample_mask_words(int V) { return (V + 31) / 32; }

// Samples R rows: rows[r] reads logits row rows[r].logits_row of the (*, V)
// fp32 matrix `logits`; penalties: the packed entries; masks: (rows with a
// mask, sample_mask_words(V)) uint32 allowed-token bitmaps, indexed by
// rows[r].mask_row (may be null when no row has one; a masked row must allow
// at least one token); scratch: (R, V) fp32 workspace (the penalised,
// temperature-scaled rows); out: (R). All pointers are device pointers.
// InvalidArgument for V > kMaxSampleVocab.
Status launch_sample(const float* logits, int V, const SampleRowParams* rows, int R, const SamplePenalty* penalties,
                     const uint32_t* masks, float* scratch, SampleRowOut* out, cudaStream_t stream);

// Test hook: out[i] = sampler_uniform(seeds[i], indices[i]) computed on the
// device (device pointers, n entries).
Status launch_sampler_uniform(const uint64_t* seeds, const uint64_t* indices, int n, double* out, cudaStream_t stream);

}  // namespace ms::gpu
