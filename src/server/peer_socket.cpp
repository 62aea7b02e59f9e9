#include "server/peer_socket.h"

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ms::server {

namespace {

bool endpoint(int fd, bool peer, std::string* host, int* port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0 || (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) return false;
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, h, sizeof(h), p, sizeof(p),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *host = h;
  *port = std::atoi(p);
  return true;
}

}  // namespace

int find_peer_socket(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || fd < 0 || fd == dirfd(d)) continue;
    std::string host;
    int port = 0;
    if (!endpoint(static_cast<int>(fd), /*peer=*/true, &host, &port)) continue;
    if (port != remote_port || host != remote_addr) continue;
    std::string lhost;
    int lport = 0;
    if (!endpoint(static_cast<int>(fd), /*peer=*/false, &lhost, &lport) || lport != local_port) continue;
    found = static_cast<int>(fd);
    break;
  }
  closedir(d);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // orderly shutdown by the client
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  return false;
}

}  // namespace ms::server
