// The tokenizer of a model served without one (--load-format dummy on a
// directory with only config.json): byte-level BPE over exactly the model's
// vocabulary, so prompts of text and of token ids both work for benchmarks.
//   - the config's bos / eos ids are special tokens "<|bos|>", "<|eos|>"
//     ("<|eos_1|>", ... for more than one eos id);
//   - the 256 bytes take the lowest other ids, in byte order (text encodes to
//     one token per byte: there are no merges);
//   - every other id is a placeholder that decodes to "<ID>" (e.g. "<70123>"),
//     so a random model's output is visible text of one piece per token.
// Built in memory (a tokenizer.json object run through the real loader): a
// 262,144-id vocabulary takes a fraction of a second.
#pragma once

#include <cstdint>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ms {

// bos_id < 0: none. Errors when the vocabulary cannot hold the bytes and the
// special tokens, or an id is outside it.
Result<Tokenizer> make_dummy_tokenizer(int32_t vocab_size, int32_t bos_id, const std::vector<int>& eos_ids);

}  // namespace ms
