// content_marker.h: keeps control-token text that a client sends (in message
// content, tool descriptions, chat_template_kwargs ...) from becoming control
// tokens in the prompt, while the template's own markup keeps its tokens.
//
// The prompt is one rendered string, and the template may cut, join and
// reformat client strings before they reach it, so the origin of each byte
// cannot be recovered afterwards. Instead, before rendering, every special
// token's text inside client strings is replaced by a marker (U+FDD0, a
// Unicode noncharacter, then U+100000 + the token's index: private use),
// which string operations carry along like any other text. After rendering,
// unmark() puts the token text back and reports the byte ranges it covers;
// the tokenizer encodes those ranges as plain text (encode_with_text_ranges).
// A U+FDD0 already in client text is doubled, so it comes back unchanged.
// Known difference from transformers: a template that measures or rewrites
// client text (|length, .replace('<|im_end|>', '')) sees the marker instead
// of the token text; tojson(ensure_ascii=True) prints the marker escaped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace ms {

class ContentMarker {
 public:
  explicit ContentMarker(const Tokenizer& tokenizer) : tok_(tokenizer) {}

  // Marks every string of `v` (keys and values, at any depth; the walk keeps
  // its own stack). Top-level keys listed in `skip` are left alone (the
  // server's bos_token / eos_token). Returns the number of markers placed.
  size_t mark(nlohmann::ordered_json& v, const std::vector<std::string>& skip = {}) const;
  // One string.
  std::string mark_text(std::string_view s, size_t* count) const;

  struct Unmarked {
    std::string text;
    std::vector<TextRange> text_only;  // sorted, not overlapping
  };
  Unmarked unmark(std::string_view rendered) const;

 private:
  const Tokenizer& tok_;
};

}  // namespace ms
