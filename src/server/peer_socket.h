// Whether the client of a connection is still there while its request is
// being computed and nothing has been written yet (a non-streamed
// completion). TCP cannot tell a client that half-closed after sending its
// request (shutdown(SHUT_WR), waiting for the answer) from one that went
// away: both read as end-of-file. So on end-of-file an HTTP/1.1 client is
// sent an interim "100 Continue" response, which every HTTP/1.1 client must
// accept and skip (RFC 9110 15.2); a client that is gone answers it with a
// reset, one that half-closed reads past it and gets the real response.
// HTTP/1.0 clients may not be sent 1xx responses: for them end-of-file alone
// is not taken as gone, and their request runs to the end.
#pragma once

namespace ms::server {

class PeerProbe {
 public:
  PeerProbe(int fd, bool http11) : fd_(fd), http11_(http11) {}
  // Non-blocking; true once the client is known to be gone (reset, or no
  // longer reading). Data the client pipelined stays unread (MSG_PEEK).
  bool gone();

 private:
  int fd_;
  bool http11_;
  bool probed_ = false;  // the interim response went out
  bool gone_ = false;
};

}  // namespace ms::server
