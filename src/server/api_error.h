// OpenAI-style error objects: {"error": {"message", "type", "param", "code"}}
// with the HTTP status that goes with them. Every failure the HTTP layer
// reports, from a malformed body to an engine fault, is one ApiError.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ms::server {

using Json = nlohmann::ordered_json;

struct ApiError {
  int status = 0;  // 0: no error
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
  int retry_after_s = 0;  // > 0: sent as a Retry-After header (429 / 503)

  bool ok() const { return status == 0; }
  Json to_json() const;  // {"error": {...}}
};

inline ApiError no_error() { return {}; }
// 400 invalid_request_error naming `param`.
ApiError bad_request(std::string message, std::string param = "", std::string code = "");
ApiError not_found_error(std::string message, std::string code = "");
ApiError internal_api_error(std::string message);
// Engine / module Status -> ApiError: InvalidArgument / Unimplemented / OutOfRange
// -> 400, NotFound -> 404, ResourceExhausted -> 429 (Retry-After 1),
// Unavailable -> 503, anything else -> 500.
ApiError api_error_from_status(const Status& s, std::string param = "");

}  // namespace ms::server
