#include "server/http_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <cerrno>
#include <cstdio>

#include "core/log.h"

namespace ms::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr size_t kReadChunk = 16384;
// The lingering close drops what the client still sends for this long (it
// costs a 16 KiB read buffer, not memory per byte): a client uploading a body
// we refused early must get to the end of its upload, or the reset from
// closing on unread data destroys our answer before it reads it.
constexpr auto kLingerTime = std::chrono::seconds(2);

HttpResponse error_response(int status, const std::string& message, const std::string& code,
                            const std::string& type = "") {
  HttpResponse res;
  res.status = status;
  std::string t = type;
  if (t.empty()) t = status >= 500 ? (status == 503 ? "service_unavailable" : "internal_server_error")
                                   : "invalid_request_error";
  // Messages are ours (no client bytes), so they need no JSON escaping
  // beyond quotes, which they do not contain.
  res.body = "{\"error\":{\"message\":\"" + message + "\",\"type\":\"" + t + "\",\"param\":null,\"code\":" +
             (code.empty() ? std::string("null") : "\"" + code + "\"") + "}}";
  return res;
}

std::string hex(size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%zx", n);
  return buf;
}

}  // namespace

ServerCore::ServerCore(HttpOptions o) : options(std::move(o)), pool(options.threads) {
  if (!options.api_key.empty()) {
    auto k = Secret::create(options.api_key);
    if (k.is_ok()) api_key = std::move(k.value());
    else MS_LOG(Error) << "--api-key: " << k.status().message() << "; every request that needs it will be refused";
  }
  limits.max_body_bytes = options.max_body_bytes;
  limits.max_header_bytes = options.max_header_bytes;
  limits.max_headers = options.max_headers;
}

const Route* ServerCore::find_route(const HttpRequest& req, std::string* methods) const {
  methods->clear();
  const Route* found = nullptr;
  for (const Route& r : routes) {
    bool path_ok = r.prefix ? req.path.size() > r.path.size() && req.path.compare(0, r.path.size(), r.path) == 0
                            : req.path == r.path;
    if (!path_ok) continue;
    if (methods->find(r.method) == std::string::npos) *methods += (methods->empty() ? "" : ", ") + r.method;
    if (r.method == req.method || (req.method == "HEAD" && r.method == "GET")) found = found ? found : &r;
  }
  return found;
}

// ---- Exchange -------------------------------------------------------------

void Exchange::respond(HttpResponse res) {
  if (answered_) return;
  answered_ = true;
  status_ = res.status;
  if (!on_worker_) {
    pending_ = std::move(res);
    return;
  }
  must_close_ = conn_->decide_close(must_close_);
  conn_->finish_response(res);
  std::string out = response_head(res, conn_->framing(res, must_close_, false));
  if (req_->method != "HEAD") out += res.body;
  if (!conn_->write_sync(out, /*force=*/true)) must_close_ = true;
}

bool Exchange::begin_stream(HttpResponse head) {
  if (answered_ || !on_worker_) return false;
  answered_ = true;
  streaming_ = true;
  status_ = head.status;
  chunked_ = req_->version >= 11;
  must_close_ = conn_->decide_close(must_close_ || !chunked_);
  conn_->finish_response(head);
  if (!conn_->write_sync(response_head(head, conn_->framing(head, must_close_, true)), false)) {
    must_close_ = true;
    return false;
  }
  return true;
}

bool Exchange::write(std::string_view data) {
  if (!streaming_) return false;
  if (data.empty()) return true;
  bool ok = chunked_ ? conn_->write_sync(hex(data.size()) + "\r\n" + std::string(data) + "\r\n", false)
                     : conn_->write_sync(data, false);
  if (!ok) must_close_ = true;
  return ok;
}

void Exchange::end_stream(std::string_view last) {
  if (!streaming_) return;
  streaming_ = false;
  std::string out;
  if (!last.empty()) out = chunked_ ? hex(last.size()) + "\r\n" + std::string(last) + "\r\n" : std::string(last);
  if (chunked_) out += "0\r\n\r\n";
  if (!out.empty() && !conn_->write_sync(out, true)) must_close_ = true;
}

bool Exchange::should_stop() {
  if (conn_->core_.abort) return true;
  if (!on_worker_) return false;
  if (!probe_) probe_.emplace(conn_->socket_.native_handle(), req_->version >= 11);
  return probe_->gone();
}

bool Exchange::aborted() const { return conn_->core_.abort; }

void Exchange::abandon(int status) {
  if (answered_) return;
  answered_ = true;
  status_ = status;
  must_close_ = true;
}

// ---- Connection -----------------------------------------------------------

Connection::Connection(ServerCore& core, tcp::socket socket, bool overflow)
    : core_(core), socket_(std::move(socket)), timer_(socket_.get_executor()), overflow_(overflow),
      accepted_(Clock::now()) {
  (overflow_ ? core_.overflow_open : core_.open)++;
}

Connection::~Connection() {
  (overflow_ ? core_.overflow_open : core_.open)--;
  std::lock_guard<std::mutex> l(core_.mu);
  core_.connections.erase(this);
}

void Connection::start() {
  {
    std::lock_guard<std::mutex> l(core_.mu);
    core_.connections.emplace(this, weak_from_this());
  }
  buffer_.max_size(core_.limits.max_header_bytes + kReadChunk * 4);
  read_head();
}

void Connection::close_if_idle() {
  if (phase_ == Phase::kIdle) close_now();
}

void Connection::close_now() {
  if (phase_ == Phase::kClosed) return;
  if (phase_ == Phase::kHandling) return;  // a handler thread owns the socket; it hands it back
  phase_ = Phase::kClosed;
  disarm();
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

void Connection::arm(Clock::time_point deadline) {
  timed_out_ = false;
  const uint64_t gen = ++timer_gen_;
  timer_.expires_at(deadline);
  timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->timer_gen_ || self->phase_ == Phase::kClosed) return;
    self->timed_out_ = true;
    beast::error_code e;
    self->socket_.cancel(e);
  });
}

void Connection::disarm() {
  ++timer_gen_;
  timer_.cancel();
}

beast::error_code Connection::translate(beast::error_code ec) const {
  if (ec == net::error::operation_aborted && timed_out_) return beast::error::timeout;
  return ec;
}

void Connection::wait_for_request() {
  if (core_.state == ServerState::kDraining) return linger_close();
  phase_ = Phase::kIdle;
  if (buffer_.size() > 0) return read_head();  // a pipelined request is already here
  arm(Clock::now() + std::chrono::seconds(core_.options.keep_alive_timeout_s));
  socket_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (self->phase_ == Phase::kClosed) return;
    self->disarm();
    self->buffer_.commit(n);
    if (ec) return self->close_now();  // idle limit, or the client closed between requests
    self->read_head();
  });
}

void Connection::read_head() {
  phase_ = Phase::kReading;
  reader_.emplace(core_.limits);
  route_ = nullptr;
  // The first request's clock starts at accept (a client that connects and
  // sends nothing is dropped at the head deadline); later ones at their first byte.
  Clock::time_point start = requests_ == 0 ? accepted_ : Clock::now();
  int head_s = overflow_ ? kOverflowHeaderTimeoutS : core_.options.header_timeout_s;
  request_deadline_ = start + std::chrono::seconds(std::max(head_s, core_.options.request_timeout_s));
  arm(start + std::chrono::seconds(head_s));
  http::async_read_header(socket_, buffer_, *reader_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->phase_ == Phase::kClosed) return;
    self->on_head(self->translate(ec));
  });
}

void Connection::on_head(const beast::error_code& ec) {
  if (ec) {
    disarm();
    return fail_read(ec);
  }
  if (std::optional<HttpResponse> early = check_head(reader_->request())) {
    // Refused before its body was read: the rest of the body is not read,
    // so the connection cannot carry another request.
    return send_async(std::move(*early), !reader_->is_done());
  }
  if (reader_->is_done()) {
    disarm();
    return dispatch();
  }
  arm(request_deadline_);
  if (!reader_->expects_continue()) return read_body();
  out_ = "HTTP/1.1 100 Continue\r\n\r\n";
  net::async_write(socket_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->phase_ == Phase::kClosed) return;
    if (ec) return self->close_now();
    self->read_body();
  });
}

void Connection::read_body() {
  http::async_read(socket_, buffer_, *reader_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->phase_ == Phase::kClosed) return;
    ec = self->translate(ec);
    self->disarm();
    if (ec) return self->fail_read(ec);
    self->dispatch();
  });
}

void Connection::fail_read(const beast::error_code& ec) {
  Rejection r = reader_->rejection_for(ec);
  if (r.status == 0) return close_now();
  if (r.status == 408) ++core_.timed_out;
  if (!reader_->is_header_done()) {
    // Nothing of the request is trustworthy: answer as to an HTTP/1.1
    // client without CORS headers, and observe it as an unknown endpoint.
    reader_->request().headers.clear();
    reader_->request().path.clear();
    reader_->request().method.clear();
  }
  send_async(error_response(r.status, r.message, r.code), true);
}

std::optional<HttpResponse> Connection::check_head(const HttpRequest& req) {
  const HttpOptions& o = core_.options;
  std::string methods;
  route_ = core_.find_route(req, &methods);
  if (req.method == "OPTIONS") {
    if (methods.empty()) return error_response(404, "Not found: OPTIONS " + req.path, "not_found", "not_found_error");
    if (CorsPolicy::is_preflight(req)) return o.cors.preflight(req, methods);
    HttpResponse res;
    res.status = 204;
    res.content_type.clear();
    res.set_header("Allow", methods + ", OPTIONS");
    return res;
  }
  if (!route_) {
    if (methods.empty()) {
      return error_response(404, "Not found: " + req.method + " " + req.path, "not_found", "not_found_error");
    }
    HttpResponse res = error_response(405, "Method " + req.method + " is not allowed on " + req.path + " (use " +
                                               methods + ")",
                                      "method_not_allowed");
    res.set_header("Allow", methods);
    return res;
  }
  if (overflow_ && !route_->essential) {
    HttpResponse res = error_response(503, "Too many open connections (--max-connections " +
                                               std::to_string(o.max_connections) + "); retry later",
                                      "too_many_connections");
    res.set_header("Retry-After", "1");
    return res;
  }
  if (!o.api_key.empty() && route_->needs_auth && !check_bearer(req.header("Authorization"), core_.api_key)) {
    HttpResponse res = error_response(401, "Missing or invalid API key (expected 'Authorization: Bearer <key>')",
                                      "invalid_api_key", "authentication_error");
    res.set_header("WWW-Authenticate", "Bearer");
    return res;
  }
  ServerState st = core_.state;
  if (st == ServerState::kLoading && route_->needs_model) {
    HttpResponse res = error_response(503, "The model is loading; retry later", "model_loading");
    res.set_header("Retry-After", "5");
    return res;
  }
  if (st == ServerState::kDraining && !route_->essential) {
    return error_response(503, "The server is shutting down", "shutting_down");
  }
  return std::nullopt;
}

void Connection::run_handler(Exchange& ex) {
  const HttpRequest& req = reader_->request();
  try {
    route_->handler(req, ex);
  } catch (const std::exception& e) {
    MS_LOG(Error) << "handler exception on " << req.path << ": " << e.what();
    if (!ex.answered()) ex.respond(error_response(500, "internal error", ""));
  } catch (...) {
    if (!ex.answered()) ex.respond(error_response(500, "internal error", ""));
  }
  if (!ex.answered()) ex.respond(error_response(500, "the handler produced no response", ""));
  if (ex.streaming_) ex.end_stream();
}

void Connection::dispatch() {
  if (!route_->on_worker) {
    Exchange ex(this, &reader_->request(), false);
    run_handler(ex);
    HttpResponse res = ex.pending() ? *ex.pending() : error_response(500, "no response", "");
    return send_async(std::move(res), false);
  }
  phase_ = Phase::kHandling;
  disarm();
  ++core_.in_flight;
  bool started = core_.pool.try_run([self = shared_from_this()] {
    Exchange ex(self.get(), &self->reader_->request(), true);
    self->run_handler(ex);
    self->observe(ex.status());
    const bool close = ex.must_close(), failed = self->write_failed_;
    --self->core_.in_flight;
    // Back to the I/O thread, which owns the socket again from here.
    net::post(*self->core_.io, [self, close, failed] {
      self->phase_ = Phase::kWriting;
      if (failed) return self->close_now();
      self->after_response(close);
    });
  });
  if (!started) {
    --core_.in_flight;
    ++core_.busy_rejected;
    phase_ = Phase::kReading;
    HttpResponse res = error_response(503, "Server busy: all " + std::to_string(core_.options.threads) +
                                               " handler threads (--http-threads) are in use; retry later",
                                      "server_busy");
    res.set_header("Retry-After", "1");
    send_async(std::move(res), false);
  }
}

bool Connection::decide_close(bool close) const {
  const HttpRequest& req = reader_->request();
  return close || !req.keep_alive || core_.state == ServerState::kDraining || overflow_ ||
         requests_ + 1 >= core_.options.keep_alive_max;
}

std::string Connection::framing(const HttpResponse& res, bool close, bool stream) const {
  std::string f;
  if (stream) {
    if (reader_->request().version >= 11) f += "Transfer-Encoding: chunked\r\n";
  } else if (res.status != 204 && res.status != 304) {
    f += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  }
  if (close) {
    f += "Connection: close\r\n";
  } else if (reader_->request().version < 11) {
    f += "Connection: keep-alive\r\n";
  }
  return f;
}

void Connection::finish_response(HttpResponse& res) {
  if (res.status == 503 || res.status == 429) {
    bool has = false;
    for (const auto& h : res.headers) has = has || iequals(h.first, "Retry-After");
    if (!has && core_.state != ServerState::kDraining) res.set_header("Retry-After", "1");
  }
  if (!CorsPolicy::is_preflight(reader_->request())) core_.options.cors.add_headers(reader_->request(), &res);
}

void Connection::observe(int status) {
  if (core_.observer) core_.observer(reader_->request(), status);
}

void Connection::send_async(HttpResponse res, bool close) {
  phase_ = Phase::kWriting;
  close = decide_close(close);
  finish_response(res);
  out_ = response_head(res, framing(res, close, false));
  if (reader_->request().method != "HEAD") out_ += res.body;
  observe(res.status);
  arm(Clock::now() + std::chrono::seconds(core_.options.write_timeout_s));
  net::async_write(socket_, net::buffer(out_), [self = shared_from_this(), close](beast::error_code ec, size_t) {
    if (self->phase_ == Phase::kClosed) return;
    self->disarm();
    if (ec) return self->close_now();
    self->after_response(close);
  });
}

void Connection::after_response(bool close) {
  ++requests_;
  out_.clear();
  if (close || core_.state == ServerState::kDraining) return linger_close();
  wait_for_request();
}

void Connection::linger_close() {
  phase_ = Phase::kClosing;
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close_now();
  buffer_.clear();
  arm(Clock::now() + kLingerTime);
  linger_read();
}

void Connection::linger_read() {
  socket_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (self->phase_ == Phase::kClosed) return;
    (void)n;
    self->buffer_.clear();
    if (ec) return self->close_now();
    self->linger_read();
  });
}

bool Connection::write_sync(std::string_view data, bool force) {
  if (write_failed_) return false;
  const int fd = socket_.native_handle();
  auto deadline = Clock::now() + std::chrono::seconds(core_.options.write_timeout_s);
  bool aborting = false;
  while (!data.empty()) {
    if (core_.abort && !aborting) {
      if (!force) return false;
      aborting = true;  // the last bytes get a short grace, not the full write timeout
      deadline = std::min(deadline, Clock::now() + std::chrono::seconds(1));
    }
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
  }
  if (!data.empty()) write_failed_ = true;
  return data.empty();
}

}  // namespace ms::server
