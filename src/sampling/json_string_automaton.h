// The content of a JSON string (the bytes between the quotes) as a small
// deterministic automaton over bytes, shared by the JSON-schema compiler
// (which emits these transitions into grammars) and the token vocabulary
// (which pre-scans every token through them once, so that masks of states
// inside a string cost a bitmap copy instead of a walk over the vocabulary).
// One definition for both is what keeps the two exact.
//
// Accepted: RFC 8259 string content in valid UTF-8 (no overlongs, no
// surrogates encoded in UTF-8, nothing above U+10FFFF), no raw control
// characters (< 0x20), escapes \" \\ \/ \b \f \n \r \t and \uXXXX whose first
// hex digit is not d/D (so that no escape names a surrogate: a lone surrogate
// is an error in strict parsers; the character itself can always be written
// as UTF-8 instead).
//
// Characters are counted for minLength / maxLength when their first byte is
// read (a character being completed counts already), and an escape counts as
// one character.
#pragma once

#include <cstdint>

namespace ms {

enum class StrSub : uint8_t {
  kBoundary = 0,  // between characters: the closing quote may come here
  kEscape,        // after a backslash
  kHex0,          // after \u: the first hex digit (not d/D)
  kHex1,
  kHex2,
  kHex3,
  kCont1,    // one continuation byte (80..BF) left
  kCont2,    // two left
  kCont2E0,  // after E0: A0..BF, then one more
  kCont2ED,  // after ED: 80..9F, then one more (no surrogates)
  kCont3,    // three left
  kCont3F0,  // after F0: 90..BF, then two more
  kCont3F4,  // after F4: 80..8F, then two more (<= U+10FFFF)
};
inline constexpr int kNumStrSubs = 13;

// One step of the string-content automaton from `sub` on byte `b`.
// ok: false when `b` is not allowed there (the closing quote at kBoundary is
// not content: the caller handles it and gets ok = false here).
// starts_char: `b` begins a new character (counted for length bounds).
struct StrStep {
  bool ok = false;
  StrSub next = StrSub::kBoundary;
  bool starts_char = false;
};

constexpr bool is_hex_digit(uint8_t b) {
  return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

constexpr StrStep str_step(StrSub sub, uint8_t b) {
  auto to = [](StrSub n, bool starts = false) { return StrStep{true, n, starts}; };
  auto cont = [b](uint8_t lo, uint8_t hi, StrSub n) { return b >= lo && b <= hi ? StrStep{true, n, false} : StrStep{}; };
  switch (sub) {
    case StrSub::kBoundary:
      if (b == '"' || b < 0x20) return {};
      if (b == '\\') return to(StrSub::kEscape, true);
      if (b < 0x80) return to(StrSub::kBoundary, true);
      if (b >= 0xC2 && b <= 0xDF) return to(StrSub::kCont1, true);
      if (b == 0xE0) return to(StrSub::kCont2E0, true);
      if (b == 0xED) return to(StrSub::kCont2ED, true);
      if (b >= 0xE1 && b <= 0xEF) return to(StrSub::kCont2, true);
      if (b == 0xF0) return to(StrSub::kCont3F0, true);
      if (b >= 0xF1 && b <= 0xF3) return to(StrSub::kCont3, true);
      if (b == 0xF4) return to(StrSub::kCont3F4, true);
      return {};
    case StrSub::kEscape:
      if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't')
        return to(StrSub::kBoundary);
      if (b == 'u') return to(StrSub::kHex0);
      return {};
    case StrSub::kHex0:
      return is_hex_digit(b) && b != 'd' && b != 'D' ? to(StrSub::kHex1) : StrStep{};
    case StrSub::kHex1:
      return is_hex_digit(b) ? to(StrSub::kHex2) : StrStep{};
    case StrSub::kHex2:
      return is_hex_digit(b) ? to(StrSub::kHex3) : StrStep{};
    case StrSub::kHex3:
      return is_hex_digit(b) ? to(StrSub::kBoundary) : StrStep{};
    case StrSub::kCont1:
      return cont(0x80, 0xBF, StrSub::kBoundary);
    case StrSub::kCont2:
      return cont(0x80, 0xBF, StrSub::kCont1);
    case StrSub::kCont2E0:
      return cont(0xA0, 0xBF, StrSub::kCont1);
    case StrSub::kCont2ED:
      return cont(0x80, 0x9F, StrSub::kCont1);
    case StrSub::kCont3:
      return cont(0x80, 0xBF, StrSub::kCont2);
    case StrSub::kCont3F0:
      return cont(0x90, 0xBF, StrSub::kCont2);
    case StrSub::kCont3F4:
      return cont(0x80, 0x8F, StrSub::kCont2);
  }
  return {};
}

}  // namespace ms
