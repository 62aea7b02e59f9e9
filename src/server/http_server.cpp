#include "server/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <thread>

#include "core/log.h"
#include "server/http_connection.h"

namespace ms::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

const char* server_state_name(ServerState s) {
  switch (s) {
    case ServerState::kLoading: return "loading";
    case ServerState::kReady: return "ready";
    case ServerState::kDraining: return "draining";
  }
  return "?";
}

bool check_bearer(const std::string& header, const Secret& key) {
  static constexpr std::string_view kPrefix = "Bearer ";
  if (header.compare(0, kPrefix.size(), kPrefix) != 0) return false;  // the client's own bytes only
  return key.matches(std::string_view(header).substr(kPrefix.size()));
}

// Member order matters: io is destroyed before core, because destroying it
// destroys pending handlers, whose connections unregister from core.
struct HttpServer::Impl {
  explicit Impl(HttpOptions o) : core(std::move(o)), acceptor(io), retry(io) { core.io = &io; }

  void accept();
  void on_accept(tcp::socket socket);
  void close_all();

  ServerCore core;
  net::io_context io{1};
  tcp::acceptor acceptor;
  net::steady_timer retry;  // accept() after running out of file descriptors
  std::optional<net::executor_work_guard<net::io_context::executor_type>> guard;
  std::thread thread;
  bool started = false, stopped = false;
};

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // EMFILE / ENFILE: the connection stays queued; try again shortly
      // instead of spinning on the same error.
      MS_LOG(Warn) << "accept: " << ec.message();
      retry.expires_after(std::chrono::milliseconds(50));
      retry.async_wait([this](boost::system::error_code e) {
        if (!e) accept();
      });
      return;
    }
    on_accept(std::move(socket));
    accept();
  });
}

void HttpServer::Impl::on_accept(tcp::socket socket) {
  boost::system::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  bool overflow = core.open >= core.options.max_connections;
  if (overflow) ++core.rejected;
  if (overflow && core.overflow_open >= kOverflowConnections) {
    // Far over the cap: a canned answer without reading the request (it
    // fits any socket buffer), then close.
    static const std::string k503 = [] {
      const std::string body =
          "{\"error\":{\"message\":\"Too many open connections; retry later\",\"type\":\"service_unavailable\","
          "\"param\":null,\"code\":\"too_many_connections\"}}";
      return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
             "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    }();
    (void)::send(socket.native_handle(), k503.data(), k503.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    return;
  }
  std::make_shared<Connection>(core, std::move(socket), overflow)->start();
}

void HttpServer::Impl::close_all() {
  boost::system::error_code ec;
  acceptor.close(ec);
  retry.cancel();
  std::vector<std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> l(core.mu);
    for (auto& [p, w] : core.connections) {
      if (auto c = w.lock()) conns.push_back(std::move(c));
    }
  }
  for (auto& c : conns) c->close_now();
}

HttpServer::HttpServer(HttpOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::add_route(Route route) { impl_->core.routes.push_back(std::move(route)); }

Route& HttpServer::last_route() { return impl_->core.routes.back(); }

void HttpServer::set_observer(std::function<void(const HttpRequest&, int)> observer) {
  impl_->core.observer = std::move(observer);
}

const HttpOptions& HttpServer::options() const { return impl_->core.options; }

Status HttpServer::bind() {
  const HttpOptions& o = impl_->core.options;
  const std::string where = o.host + ":" + std::to_string(o.port);
  boost::system::error_code ec;
  net::ip::address addr = net::ip::make_address(o.host == "localhost" ? "127.0.0.1" : o.host, ec);
  if (ec) return invalid_argument("--host: '" + o.host + "' is not an IP address");
  tcp::endpoint ep(addr, static_cast<unsigned short>(o.port));
  tcp::acceptor& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  // SO_REUSEADDR only allows rebinding over TIME_WAIT; a port that another
  // server listens on stays an error (no SO_REUSEPORT).
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (ec) {
    a.close();
    return unavailable("cannot bind " + where + " (" + ec.message() + ")");
  }
  // A burst of new connections (64 clients opening at once) must queue in
  // the kernel, not be dropped while the accept loop catches up.
  a.listen(o.listen_backlog, ec);
  if (ec) {
    a.close();
    return unavailable("cannot listen on " + where + ": " + ec.message());
  }
  port_ = a.local_endpoint().port();
  return Status::ok();
}

void HttpServer::start() {
  Impl& m = *impl_;
  if (m.started || !m.acceptor.is_open()) return;
  m.started = true;
  // Every connection is a file descriptor: raise the soft limit toward the
  // hard one so --max-connections is reachable (Debian's soft default is 1024).
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rlim_t want = static_cast<rlim_t>(m.core.options.max_connections) + kOverflowConnections + 1024;
    if (rl.rlim_cur < want) {
      rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
      setrlimit(RLIMIT_NOFILE, &rl);
      getrlimit(RLIMIT_NOFILE, &rl);
      if (rl.rlim_cur < want) {
        MS_LOG(Warn) << "open-file limit " << rl.rlim_cur << " is below --max-connections "
                     << m.core.options.max_connections << " plus headroom; raise it (ulimit -n)";
      }
    }
  }
  m.guard.emplace(m.io.get_executor());
  m.accept();
  m.thread = std::thread([&m] { m.io.run(); });
}

void HttpServer::set_state(ServerState s) { impl_->core.state = s; }

ServerState HttpServer::state() const { return impl_->core.state; }

void HttpServer::begin_drain() {
  Impl& m = *impl_;
  m.core.state = ServerState::kDraining;
  if (!m.started) return;
  net::post(m.io, [&m] {
    std::vector<std::shared_ptr<Connection>> conns;
    {
      std::lock_guard<std::mutex> l(m.core.mu);
      for (auto& [p, w] : m.core.connections) {
        if (auto c = w.lock()) conns.push_back(std::move(c));
      }
    }
    for (auto& c : conns) c->close_if_idle();
  });
}

bool HttpServer::wait_idle(std::chrono::steady_clock::time_point deadline) {
  while (impl_->core.in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return impl_->core.in_flight == 0;
}

void HttpServer::abort_in_flight() { impl_->core.abort = true; }

void HttpServer::stop() {
  Impl& m = *impl_;
  if (m.stopped) return;
  m.stopped = true;
  m.core.abort = true;
  m.core.pool.shutdown();  // handlers see abort and return; they hand their sockets back first
  if (!m.started) {
    boost::system::error_code ec;
    m.acceptor.close(ec);
    return;
  }
  net::post(m.io, [&m] {
    m.close_all();
    m.guard.reset();
    m.io.stop();
  });
  m.thread.join();
}

HttpStats HttpServer::stats() const {
  const ServerCore& c = impl_->core;
  HttpStats s;
  s.connections_open = c.open + c.overflow_open;
  s.requests_in_flight = c.in_flight;
  s.connections_rejected = c.rejected;
  s.requests_busy_rejected = c.busy_rejected;
  s.requests_timed_out = c.timed_out;
  return s;
}

}  // namespace ms::server
