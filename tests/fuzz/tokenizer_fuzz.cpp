// Fuzz target: the tokenizer (demo model's byte-level BPE with added and
// special tokens). The input is text to encode (with and without special
// tokens, and with its second half as a text-only range) and, read as int32,
// ids to decode. Checked: ids are inside the vocabulary, decode of encode
// gives the text back for valid UTF-8 (the demo tokenizer has no normalizer),
// and the streaming detokenizer's deltas add up to decode().
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

const ms::Tokenizer& demo() {
  static const ms::Tokenizer* t = [] {
    auto r = ms::Tokenizer::load(std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo");
    if (!r.is_ok()) std::abort();
    return new ms::Tokenizer(std::move(r.value()));
  }();
  return *t;
}

void check_ids(const ms::Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();
}

std::string streamed(const ms::Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  ms::StreamingDetokenizer d(tok, skip);
  std::string out;
  for (int32_t id : ids) out += d.push(id);
  return out + d.flush();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ms::Tokenizer& tok = demo();
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto with = tok.encode(text, true, true);
  const auto without = tok.encode(text, false, false);
  const std::vector<ms::TextRange> half = {{size / 2, size}};
  const auto ranged = tok.encode_with_text_ranges(text, half, false);
  check_ids(tok, with);
  check_ids(tok, without);
  check_ids(tok, ranged);
  if (ms::unicode::utf8_lossy(text) == text && tok.decode(without, false) != text) std::abort();
  if (streamed(tok, with, false) != tok.decode(with, false)) std::abort();
  // The same bytes as ids (anything, negative and huge included).
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  for (bool skip : {false, true})
    if (streamed(tok, ids, skip) != tok.decode(ids, skip)) std::abort();
  return 0;
}
