// Internal to the HTTP server (http_server.cpp, http_connection.cpp): what
// the connections share (ServerCore) and one connection's state machine.
//
// A connection lives on the I/O thread: wait for a request (idle limit), read
// its head (head deadline) and body (request deadline), check it (route,
// auth, CORS, lifecycle), then either answer on the I/O thread or hand the
// socket to a handler thread, which writes the response itself (blocking,
// bounded by the write timeout) and hands the socket back. Only one side
// touches the socket at a time: the I/O thread has no operation pending on
// it while a handler thread owns it. Then the next request (pipelined bytes
// are already in the buffer) or a lingering close: the write side is shut
// and what the client still sends is read and dropped for a moment, so an
// early answer (413, 401) is not destroyed by a reset.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/http_server.h"
#include "server/request_reader.h"
#include "server/worker_pool.h"

namespace ms::server {

// Over-cap connections: this many more are read (briefly) so /health and
// /metrics still answer; beyond them a connection gets a canned 503 at once.
constexpr int kOverflowConnections = 64;
constexpr int kOverflowHeaderTimeoutS = 2;

struct ServerCore {
  explicit ServerCore(HttpOptions o);

  // The route for req's method and path; null if none, with *methods set to
  // the methods the path has ("" when the path is unknown).
  const Route* find_route(const HttpRequest& req, std::string* methods) const;

  HttpOptions options;
  Secret api_key;  // options.api_key, zero-padded once: comparing it never depends on its length
  RequestLimits limits;
  std::vector<Route> routes;  // fixed once serving
  std::function<void(const HttpRequest&, int)> observer;
  boost::asio::io_context* io = nullptr;
  WorkerPool pool;
  std::atomic<ServerState> state{ServerState::kLoading};
  std::atomic<bool> abort{false};  // in-flight requests end now (drain timeout, stop)
  std::atomic<int> open{0}, overflow_open{0}, in_flight{0};
  std::atomic<uint64_t> rejected{0}, busy_rejected{0}, timed_out{0};

  std::mutex mu;  // guards connections (registered on the I/O thread, removed wherever the last owner drops)
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ServerCore& core, boost::asio::ip::tcp::socket socket, bool overflow);
  ~Connection();

  // I/O thread.
  void start();
  void close_if_idle();  // drain: a connection waiting for its next request is closed
  void close_now();

 private:
  friend class Exchange;
  using Clock = std::chrono::steady_clock;
  enum class Phase { kIdle, kReading, kHandling, kWriting, kClosing, kClosed };

  // I/O thread.
  void wait_for_request();
  void read_head();
  void on_head(const boost::beast::error_code& ec);
  void read_body();
  void dispatch();
  void fail_read(const boost::beast::error_code& ec);
  std::optional<HttpResponse> check_head(const HttpRequest& req);
  void run_handler(Exchange& ex);
  void send_async(HttpResponse res, bool close);
  void after_response(bool close);
  void linger_close();
  void linger_read();
  // One deadline at a time: when it passes, the pending operation is
  // cancelled and its completion sees beast::error::timeout (the socket
  // stays open, so a 408 can still be written).
  void arm(Clock::time_point deadline);
  void disarm();
  boost::beast::error_code translate(boost::beast::error_code ec) const;

  // Either thread (the owner of the socket).
  bool decide_close(bool close) const;
  std::string framing(const HttpResponse& res, bool close, bool stream) const;
  void finish_response(HttpResponse& res);  // CORS headers
  void observe(int status);

  // Handler thread: blocking writes of the whole buffer, bounded by the
  // write timeout (one second once the server aborts, when `force`).
  bool write_sync(std::string_view data, bool force);

  ServerCore& core_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  uint64_t timer_gen_ = 0;      // a timer completion for an older deadline is ignored
  bool timed_out_ = false;
  boost::beast::flat_buffer buffer_;
  std::optional<RequestReader> reader_;
  const Route* route_ = nullptr;
  std::atomic<Phase> phase_{Phase::kIdle};  // read by drain / stop while a handler thread owns the socket
  bool overflow_;
  bool write_failed_ = false;
  int requests_ = 0;            // requests answered on this connection
  Clock::time_point accepted_;
  Clock::time_point request_deadline_;
  std::string out_;             // the response being written by the I/O thread
};

}  // namespace ms::server
