// Finding out, from inside a cpp-httplib handler, whether the client of the
// current request has gone away. httplib 0.11 (Debian 12) gives handlers no
// access to the connection's socket, and a non-streaming handler never writes
// until the end; so the socket is found by its peer address (the worker
// thread keeps the fd open while the handler runs, so it cannot be reused),
// and probed with a non-blocking MSG_PEEK: EOF or a reset means the client
// closed the connection and its request should be cancelled.
#pragma once

#include <string>

namespace ms::server {

// The fd of this process's connected TCP socket whose peer is
// (remote_addr, remote_port) and whose local port is local_port; -1 if none.
int find_peer_socket(const std::string& remote_addr, int remote_port, int local_port);

// True when the peer closed or reset the connection (data the client may have
// pipelined stays in the buffer: MSG_PEEK).
bool peer_closed(int fd);

}  // namespace ms::server
