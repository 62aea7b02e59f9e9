// The TokenVocab (token_vocab.h) of a Tokenizer: every id's decoded bytes;
// special added tokens (<|END_OF_TURN_TOKEN|>, <|im_end|>, ...) are never
// offered by a grammar (stop tokens are added back by the caller where the
// grammar may end). Header-only so that the sampling library itself does not
// depend on the tokenizer; callers link both.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sampling/token_vocab.h"
#include "tokenizer/tokenizer.h"

namespace ms {

inline std::shared_ptr<const TokenVocab> vocab_from_tokenizer(const Tokenizer& tok) {
  std::vector<std::string> bytes(tok.vocab_size());
  std::vector<uint8_t> excluded(tok.vocab_size(), 0);
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    bytes[id] = std::string(tok.token_bytes(id));
    excluded[id] = tok.is_special(id) ? 1 : 0;
  }
  return TokenVocab::create(std::move(bytes), std::move(excluded));
}

}  // namespace ms
