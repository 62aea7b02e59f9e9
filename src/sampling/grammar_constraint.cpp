// GrammarConstraint; see grammar_constraint.h.
#include "sampling/grammar_constraint.h"

#include <algorithm>

namespace ms {

GrammarConstraint::GrammarConstraint(std::shared_ptr<CompiledGrammar> grammar, std::vector<int32_t> stop_tokens,
                                     int32_t vocab_size)
    : matcher_(std::move(grammar)), stop_tokens_(std::move(stop_tokens)),
      words_((std::max(vocab_size, matcher_.grammar().vocab().size()) + 31) / 32, 0u) {}

bool GrammarConstraint::compute_mask() {
  matcher_.fill_mask(words_);
  const bool end = matcher_.can_end();
  for (int32_t t : stop_tokens_) {
    if (t < 0 || static_cast<size_t>(t >> 5) >= words_.size()) continue;
    if (end)
      set_token_bit(words_, t);
    else
      words_[t >> 5] &= ~(1u << (t & 31));
  }
  return std::any_of(words_.begin(), words_.end(), [](uint32_t w) { return w != 0; });
}

bool GrammarConstraint::accept(int32_t token) {
  if (std::find(stop_tokens_.begin(), stop_tokens_.end(), token) != stop_tokens_.end()) return matcher_.can_end();
  return matcher_.accept_token(token);
}

}  // namespace ms
