// JSON Schema "pattern" (an ECMA-262 regular expression) and "format",
// compiled into byte automata over the JSON-encoded content of a string (the
// bytes between its quotes), so that a string's grammar can require them.
//
// The supported regular-expression subset: literals (UTF-8 included),
// escapes \d \w \s \D \W \S \n \t \r \f \v \0 \xHH \uHHHH and escaped
// punctuation, '.', classes [...] / [^...] with ranges (beyond ASCII: at most
// 256 code points), groups (...) and (?:...), alternation, quantifiers
// ? * + {n} {n,} {n,m} (lazy forms too; bounds up to 1000), and '^' / '$' at
// the start / end of a top-level alternative. As JSON Schema says, a pattern
// is not anchored: an alternative without '^' / '$' may be preceded / followed
// by any characters. Refused with an error naming the construct:
// backreferences, lookaround, \b \B \p \c, named groups.
//
// What is generated is a subset of what the pattern matches, chosen to be
// simple to emit exactly: '.', negated classes, \D \W \S and the unanchored
// padding produce printable ASCII only. Characters that JSON must escape are
// emitted escaped (\" \\ \n \t \r \b \f, other controls as \u00XX), so the
// decoded string is what matched.
//
// Formats are patterns of this subset (format_pattern). A string with several
// constraints (format, pattern, minLength / maxLength) is the product of their
// automata (emit_string_product).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sampling/grammar.h"

namespace ms {

// Emits into b, between from and to (states of one rule), the encoded
// content of the strings `pattern` matches (see above for the subset).
Status emit_pattern(GrammarBuilder& b, int from, int to, std::string_view pattern);

// The pattern that generates a supported "format", or nullptr:
//   date       YYYY-MM-DD, the day within its month (February to the 28th),
//   time       HH:MM:SS[.ffffff](Z|+HH:MM|-HH:MM) (RFC 3339 requires the offset),
//   date-time  date "T" HH:MM:SS[.ffffff]Z (UTC: what RFC 3339 and zod's
//              default datetime() both accept),
//   uuid       RFC 9562: 8-4-4-4-12 hex digits, version 1-8, variant 8/9/a/b,
//   email      dot-separated atoms of [A-Za-z0-9_+-] (at most 3 of 20) "@",
//              1-3 labels of [A-Za-z0-9-] not starting or ending with '-', "."
//              and a 2-10 letter top-level label.
// Each is a subset that strict validators accept (ajv-formats "full",
// Python's rfc3339-validator, email-validator, zod 4's own patterns).
const char* format_pattern(std::string_view format);

// One constraint of a string's content: an automaton built by `emit` into a
// rule-0 grammar of its own (a pattern, a format, a length bound).
struct StringPart {
  std::string what;  // for errors: "pattern", "format 'email'", ...
  std::function<Status(GrammarBuilder&, int, int)> emit;
};

// Emits between from and to (one rule of b) a JSON string (quotes included)
// whose content satisfies every part: the product of their automata.
Status emit_string_product(GrammarBuilder& b, int from, int to, const std::vector<StringPart>& parts,
                           const GrammarLimits& limits);

}  // namespace ms
