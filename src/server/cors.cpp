#include "server/cors.h"

#include <cctype>

#include "server/api_error.h"

namespace ms::server {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// "scheme://host[:port]" with a plain host (letters, digits, '.', '-') or a
// bracketed IPv6 literal; what browsers send in Origin.
bool well_formed_origin(std::string_view o) {
  size_t sep = o.find("://");
  if (sep == std::string_view::npos || sep == 0) return false;
  for (char c : o.substr(0, sep)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return false;
  }
  std::string_view rest = o.substr(sep + 3);
  if (rest.empty()) return false;
  size_t host_end = 0;
  if (rest.front() == '[') {
    host_end = rest.find(']');
    if (host_end == std::string_view::npos) return false;
    for (char c : rest.substr(1, host_end - 1)) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
    }
    ++host_end;
  } else {
    while (host_end < rest.size() && rest[host_end] != ':') {
      char c = rest[host_end];
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') return false;
      ++host_end;
    }
    if (host_end == 0) return false;
  }
  std::string_view port = rest.substr(host_end);
  if (port.empty()) return true;
  if (port.front() != ':' || port.size() < 2 || port.size() > 6) return false;
  for (char c : port.substr(1)) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool is_local_origin(std::string_view o) {
  if (!well_formed_origin(o)) return false;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (o.substr(0, scheme.size()) != scheme) continue;
    std::string_view host = o.substr(scheme.size());
    host = host.substr(0, host.front() == '[' ? host.find(']') + 1 : host.find(':'));
    return host == "localhost" || host == "127.0.0.1" || host == "[::1]";
  }
  return false;
}

// A comma-separated list of header names (tokens), as a browser sends in
// Access-Control-Request-Headers; false if anything else is in it.
bool header_token_list(std::string_view s) {
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != ',' && c != ' ') return false;
  }
  return true;
}

}  // namespace

Result<CorsPolicy> CorsPolicy::parse(const std::string& spec) {
  CorsPolicy p;
  std::string_view s = trim(spec);
  if (s.empty() || s == "local") {
    p.mode_ = Mode::kLocal;
  } else if (s == "*") {
    p.mode_ = Mode::kAny;
  } else if (s == "none") {
    p.mode_ = Mode::kNone;
  } else {
    p.mode_ = Mode::kList;
    while (!s.empty()) {
      size_t comma = s.find(',');
      std::string_view item = trim(s.substr(0, comma));
      s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
      if (item.empty()) continue;
      if (item.back() == '/') item.remove_suffix(1);
      if (!well_formed_origin(item)) {
        return invalid_argument("--allowed-origins: '" + std::string(item) +
                                "' is not an origin (scheme://host[:port]); or use local, * or none");
      }
      p.origins_.emplace_back(item);
    }
    if (p.origins_.empty()) return invalid_argument("--allowed-origins: no origin given");
  }
  return p;
}

bool CorsPolicy::allows(std::string_view origin) const {
  switch (mode_) {
    case Mode::kAny: return well_formed_origin(origin) || origin == "null";
    case Mode::kNone: return false;
    case Mode::kLocal: return is_local_origin(origin);
    case Mode::kList:
      for (const auto& o : origins_) {
        if (iequals(o, origin)) return true;
      }
      return false;
  }
  return false;
}

void CorsPolicy::add_headers(const HttpRequest& req, HttpResponse* res) const {
  if (!req.has_header("Origin")) return;
  res->set_header("Vary", "Origin");
  const std::string origin = req.header("Origin");
  if (!allows(origin)) return;
  res->set_header("Access-Control-Allow-Origin", mode_ == Mode::kAny ? "*" : origin);
  res->set_header("Access-Control-Expose-Headers", "Retry-After");
}

bool CorsPolicy::is_preflight(const HttpRequest& req) {
  return req.method == "OPTIONS" && req.has_header("Origin") && req.has_header("Access-Control-Request-Method");
}

HttpResponse CorsPolicy::preflight(const HttpRequest& req, const std::string& methods) const {
  HttpResponse res;
  const std::string origin = req.header("Origin");
  res.set_header("Vary", "Origin");
  if (!allows(origin)) {
    ApiError e;
    e.status = 403;
    e.message = "Origin '" + origin + "' is not allowed (see --allowed-origins)";
    e.code = "origin_not_allowed";
    res.status = 403;
    res.body = e.to_json().dump(-1, ' ', false, Json::error_handler_t::replace);
    return res;
  }
  res.status = 204;
  res.content_type.clear();
  res.set_header("Access-Control-Allow-Origin", mode_ == Mode::kAny ? "*" : origin);
  res.set_header("Access-Control-Allow-Methods", methods + ", OPTIONS");
  // The SDKs send their own headers (x-stainless-*, openai-*); a browser
  // asks for each by name, and "*" would not cover Authorization.
  std::string asked = req.header("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers",
                 !asked.empty() && header_token_list(asked) ? asked : "Authorization, Content-Type");
  res.set_header("Access-Control-Max-Age", "600");
  return res;
}

std::string CorsPolicy::describe() const {
  switch (mode_) {
    case Mode::kAny: return "*";
    case Mode::kNone: return "none";
    case Mode::kLocal: return "local";
    case Mode::kList: {
      std::string s;
      for (const auto& o : origins_) s += (s.empty() ? "" : ",") + o;
      return s;
    }
  }
  return "";
}

}  // namespace ms::server
