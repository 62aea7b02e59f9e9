// The HTTP/1.1 front end: an event-driven server (Boost.Asio, one I/O
// thread; the request parser is Boost.Beast's) that reads every request,
// however slow its client, without holding a thread, with limits on header
// bytes and count, body bytes as read and as decoded, a deadline for the
// request head and one for the whole request, an idle limit for kept-alive
// connections and a cap on open connections answered with a fast 503.
// Handlers that may block (generation waits on its request channel) run on a
// bounded pool of handler threads; cheap ones (/health, /metrics) run on the
// I/O thread, so they answer even when every handler thread is busy. The
// server also does API-key auth and CORS before a body is read, pipelining,
// HTTP/1.0 (no chunked coding: streams are delimited by the close), a
// lifecycle (loading -> ready -> draining) and a graceful drain. It knows no
// route of its own: api_routes installs megaserve's.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/secret_compare.h"
#include "core/status.h"
#include "server/cors.h"
#include "server/http_message.h"
#include "server/peer_socket.h"

namespace ms::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                        // 0: any free port
  std::string api_key;                    // non-empty: Bearer auth on routes that ask for it
  size_t max_body_bytes = size_t(4) << 20;  // body as received and as decoded
  size_t max_header_bytes = size_t(32) << 10;  // request line + headers
  int max_headers = 128;                  // header fields per request
  int threads = 256;                      // handler threads: requests computed at once (streams included)
  int max_connections = 4096;             // open connections; more get a fast 503
  int header_timeout_s = 10;              // request line + headers must arrive within this
  int request_timeout_s = 30;             // the whole request (head + body) must arrive within this
  int write_timeout_s = 30;               // a client not reading its response for this long is dropped
  int keep_alive_timeout_s = 5;           // idle connections (between requests) are closed after this
  int keep_alive_max = 1000;              // requests per connection
  int listen_backlog = 4096;              // pending connections the kernel queues (capped by somaxconn)
  CorsPolicy cors;                        // --allowed-origins
};

enum class ServerState { kLoading, kReady, kDraining };
const char* server_state_name(ServerState s);

class Connection;

// One request and its response, as a handler sees it. Handlers on the I/O
// thread (Route::on_worker false) call respond() only; handlers on a handler
// thread may also stream, and poll should_stop() while they compute.
class Exchange {
 public:
  Exchange(Connection* conn, const HttpRequest* req, bool on_worker) : conn_(conn), req_(req), on_worker_(on_worker) {}
  const HttpRequest& request() const { return *req_; }

  // The whole response (once per request).
  void respond(HttpResponse res);
  // Starts a streamed response (handler threads only): chunked for HTTP/1.1
  // clients, delimited by closing the connection for HTTP/1.0. false when
  // the client is gone.
  bool begin_stream(HttpResponse head);
  // One piece of the stream; false when the client is gone, did not read for
  // the write timeout, or the server gave up waiting for in-flight requests.
  bool write(std::string_view data);
  // Ends the stream; `last` (the final error event, say) goes out first,
  // also when the server is aborting.
  void end_stream(std::string_view last = {});
  // While computing a non-streamed response: true when the client went away
  // or the server is aborting in-flight requests.
  bool should_stop();
  // The server gave up waiting for in-flight requests (drain timeout).
  bool aborted() const;
  // Ends the exchange without a response (the client is gone); `status`
  // (499) is what logs and metrics record.
  void abandon(int status);

  // What happened, for the connection and the observers.
  int status() const { return status_; }
  bool answered() const { return answered_; }
  bool must_close() const { return must_close_; }
  const HttpResponse* pending() const { return pending_.status ? &pending_ : nullptr; }  // I/O-thread responses

 private:
  friend class Connection;
  Connection* conn_;
  const HttpRequest* req_;
  bool on_worker_;
  bool answered_ = false;
  bool streaming_ = false;
  bool chunked_ = false;
  bool must_close_ = false;
  int status_ = 0;
  HttpResponse pending_;
  std::optional<PeerProbe> probe_;  // created on the first should_stop()
};

using RouteHandler = std::function<void(const HttpRequest&, Exchange&)>;

struct Route {
  std::string method;        // GET (HEAD is answered too) or POST
  std::string path;          // exact, or with `prefix` every path that starts with it
  bool prefix = false;
  RouteHandler handler;
  bool on_worker = false;    // may block or stream: runs on a handler thread (503 when all are busy)
  bool needs_auth = true;    // the API key applies, when one is set
  bool needs_model = true;   // 503 "loading" until the server is ready
  bool essential = false;    // /health, /metrics: answered on over-cap connections and while draining
};

struct HttpStats {
  int connections_open = 0;
  int requests_in_flight = 0;             // on handler threads
  uint64_t connections_rejected = 0;      // over --max-connections
  uint64_t requests_busy_rejected = 0;    // every handler thread busy
  uint64_t requests_timed_out = 0;        // head or body not received in time (408)
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions options);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before start().
  void add_route(Route route);
  Route& last_route();  // the route added last, to adjust its flags
  // Called after every request with its final status (499 for an abandoned
  // one), from the thread that answered it.
  void set_observer(std::function<void(const HttpRequest&, int status)> observer);

  // Takes the port (error naming host:port when it is in use): port() is
  // then known, and the kernel queues connections until start().
  Status bind();
  // Serves on a background I/O thread from now on; call after bind().
  void start();
  int port() const { return port_; }

  void set_state(ServerState s);
  ServerState state() const;

  // Graceful drain, in this order: begin_drain() (state draining: new
  // requests but /health and /metrics get 503 and every response closes its
  // connection; idle connections are closed), wait_idle(deadline) (true when
  // no request is in flight), abort_in_flight() (what is left ends now:
  // handlers see aborted() and answer 503), then stop().
  void begin_drain();
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  void abort_in_flight();
  // Closes everything and joins the threads (handlers are waited for).
  void stop();

  HttpStats stats() const;
  const HttpOptions& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// Whether the Authorization header is "Bearer <key>", in time that says
// nothing about the key (core/secret_compare.h).
bool check_bearer(const std::string& header, const Secret& key);

}  // namespace ms::server
