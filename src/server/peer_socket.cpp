#include "server/peer_socket.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace ms::server {

bool PeerProbe::gone() {
  if (gone_ || fd_ < 0) return gone_;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) < 0) return false;
  // A reset (or a reset answering the probe) leaves the socket in error.
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return gone_ = true;
  if (!(p.revents & POLLIN)) return false;
  char c;
  ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // a pipelined request: the client is there
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    return gone_ = true;
  }
  // End of file: half-closed or gone.
  if (!http11_ || probed_) return false;
  probed_ = true;
  static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
  ssize_t w = ::send(fd_, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return gone_ = true;
  return false;
}

}  // namespace ms::server
