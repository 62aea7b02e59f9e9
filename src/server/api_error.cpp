#include "server/api_error.h"

namespace ms::server {

Json ApiError::to_json() const {
  Json e = Json::object();
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? Json(nullptr) : Json(param);
  e["code"] = code.empty() ? Json(nullptr) : Json(code);
  return Json{{"error", e}};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError not_found_error(std::string message, std::string code) {
  ApiError e;
  e.status = 404;
  e.message = std::move(message);
  e.type = "not_found_error";
  e.code = std::move(code);
  return e;
}

ApiError internal_api_error(std::string message) {
  ApiError e;
  e.status = 500;
  e.message = std::move(message);
  e.type = "internal_server_error";
  return e;
}

ApiError api_error_from_status(const Status& s, std::string param) {
  ApiError e;
  e.message = s.message();
  e.param = std::move(param);
  switch (s.code()) {
    case StatusCode::kOk: return no_error();
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnimplemented:
      e.status = 400;
      break;
    case StatusCode::kOutOfRange:
      e.status = 400;
      e.code = "context_length_exceeded";
      break;
    case StatusCode::kNotFound:
      e.status = 404;
      e.type = "not_found_error";
      break;
    case StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "queue_full";
      e.retry_after_s = 1;
      break;
    case StatusCode::kUnavailable:
      e.status = 503;
      e.type = "service_unavailable";
      e.retry_after_s = 5;
      break;
    default:
      e.status = 500;
      e.type = "internal_server_error";
      break;
  }
  return e;
}

}  // namespace ms::server
