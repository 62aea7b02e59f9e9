// One sequence's structured-output constraint as the engine uses it: the
// grammar's matcher plus the sequence's stop tokens, producing the
// allowed-token mask for its next token (over the model's vocabulary) and
// advancing by what was sampled.
//
// Stop tokens (eos, stop_token_ids) are allowed exactly where the grammar may
// end, and never feed the matcher. When the grammar is complete (nothing can
// follow, e.g. the closing brace of the top-level object) complete() is true
// and the engine finishes the sequence with reason "stop" at once, without
// spending a step on the stop token (this also ends ignore_eos requests).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sampling/token_mask.h"

namespace ms {

class GrammarConstraint {
 public:
  GrammarConstraint(std::shared_ptr<CompiledGrammar> grammar, std::vector<int32_t> stop_tokens, int32_t vocab_size);
  // Computes the mask of the next token; false when no token at all is
  // allowed (a vocabulary that cannot spell what the grammar needs next).
  bool compute_mask();
  // ceil(vocab_size / 32) words, valid after compute_mask().
  std::span<const uint32_t> mask() const { return words_; }
  // Advances by the sampled token; false when the grammar does not allow it.
  bool accept(int32_t token);
  bool complete() const { return matcher_.terminated(); }

 private:
  GrammarMatcher matcher_;
  std::vector<int32_t> stop_tokens_;
  std::vector<uint32_t> words_;
};

}  // namespace ms
