// A raw-socket HTTP/1.x client for the server tests: sends exactly the bytes
// a test gives (malformed, pipelined, trickled, half-closed) and parses the
// responses (Content-Length, chunked or close-delimited bodies).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace ms::server::testing {

struct RawResponse {
  int status = 0;  // 0: no response (closed or timed out)
  std::string head;
  std::string body;
  bool chunked = false;
  bool closed = false;  // the body was delimited by the server closing
  std::string header(std::string_view name) const {
    std::string lower_head;
    for (char c : head) lower_head += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string key = "\r\n";
    for (char c : name) key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    key += ":";
    size_t p = lower_head.find(key);
    if (p == std::string::npos) return "";
    p += key.size();
    size_t e = head.find("\r\n", p);
    std::string v = head.substr(p, e - p);
    while (!v.empty() && v.front() == ' ') v.erase(v.begin());
    return v;
  }
};

class RawClient {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RawClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  bool send(std::string_view s) {
    while (!s.empty()) {
      ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Closes with a reset (SO_LINGER 0), as a killed client's kernel may.
  void reset() {
    linger l{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close();
  }

  // True when the server closed the connection within `ms` (EOF or reset).
  bool closed_by_server(int ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    while (fill(deadline)) {
    }
    return eof_;
  }

  // Reads one response, waiting at most `ms` for all of it (`head_only`:
  // the answer to a HEAD request, which has no body whatever it says).
  RawResponse read_response(int ms = 5000, bool head_only = false) {
    auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    RawResponse r;
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill(deadline)) return r;
    }
    r.head = buf_.substr(0, end + 2);
    buf_.erase(0, end + 4);
    if (r.head.size() > 12) r.status = std::atoi(r.head.c_str() + 9);
    if ((r.status >= 100 && r.status < 200) || r.status == 204 || r.status == 304 || head_only) return r;
    std::string cl = r.header("Content-Length");
    if (r.header("Transfer-Encoding") == "chunked") {
      r.chunked = true;
      for (;;) {
        size_t le;
        while ((le = buf_.find("\r\n")) == std::string::npos) {
          if (!fill(deadline)) return r.status = 0, r;
        }
        size_t n = std::strtoul(buf_.c_str(), nullptr, 16);
        while (buf_.size() < le + 2 + n + 2) {
          if (!fill(deadline)) return r.status = 0, r;
        }
        r.body += buf_.substr(le + 2, n);
        buf_.erase(0, le + 2 + n + 2);
        if (n == 0) break;
      }
    } else if (!cl.empty()) {
      size_t n = std::strtoul(cl.c_str(), nullptr, 10);
      while (buf_.size() < n) {
        if (!fill(deadline)) return r.status = 0, r;
      }
      r.body = buf_.substr(0, n);
      buf_.erase(0, n);
    } else {
      while (fill(deadline)) {
      }
      if (!eof_) return r.status = 0, r;
      r.closed = true;
      r.body = buf_;
      buf_.clear();
    }
    return r;
  }

  // The first final (non-1xx) response.
  RawResponse read_final(int ms = 5000) {
    RawResponse r;
    do r = read_response(ms);
    while (r.status >= 100 && r.status < 200);
    return r;
  }

 private:
  // Reads more into buf_; false on EOF, error or deadline.
  bool fill(Clock::time_point deadline) {
    if (eof_ || fd_ < 0) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char tmp[65536];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

}  // namespace ms::server::testing
