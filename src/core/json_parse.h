// Bounded JSON parsing: every place megaserve parses JSON it did not write
// (request bodies, tool-call argument strings, model output, checkpoint files)
// goes through here, so no parsed value is nested deeper than a fixed limit.
// nlohmann's parser itself is iterative, but dump(), copies, comparisons and
// our own walks (the Jinja value conversion, schema handling) recurse once per
// level: a 40k-deep array in an 80 KB request overflowed the stack. Bounding
// the depth where the value is born makes every later walk bounded by
// construction. The parse stops at the first level past the limit, so a deep
// document costs no more than a shallow prefix of it.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ms {

// Arrays and objects nested deeper than this are rejected. Real requests nest
// ~10 levels (a tool's JSON schema adds 2 per nested object property); 128
// leaves room for deeply nested schemas while keeping recursion shallow.
inline constexpr int kMaxJsonDepth = 128;

// Parses `text` (one JSON value, surrounding whitespace allowed). Errors:
//   OutOfRange:      nested deeper than max_depth ("... deeper than the limit of
//                    128 levels (at byte N)")
//   InvalidArgument: not valid JSON ("parse error at line L, column C: <what>")
Result<nlohmann::json> parse_json(std::string_view text, int max_depth = kMaxJsonDepth);
Result<nlohmann::ordered_json> parse_ordered_json(std::string_view text, int max_depth = kMaxJsonDepth);

// A JSON file (checkpoint configs, indexes), parsed as above. Errors name
// the path: NotFound "PATH: cannot open", InvalidArgument "PATH: not valid
// JSON (<why>)" (also for a document nested too deep).
Result<nlohmann::json> read_json_file(const std::string& path);

// True when `s` came from a parse that hit the depth limit.
inline bool is_json_too_deep(const Status& s) { return s.code() == StatusCode::kOutOfRange; }

}  // namespace ms
