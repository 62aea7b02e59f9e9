// The pieces of JSON a schema compiles to, emitted into a GrammarBuilder as
// NFA paths between two given states (from, to) of one rule.
//
// Whitespace policy (every JSON grammar here): none before or after the
// top-level value; after '{', '[', ',' and ':' and before '}' and ']' one of:
// nothing, one space, or one newline followed by up to kMaxIndent spaces or
// tabs. That admits compact output, Python's json.dumps default and
// pretty-printing (JSON.stringify(v, null, 2)), and keeps a model from
// looping on whitespace forever. No whitespace before ',' or ':'.
//
// Numbers: integer parts of at most kMaxIntDigits digits, fractions of at
// most kMaxFracDigits, exponents of at most kMaxExpDigits (a model cannot
// emit digits forever; the bounds exceed what doubles and int64 hold).
//
// Any JSON value (json_object, schemas without a type): objects and arrays
// nest through two recursive rules, created on first use.
//
// String formats (JSON Schema "format", as OpenAI's strict mode supports
// them) generate a subset of what each format allows, chosen to pass strict
// validators (RFC 3339 via ajv-formats "full" or Python's rfc3339-validator,
// pydantic's EmailStr):
//   date       YYYY-MM-DD with the day within its month (February to the
//              28th: no leap-year arithmetic in a grammar),
//   time       HH:MM:SS[.ffffff](Z|+HH:MM|-HH:MM) (an offset, as RFC 3339 requires),
//   date-time  date "T" time,
//   uuid       8-4-4-4-12 hex digits,
//   email      dot-separated atoms of [A-Za-z0-9_+-] (at most 3 of 20) "@"
//              1-3 labels of [A-Za-z0-9-] (not starting or ending with '-')
//              and a 2-10 letter top-level label.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "sampling/grammar.h"

namespace ms {

inline constexpr int kMaxIndent = 20;
inline constexpr int kMaxIntDigits = 20;
inline constexpr int kMaxFracDigits = 20;
inline constexpr int kMaxExpDigits = 3;
// Longest minLength / maxLength a string may ask for (states grow with it).
inline constexpr int kMaxStringLengthBound = 4096;

class JsonEmitter {
 public:
  explicit JsonEmitter(GrammarBuilder& b) : b_(b) {}
  GrammarBuilder& builder() { return b_; }
  int state(int rule) { return b_.new_state(rule); }

  void ws(int from, int to);
  void lit(int from, const std::string& text, int to) { b_.literal(from, text, to); }
  // A string: quote, content of [min_len, max_len] characters (max -1: unbounded), quote.
  void string(int from, int to, int min_len = 0, int max_len = -1);
  void number(int from, int to);
  void integer(int from, int to);
  // Integers in [lo, hi] (canonical decimal, no leading zeros; "-0" excluded).
  void integer_range(int from, int to, int64_t lo, int64_t hi);
  // A string in `format` (above); false when the format is not one of them.
  bool formatted_string(int from, int to, const std::string& format);
  void boolean(int from, int to);
  void null(int from, int to) { lit(from, "null", to); }
  // Any JSON value / any object, inline in from's rule (nested containers call the recursive rules).
  void any_value(int from, int to);
  void any_object(int from, int to);
  // An object with any keys whose values `value` emits (between two states it is given).
  Status object_of(int from, int to, const std::function<Status(int, int)>& value);
  void any_array(int from, int to);

 private:
  int rule(int s) const { return b_.rule_of_state(s); }
  void digits(int from, int to, int min_n, int max_n, bool first_nonzero);
  void fixed_len_range(int from, int to, const std::string& lo, const std::string& hi);
  void nonneg_range(int from, int to, uint64_t lo, uint64_t hi);
  void date(int from, int to);
  void time(int from, int to);
  void run(int from, int to, const ByteSet& set, int min_n, int max_n);
  int any_object_rule();
  int any_array_rule();

  GrammarBuilder& b_;
  int any_object_rule_ = -1, any_array_rule_ = -1;
};

}  // namespace ms
