// The CPU sampler: one logits row in, one token (and its logprobs) out.
// The GPU backends run the same algorithm on the device; this file is the
// specification, so the order of operations is exact:
//
//   0. raw = the model's logits row (fp32, vocab entries); when an allowed-
//      token mask is given (grammar-constrained decoding), raw[t] = -inf for
//      every token t outside it, before anything else. As in vLLM V1 (the
//      grammar bitmask is applied to the logits before its sampler computes
//      logprobs), logprobs and top_logprobs are then those of the constrained
//      distribution: masked tokens never appear, and the chosen token's
//      logprob is renormalised over the allowed ones.
//   1. Logprobs (when params.logprobs >= 0) come from log_softmax(raw): the
//      raw model distribution before penalties, temperature and truncation
//      (vLLM's default "raw_logprobs" mode). The chosen token's logprob plus
//      the top-N alternatives, sorted by logprob descending then token id.
//   2. l = raw; repetition penalty r (HF / vLLM): for each DISTINCT token t of
//      prompt + output: l[t] = l[t] > 0 ? l[t] / r : l[t] * r.
//   3. Frequency / presence (OpenAI), over output tokens only, c = count of t:
//      l[t] -= c * frequency_penalty + (c > 0 ? presence_penalty : 0).
//   3b. logit_bias: l[t] += bias[t] (OpenAI; so -100 all but bans a token and
//      +100 all but forces it, greedy or not).
//   4. temperature == 0: token = argmax(l) (lowest id on ties). Done.
//   5. l /= temperature.
//   6. min-p: keep t with l[t] >= max(l) + log(min_p)  (p[t] >= min_p * p_max).
//   7. top-k: keep t with l[t] >= the k-th largest kept l (ties at the
//      threshold are all kept).
//   8. top-p: order kept tokens by l descending, then id ascending; keep the
//      shortest prefix whose softmax mass (over the tokens kept so far) is
//      >= top_p (at least one token).
//   9. Draw u in [0, 1) from the counter-based RNG: u = U(seed, index), index =
//      number of tokens this sequence sampled before. Walk the kept tokens in
//      ascending id order accumulating exp(l - max); pick the first whose
//      cumulative sum exceeds u * total (the last kept token if rounding runs
//      past the end).
// Sums are accumulated in fp64 here; a device version needs at least fp32
// with a tree reduction. Because the RNG is counter-based and seeded per
// sequence, the output does not depend on batch composition or on
// preemption (a recomputed sequence draws the same u for the same index).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "sampling/sampling_params.h"

namespace ms {

struct SampledLogprob {
  int32_t token = 0;
  float logprob = 0.f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.f;               // of `token` under log_softmax(raw); set when params.logprobs >= 0
  std::vector<SampledLogprob> top;   // params.logprobs alternatives
};

struct SamplerContext {
  std::span<const int32_t> prompt;   // for the repetition penalty
  std::span<const int32_t> output;   // tokens this sequence generated so far
  uint64_t seed = 0;                 // per sequence: request seed + choice index
  // Empty: every token allowed. Else ceil(vocab / 32) words, bit t of word
  // t / 32 set iff token t may be sampled (at least one must be).
  std::span<const uint32_t> allowed;
};

// Maximum top logprobs a request may ask for.
inline constexpr int kMaxTopLogprobs = 20;
// OpenAI's logit_bias bounds: at most this many tokens, each in [-100, 100].
inline constexpr int kMaxLogitBias = 1024;
inline constexpr float kLogitBiasLimit = 100.f;

// Checks ranges (what the engine's submit() rejects with InvalidArgument).
Status validate_sampling_params(const SamplingParams& p);

// Uniform in [0, 1) from (seed, index): a splitmix64 counter-based draw.
double sampler_uniform(uint64_t seed, uint64_t index);

// Samples one token from a logits row of vocab entries (steps 0-9 above).
SampleResult sample_token(std::span<const float> logits, const SamplingParams& p, const SamplerContext& ctx);

// log_softmax of a row (fp64 accumulation), as used for logprobs.
std::vector<float> log_softmax(std::span<const float> logits);

}  // namespace ms
