// Typed access to the fields of an OpenAI request body, shared by the chat /
// completions parser (openai_protocol.cpp) and the Responses API parser
// (responses_api.cpp): each getter leaves *out untouched when the field is
// absent or null (null means "the default" in OpenAI's API) and returns a 400
// naming the field when its type or range is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "server/api_error.h"

namespace ms::server {

// "null", "boolean", "integer", "number", "string", "array" or "object".
const char* json_type_name(const Json& v);
ApiError type_error(const std::string& param, const char* want, const Json& v);
ApiError range_error(const std::string& param, const std::string& range, const std::string& got);
ApiError unsupported_field(const std::string& param, const std::string& why = "");

// Documented fields this server does not act on, each with the reason:
// `ignored` ones are accepted (logged at debug); `null_only` ones are
// accepted as null or false and otherwise a 400 saying why. *known tells
// whether `key` is in either table.
using FieldReasons = std::map<std::string, const char*>;
ApiError check_documented_field(const std::string& key, const Json& value, const FieldReasons& ignored,
                                const FieldReasons& null_only, bool* known);

// The field `key` of `body`, or nullptr when it is absent or null.
const Json* field(const Json& body, const char* key);
ApiError get_bool(const Json& body, const char* key, bool* out);
ApiError get_string(const Json& body, const char* key, std::string* out);
ApiError get_int(const Json& body, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out);
// lo_open / hi_open: exclusive bounds.
ApiError get_float(const Json& body, const char* key, double lo, double hi, bool lo_open, bool hi_open, float* out);

}  // namespace ms::server

#define MS_API_CHECK(expr)             \
  do {                                 \
    ApiError ms_err_ = (expr);         \
    if (!ms_err_.ok()) return ms_err_; \
  } while (0)
