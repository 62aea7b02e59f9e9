// StreamingDetokenizer (declared in tokenizer.h): buffers the bytes of an
// unfinished UTF-8 character across tokens (byte-level tokens often split
// emoji and CJK characters) and emits only whole characters. Invalid bytes
// become U+FFFD as soon as they are known to be invalid, exactly as decode().
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ms {

std::string StreamingDetokenizer::push(int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return "";
  pending_ += tokenizer_->token_bytes(id);
  const size_t n = unicode::utf8_emittable_prefix(pending_);
  if (n == 0) return "";
  std::string out = unicode::utf8_lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out = unicode::utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace ms
