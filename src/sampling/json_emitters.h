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
// Strings with a format or a pattern: json_regex.h.
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
  void string(int from, int to, int min_len = 0, int max_len = -1) { string_states(from, to, min_len, max_len, true); }
  // The content alone (no quotes, states untagged): a part of a product automaton (json_regex.h).
  void string_content(int from, int to, int min_len, int max_len) {
    string_states(from, to, min_len, max_len, false);
  }
  void number(int from, int to);
  void integer(int from, int to);
  // Integers in [lo, hi] (canonical decimal, no leading zeros; "-0" excluded).
  void integer_range(int from, int to, int64_t lo, int64_t hi);
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
  void string_states(int from, int to, int min_len, int max_len, bool quoted);
  int any_object_rule();
  int any_array_rule();

  GrammarBuilder& b_;
  int any_object_rule_ = -1, any_array_rule_ = -1;
};

}  // namespace ms
