// HTTP/1.x requests and responses as the server's handlers see them,
// independent of the parser and the socket code: a parsed request (method,
// path, version, headers, decoded body) and a response (status, headers,
// body), plus the bytes of a response head on the wire.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ms::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// Case-insensitive ASCII comparison (header names, tokens).
bool iequals(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;      // as received: "GET", "POST", ...
  std::string target;      // request-target: "/v1/models?x=1"
  std::string path;        // target without the query
  int version = 11;        // 10: HTTP/1.0, 11: HTTP/1.1
  HeaderList headers;      // as received, in order
  std::string body;        // after Content-Encoding is undone
  bool keep_alive = true;  // the client allows another request on this connection

  // First value of a header (case-insensitive name), "" if absent.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  HeaderList headers;  // extra headers (Retry-After, Allow, CORS, ...)
  std::string body;

  void set_header(std::string name, std::string value);
};

// The standard reason phrase of a status code ("Unknown" for others).
const char* reason_phrase(int status);

// "HTTP/1.1 <status> <reason>\r\n" then Date, Server, the response's headers,
// Content-Type (when the response has one) and `framing` (already-formatted
// lines such as "Content-Length: 12\r\n"), then the blank line.
std::string response_head(const HttpResponse& res, const std::string& framing);

}  // namespace ms::server
