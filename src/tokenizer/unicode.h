// UTF-8 and Unicode helpers for the tokenizer: lenient UTF-8 decoding (invalid
// bytes never crash, they pass through), NFC normalization, Rust-compatible
// whitespace, lossy UTF-8 repair as Rust's String::from_utf8_lossy does, and
// the GPT-2 byte-level byte <-> code point table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ms::unicode {

struct Decoded {
  char32_t cp;  // the code point, or the raw byte value when !valid
  int len;      // bytes consumed (>= 1)
  bool valid;
};

// Decodes the UTF-8 sequence starting at s[i] (i < s.size()). An invalid or
// truncated sequence consumes one byte and reports valid = false.
Decoded decode_utf8(std::string_view s, size_t i);
void append_utf8(std::string& out, char32_t cp);

// Rust char::is_whitespace (the Unicode White_Space property).
bool is_whitespace(char32_t cp);

// True when NFC may change `s` (it holds a code point that is not NFC-stable
// on its own or that may combine with its neighbour). False is a guarantee.
bool may_change_under_nfc(std::string_view s);
// Canonical composition (NFC). Invalid UTF-8 bytes pass through unchanged.
std::string nfc(std::string_view s);

// Replaces each maximal invalid subpart with U+FFFD, like Rust's from_utf8_lossy.
std::string utf8_lossy(std::string_view bytes);
// Length of the longest prefix of `bytes` that does not end inside a sequence
// that could still become valid with more bytes (what a stream may emit now).
size_t utf8_emittable_prefix(std::string_view bytes);

// GPT-2 byte-level mapping: byte -> printable code point, and its inverse
// (-1 for code points that are not in the table).
const std::array<char32_t, 256>& byte_to_code_point();
int code_point_to_byte(char32_t cp);

}  // namespace ms::unicode
