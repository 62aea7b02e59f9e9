// Per-request sampling parameters (OpenAI / vLLM semantics), validated by the
// server and applied by the sampler (CPU now; the GPU backends run the same
// algorithm on the device).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ms {

class CompiledGrammar;  // token_mask.h

struct SamplingParams {
  float temperature = 1.0f;      // 0: greedy
  float top_p = 1.0f;            // (0, 1]
  int top_k = 0;                 // 0 or -1: off
  float min_p = 0.0f;            // [0, 1]
  float presence_penalty = 0.0f;   // [-2, 2], OpenAI: subtract once if token appeared in output
  float frequency_penalty = 0.0f;  // [-2, 2], subtract count * penalty
  float repetition_penalty = 1.0f; // > 0, HF/vLLM: divide positive / multiply negative logits of seen tokens (prompt + output)
  std::optional<uint64_t> seed;    // per-request RNG seed; unset: random
  int logprobs = -1;               // -1: none; 0..20: chosen token logprob + that many top alternatives
  bool ignore_eos = false;
  // OpenAI logit_bias: (token id, bias in [-100, 100]) added to the logits
  // after the penalties; sorted by token id, one entry per token.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Structured output: every choice's tokens must follow this grammar
  // (json_schema / json_object / strict tool arguments); null: unconstrained.
  // Shared, immutable apart from its thread-safe mask cache.
  std::shared_ptr<CompiledGrammar> grammar;

  bool greedy() const { return temperature <= 0.0f; }
};

}  // namespace ms
