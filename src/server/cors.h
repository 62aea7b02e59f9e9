// Cross-origin resource sharing for browser clients (web chat UIs): which
// page origins may read the server's responses (--allowed-origins), the
// answer to a preflight OPTIONS request, and the headers added to every
// response a browser page asked for. A preflight carries no API key, so it is
// answered before authentication; the real request that follows still needs
// the key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/http_message.h"

namespace ms::server {

class CorsPolicy {
 public:
  // "local" (the default): pages served from this machine, http(s)://localhost,
  // 127.0.0.1 or [::1] on any port. "*": any origin. "none": no cross-origin
  // reads. Otherwise a comma-separated list of exact origins
  // ("https://chat.example.com,http://localhost:3000").
  static Result<CorsPolicy> parse(const std::string& spec);

  bool allows(std::string_view origin) const;
  // Adds Access-Control-Allow-Origin (and Vary, Expose-Headers) when the
  // request comes from an allowed origin.
  void add_headers(const HttpRequest& req, HttpResponse* res) const;
  // A preflight: OPTIONS with Origin and Access-Control-Request-Method.
  static bool is_preflight(const HttpRequest& req);
  // The answer to a preflight for a path that supports `methods` ("GET, POST"):
  // 204 with the allowed method and headers, or 403 for an origin not allowed.
  HttpResponse preflight(const HttpRequest& req, const std::string& methods) const;
  std::string describe() const;

 private:
  enum class Mode { kLocal, kAny, kNone, kList };
  Mode mode_ = Mode::kLocal;
  std::vector<std::string> origins_;  // kList
};

}  // namespace ms::server
