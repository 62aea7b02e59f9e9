// The HTTP front end (cpp-httplib): routes, API-key auth, body / timeout /
// thread bounds, OpenAI error bodies for every failure (404, 405, 413, 500),
// and the glue from a connection to a Generation. Each connection is served
// by one pool thread, which only parses, renders, tokenizes and then waits on
// its request channel: the engine thread alone touches the model.
#pragma once

#include <memory>
#include <string>

#include "core/secret_compare.h"
#include "core/status.h"
#include "server/generation.h"

namespace httplib {
class Server;
}

namespace ms::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0: any free port
  std::string api_key;                  // non-empty: Bearer auth on all but /health
  size_t max_body_bytes = size_t(4) << 20;
  int threads = 256;                    // connections served at once (streams included)
  int read_timeout_s = 30;              // a client sending a request slower than this is dropped
  int write_timeout_s = 30;             // a client not reading its stream for this long is dropped
  int keep_alive_timeout_s = 5;         // idle keep-alive connections are closed after this
  int keep_alive_max = 1000;            // requests per connection
  int listen_backlog = 4096;            // pending connections the kernel queues (capped by somaxconn)
};

class HttpServer {
 public:
  HttpServer(ServerContext& ctx, HttpOptions options);
  ~HttpServer();
  // Binds the socket (error naming host:port on failure, also when another
  // process listens there); port() is then known and the kernel queues up to
  // listen_backlog connections until run() accepts them.
  Status bind();
  // Serves until stop(); call after bind().
  void run();
  void stop();
  int port() const { return port_; }

 private:
  void install_routes();

  ServerContext& ctx_;
  HttpOptions options_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  int listen_fd_ = -1;  // the listening socket, as httplib created it
  bool ran_ = false;
};

// Whether the Authorization header is "Bearer <key>", in time that says
// nothing about the key (core/secret_compare.h).
bool check_bearer(const std::string& header, const Secret& key);

}  // namespace ms::server
