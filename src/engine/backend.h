// The engine interface every backend implements (CPU reference, CUDA layered,
// CUDA megakernel): a batch of ragged sequences in (prefill chunks and decode
// tokens mixed), logits out, KV kept in a paged cache the backend owns and the
// engine's KV manager allocates block ids in.
//
// KV groups: layers that share an attention kind share block tables. Full-
// attention layers form one group; sliding-window layers another, whose
// blocks that leave the window can be freed (their table entries become -1).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace ms {

struct KvGroupSpec {
  std::vector<int> layers;  // layer indices using this group's block tables
  int window = 0;           // 0: full attention; else sliding window (tokens)
  int num_blocks = 0;       // physical blocks in this group's pool
  size_t bytes_per_block = 0;
};

struct KvSpec {
  int block_size = 64;      // tokens per block
  std::vector<KvGroupSpec> groups;
  // Group of each layer.
  std::vector<int> layer_group;
};

// Builds the group layout of a model (one group per attention kind present),
// the budget split in proportion to each group's layers.
KvSpec make_kv_spec(const ModelConfig& cfg, int block_size, size_t kv_bytes_budget, size_t bytes_per_elem);
// The same layout with each group's block count given (groups in
// make_kv_spec's order): for callers that know what every group needs, such
// as a benchmark whose sliding layers need only a window per sequence.
KvSpec make_kv_spec_blocks(const ModelConfig& cfg, int block_size, const std::vector<int>& blocks,
                           size_t bytes_per_elem);

// One sequence's work in a step.
struct SeqWork {
  int64_t seq_id = 0;
  std::vector<int32_t> tokens;  // tokens appended this step: a prefill chunk or one decode token
  int32_t start_pos = 0;        // tokens already in the KV cache; tokens[0] is at this position
  // [group][logical block] -> physical block id; must cover start_pos + tokens.size()
  // positions. Sliding groups may hold -1 for blocks wholly outside the window.
  std::vector<std::vector<int32_t>> block_tables;
  bool need_logits = true;      // logits of the last token wanted
};

struct StepResult {
  // One row of vocab_size floats per SeqWork with need_logits, in batch order
  // (rows for other entries are empty).
  std::vector<std::vector<float>> logits;
};

// What the optional device-sampling path needs to sample one sequence's next
// token exactly as sample_token() (src/sampling/sampler.h) would.
struct SampleSpec {
  SamplingParams params;
  std::span<const int32_t> prompt;  // repetition penalty; valid during step_sample
  std::span<const int32_t> output;  // tokens generated so far; the draw index is output.size()
  uint64_t seed = 0;                // per sequence: request seed + choice index
  // Grammar-constrained decoding: ceil(vocab / 32) words of allowed tokens
  // (SamplerContext::allowed); empty: unconstrained. Valid during step_sample.
  std::span<const uint32_t> allowed;
};

// What one step of a backend takes, reported by the backend (the engine
// and the benchmarks size themselves from it, not from literals).
struct BackendLimits {
  int max_batch_rows = 8;   // sequences in one step (the engine's max_batch bound)
  int max_decode_rows = 8;  // rows of a decode step that take the fast decode path (graph / megakernel)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual const KvSpec& kv_spec() const = 0;
  virtual BackendLimits limits() const { return {}; }
  // Runs one forward step over the batch, writing K/V of the new tokens into
  // the cache and returning the requested logits. Errors leave the cache of
  // other sequences untouched.
  virtual Status step(const std::vector<SeqWork>& batch, StepResult* out) = 0;

  // Optional: the same forward step, then sampling on the backend's device,
  // so that only tokens and logprobs come back (no logits rows). specs has
  // one entry per SeqWork: non-null exactly where a token is wanted (it must
  // then have need_logits). *out is resized to batch.size(); entries without
  // a spec are left default. Engines call it only when supports_sampling().
  virtual bool supports_sampling() const { return false; }
  virtual Status step_sample(const std::vector<SeqWork>& batch, const std::vector<const SampleSpec*>& specs,
                             std::vector<SampleResult>* out) {
    (void)batch;
    (void)specs;
    (void)out;
    return unimplemented(std::string("backend ") + name() + " does not sample on its device");
  }
};

// Validates a batch against the KV spec (table coverage, block ids in range,
// no live position on a freed block). Backends call it before running.
Status validate_batch(const KvSpec& spec, const ModelConfig& cfg, const std::vector<SeqWork>& batch);

}  // namespace ms
