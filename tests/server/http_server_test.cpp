// The HTTP front end's listening socket: a port another server listens on is
// refused, and a burst of connections is queued by the kernel rather than
// dropped while the accept thread catches up.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

namespace ms::server {
namespace {

HttpOptions on_port(int port) {
  HttpOptions o;
  o.port = port;
  return o;
}

TEST(HttpServerBind, RefusesAPortAnotherServerListensOn) {
  ServerContext ctx;
  HttpServer first(ctx, on_port(0));
  ASSERT_TRUE(first.bind().is_ok());
  ASSERT_GT(first.port(), 0);

  int reused = -1;
  {
    HttpServer second(ctx, on_port(first.port()));
    Status st = second.bind();
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("127.0.0.1:" + std::to_string(first.port())), std::string::npos) << st.message();
    // httplib closed the failed socket; the fd number it had is the lowest
    // free one, so this takes it. Destroying `second` must leave it alone.
    reused = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(reused, 0);
  }
  EXPECT_NE(fcntl(reused, F_GETFD), -1) << "the failed server closed an fd it no longer owned";
  close(reused);
}

// Nothing accepts here (run() is never called), so every connection that
// completes its handshake sits in the accept queue: with httplib's own
// backlog of 5 only 6 would, the rest would wait on SYN retransmits.
TEST(HttpServerBind, QueuesABurstOfConnections) {
  ServerContext ctx;
  HttpServer server(ctx, on_port(0));
  ASSERT_TRUE(server.bind().is_ok());

  constexpr int kClients = 64;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port()));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::vector<pollfd> fds;
  for (int i = 0; i < kClients; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ASSERT_TRUE(rc == 0 || errno == EINPROGRESS) << std::strerror(errno);
    fds.push_back({fd, POLLOUT, 0});
  }
  // Well under the first SYN retransmit (1 s): a dropped SYN does not make it.
  int connected = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);
  std::vector<bool> done(kClients, false);
  while (connected < kClients && std::chrono::steady_clock::now() < deadline) {
    poll(fds.data(), fds.size(), 50);
    for (int i = 0; i < kClients; ++i) {
      if (done[i] || !(fds[i].revents & POLLOUT)) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      EXPECT_EQ(err, 0) << std::strerror(err);
      done[i] = true;
      fds[i].events = 0;
      ++connected;
    }
  }
  for (auto& p : fds) close(p.fd);
  EXPECT_EQ(connected, kClients);
}

}  // namespace
}  // namespace ms::server
