// The HTTP front end: its listening socket (a port another server listens on
// is refused; a burst of connections is queued by the kernel), then the
// transport over raw sockets with test routes: pipelining, half-close,
// HTTP/1.0, bad framing, header / body limits before auth, deadlines,
// connection and handler caps, drain, lifecycle states and CORS.
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
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "server/http_server.h"
#include "gzip_for_tests.h"
#include "raw_http_client.h"

namespace ms::server {
namespace {

HttpOptions on_port(int port) {
  HttpOptions o;
  o.port = port;
  return o;
}

TEST(HttpServerBind, RefusesAPortAnotherServerListensOn) {
  HttpServer first(on_port(0));
  ASSERT_TRUE(first.bind().is_ok());
  ASSERT_GT(first.port(), 0);

  int reused = -1;
  {
    HttpServer second(on_port(first.port()));
    Status st = second.bind();
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("127.0.0.1:" + std::to_string(first.port())), std::string::npos) << st.message();
    // The failed socket is closed; the fd number it had is the lowest free
    // one, so this takes it. Destroying `second` must leave it alone.
    reused = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(reused, 0);
  }
  EXPECT_NE(fcntl(reused, F_GETFD), -1) << "the failed server closed an fd it no longer owned";
  close(reused);
}

// Nothing accepts here (start() is never called), so every connection that
// completes its handshake sits in the accept queue: with a backlog of 5
// (cpp-httplib's) only 6 would, the rest would wait on SYN retransmits.
TEST(HttpServerBind, QueuesABurstOfConnections) {
  HttpServer server(on_port(0));
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

// ---- The transport, with test routes: raw sockets against a real server ----
namespace ms::server {
namespace {

using testing::RawClient;
using testing::RawResponse;
using Clock = std::chrono::steady_clock;

long ms_since(Clock::time_point t0) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

// A server with routes that exercise each transport path:
//   GET /ping (I/O thread), GET /health (essential, no auth, no model),
//   POST /echo (handler thread: the decoded body back),
//   POST /slow (handler thread: waits ?ms=N polling should_stop, then "done"),
//   POST /stream (handler thread: N pieces, ?n=N&gap=MS).
class TestServer {
 public:
  explicit TestServer(HttpOptions o = {}, ServerState state = ServerState::kReady) : server_(with_port0(o)) {
    auto query_int = [](const HttpRequest& req, const std::string& key, int dflt) {
      size_t p = req.target.find(key + "=");
      return p == std::string::npos ? dflt : std::atoi(req.target.c_str() + p + key.size() + 1);
    };
    auto text = [](int status, std::string body) {
      HttpResponse r;
      r.status = status;
      r.content_type = "text/plain";
      r.body = std::move(body);
      return r;
    };
    Route ping{"GET", "/ping", false, [text](const HttpRequest&, Exchange& ex) { ex.respond(text(200, "pong")); }};
    server_.add_route(ping);
    Route health{"GET", "/health", false, [this, text](const HttpRequest&, Exchange& ex) {
                   bool ready = server_.state() == ServerState::kReady;
                   ex.respond(text(ready ? 200 : 503, server_state_name(server_.state())));
                 }};
    health.needs_auth = false;
    health.needs_model = false;
    health.essential = true;
    server_.add_route(health);
    Route echo{"POST", "/echo", false, [text](const HttpRequest& req, Exchange& ex) { ex.respond(text(200, req.body)); }};
    echo.on_worker = true;
    server_.add_route(echo);
    Route slow{"POST", "/slow", false, [this, text, query_int](const HttpRequest& req, Exchange& ex) {
                 auto t0 = Clock::now();
                 const int ms = query_int(req, "ms", 300);
                 while (ms_since(t0) < ms) {
                   if (ex.should_stop()) {
                     stopped_after_ms_ = ms_since(t0);
                     if (ex.aborted()) return ex.respond(text(503, "aborted"));
                     return ex.abandon(499);
                   }
                   std::this_thread::sleep_for(std::chrono::milliseconds(10));
                 }
                 ex.respond(text(200, "done"));
               }};
    slow.on_worker = true;
    server_.add_route(slow);
    Route stream{"POST", "/stream", false, [text, query_int](const HttpRequest& req, Exchange& ex) {
                   HttpResponse head = text(200, "");
                   if (!ex.begin_stream(head)) return;
                   const int n = query_int(req, "n", 3), gap = query_int(req, "gap", 0);
                   for (int i = 0; i < n; ++i) {
                     if (!ex.write("piece" + std::to_string(i) + ";")) {
                       return ex.aborted() ? ex.end_stream("cut") : void();
                     }
                     std::this_thread::sleep_for(std::chrono::milliseconds(gap));
                   }
                   ex.end_stream("end");
                 }};
    stream.on_worker = true;
    server_.add_route(stream);
    EXPECT_TRUE(server_.bind().is_ok());
    server_.set_state(state);
    server_.start();
  }
  HttpServer& server() { return server_; }
  int port() const { return server_.port(); }
  long stopped_after_ms() const { return stopped_after_ms_; }

 private:
  static HttpOptions with_port0(HttpOptions o) {
    o.port = 0;
    return o;
  }
  HttpServer server_;
  std::atomic<long> stopped_after_ms_{-1};
};

std::string post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra +
         "\r\n" + body;
}
const std::string kGetPing = "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n";
const std::string kGetHealth = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

TEST(HttpTransport, PipelinedRequestsEachGetTheirResponseInOrder) {
  TestServer ts;
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(kGetPing + post("/echo", "one") + kGetPing + post("/echo", "two") + kGetPing));
  const char* want[] = {"pong", "one", "pong", "two", "pong"};
  for (const char* w : want) {
    RawResponse r = c.read_response();
    ASSERT_EQ(r.status, 200) << w;
    EXPECT_EQ(r.body, w);
  }
}

TEST(HttpTransport, HalfClosedClientStillGetsItsResponse) {
  TestServer ts;
  for (const std::string path : {"/echo", "/slow?ms=300", "/stream?n=3"}) {
    RawClient c(ts.port());
    ASSERT_TRUE(c.send(post(path, "payload")));
    c.shutdown_write();
    RawResponse r = c.read_final();
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_FALSE(r.body.empty()) << path;
  }
  EXPECT_EQ(ts.stopped_after_ms(), -1) << "a half-closed client was taken for gone";
}

TEST(HttpTransport, ClientThatClosesIsDetectedWhileItsResponseIsComputed) {
  TestServer ts;
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(post("/slow?ms=5000", "x")));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  c.close();  // a full close: the server sees EOF, probes, and gets a reset
  auto t0 = Clock::now();
  while (ts.stopped_after_ms() < 0 && ms_since(t0) < 3000) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(ts.stopped_after_ms(), 0) << "the handler never saw the client go";
  EXPECT_LT(ms_since(t0), 1000);
}

TEST(HttpTransport, Http10StreamIsDelimitedByCloseNotChunked) {
  TestServer ts;
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("POST /stream?n=3 HTTP/1.0\r\nContent-Length: 0\r\n\r\n"));
  RawResponse r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Transfer-Encoding"), "");
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.body, "piece0;piece1;piece2;end");

  RawClient c11(ts.port());
  ASSERT_TRUE(c11.send(post("/stream?n=2", "")));
  RawResponse r11 = c11.read_response();
  EXPECT_TRUE(r11.chunked);
  EXPECT_EQ(r11.body, "piece0;piece1;end");
}

TEST(HttpTransport, Http10KeepAliveGetsContentLengthAndStaysOpen) {
  TestServer ts;
  RawClient c(ts.port());
  const std::string req = "GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
  ASSERT_TRUE(c.send(req + req));
  for (int i = 0; i < 2; ++i) {
    RawResponse r = c.read_response();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("Connection"), "keep-alive");
    EXPECT_EQ(r.body, "pong");
  }
}

TEST(HttpTransport, BadContentLengthIsAnsweredAtOnce) {
  TestServer ts;
  struct Case {
    std::string cl;
    int status;
  };
  for (const Case& k : {Case{"-5", 400}, Case{"1e11", 400}, Case{"100000000000", 413}, Case{"12, 13", 400},
                        Case{"0x10", 400}}) {
    RawClient c(ts.port());
    auto t0 = Clock::now();
    ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + k.cl + "\r\n\r\nabc"));
    RawResponse r = c.read_response(2000);
    EXPECT_EQ(r.status, k.status) << k.cl;
    EXPECT_LT(ms_since(t0), 500) << k.cl;
    EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
  }
}

TEST(HttpTransport, HeaderCountAndBytesAreLimitedBeforeAuth) {
  HttpOptions o;
  o.max_headers = 20;
  o.max_header_bytes = 4096;
  o.api_key = "secret";
  TestServer ts(o);
  std::string many;
  for (int i = 0; i < 21; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  RawClient c1(ts.port());
  ASSERT_TRUE(c1.send("GET /ping HTTP/1.1\r\nHost: x\r\n" + many + "\r\n"));
  RawResponse r1 = c1.read_response();
  EXPECT_EQ(r1.status, 431);
  EXPECT_NE(r1.body.find("header fields"), std::string::npos) << r1.body;

  RawClient c2(ts.port());
  ASSERT_TRUE(c2.send("GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(5000, 'a') + "\r\n\r\n"));
  EXPECT_EQ(c2.read_response().status, 431);

  // A flood of headers that never ends is cut at the limit, not buffered.
  RawClient c3(ts.port());
  ASSERT_TRUE(c3.send("GET /ping HTTP/1.1\r\n"));
  std::string flood;
  for (int i = 0; i < 2000; ++i) flood += "A: b\r\n";
  c3.send(flood);  // may fail midway: the server answered and closed
  EXPECT_EQ(c3.read_response().status, 431);

  RawClient c4(ts.port());
  ASSERT_TRUE(c4.send(kGetPing));
  EXPECT_EQ(c4.read_response().status, 401);
  RawClient c5(ts.port());
  ASSERT_TRUE(c5.send("GET /ping HTTP/1.1\r\nAuthorization: Bearer secret\r\n\r\n"));
  EXPECT_EQ(c5.read_response().status, 200);
}

TEST(HttpTransport, ChunkedBodyIsCountedAsItArrives) {
  HttpOptions o;
  o.max_body_bytes = 64 << 10;
  TestServer ts(o);
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  std::string chunk = "4000\r\n" + std::string(0x4000, 'a') + "\r\n";
  bool refused_early = false;
  for (int i = 0; i < 64 && !refused_early; ++i) refused_early = !c.send(chunk) || c.closed_by_server(0);
  RawResponse r = c.read_response();
  EXPECT_EQ(r.status, 413);

  RawClient ok(ts.port());
  ASSERT_TRUE(ok.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
  RawResponse r2 = ok.read_response();
  EXPECT_EQ(r2.status, 200);
  EXPECT_EQ(r2.body, "abcde");
}

TEST(HttpTransport, UnsupportedCodingsAndFramingsAreRefused) {
  TestServer ts;
  struct Case {
    std::string headers;
    int status;
  };
  for (const Case& k : {Case{"Content-Encoding: br\r\nContent-Length: 3\r\n", 415},
                        Case{"Transfer-Encoding: gzip\r\n", 501},
                        Case{"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", 400},
                        Case{"Expect: something\r\nContent-Length: 3\r\n", 417}}) {
    RawClient c(ts.port());
    ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\n" + k.headers + "\r\nabc"));
    EXPECT_EQ(c.read_response().status, k.status) << k.headers;
  }
  RawClient v2(ts.port());
  ASSERT_TRUE(v2.send("GET /ping HTTP/2.0\r\n\r\n"));
  EXPECT_EQ(v2.read_response().status, 505);
}

TEST(HttpTransport, ExpectContinueGetsAnInterimResponse) {
  TestServer ts;
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(c.read_response(2000).status, 100);
  ASSERT_TRUE(c.send("hello"));
  RawResponse r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
}

TEST(HttpTransport, SlowHeadIsDroppedAtTheDeadlineWhileOthersAreServed) {
  HttpOptions o;
  o.header_timeout_s = 1;
  TestServer ts(o);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 50; ++i) {
    slow.push_back(std::make_unique<RawClient>(ts.port()));
    slow.back()->send("GET /ping HTTP/1.1\r\n");
  }
  // Trickle a header byte per client every 100 ms; /health must stay fast.
  auto t0 = Clock::now();
  long worst = 0;
  while (ms_since(t0) < 1500) {
    for (auto& c : slow) c->send("X");
    auto p0 = Clock::now();
    RawClient h(ts.port());
    h.send(kGetHealth);
    EXPECT_EQ(h.read_response(1000).status, 200);
    worst = std::max(worst, ms_since(p0));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_LT(worst, 100);
  for (auto& c : slow) {
    RawResponse r = c->read_response(1000);
    EXPECT_EQ(r.status, 408);
  }
}

TEST(HttpTransport, IdleKeepAliveConnectionIsClosed) {
  HttpOptions o;
  o.keep_alive_timeout_s = 1;
  TestServer ts(o);
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(kGetPing));
  EXPECT_EQ(c.read_response().status, 200);
  auto t0 = Clock::now();
  EXPECT_TRUE(c.closed_by_server(3000));
  EXPECT_GE(ms_since(t0), 800);
  EXPECT_LT(ms_since(t0), 2000);
}

TEST(HttpTransport, ConnectionCapAnswers503FastButHealthStillAnswers) {
  HttpOptions o;
  o.max_connections = 4;
  TestServer ts(o);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawClient>(ts.port()));
    held.back()->send("GET /ping HTTP/1.1\r\n");  // an unfinished head holds the connection
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = Clock::now();
  RawClient over(ts.port());
  ASSERT_TRUE(over.send(kGetPing));
  RawResponse r = over.read_response(2000);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.header("Retry-After"), "1");
  EXPECT_LT(ms_since(t0), 200);
  RawClient h(ts.port());
  ASSERT_TRUE(h.send(kGetHealth));
  EXPECT_EQ(h.read_response(2000).status, 200);
  EXPECT_GE(ts.server().stats().connections_rejected, 2u);
}

TEST(HttpTransport, BusyHandlerThreadsAnswer503FastAndHealthStillAnswers) {
  HttpOptions o;
  o.threads = 2;
  TestServer ts(o);
  RawClient a(ts.port()), b(ts.port());
  ASSERT_TRUE(a.send(post("/slow?ms=1500", "")));
  ASSERT_TRUE(b.send(post("/slow?ms=1500", "")));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto t0 = Clock::now();
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(post("/echo", "x")));
  EXPECT_EQ(c.read_response(1000).status, 503);
  RawClient h(ts.port());
  ASSERT_TRUE(h.send(kGetHealth));
  EXPECT_EQ(h.read_response(1000).status, 200);
  EXPECT_LT(ms_since(t0), 300);
  EXPECT_EQ(a.read_response().status, 200);
  EXPECT_EQ(b.read_response().status, 200);
}

TEST(HttpTransport, DrainFinishesInFlightRefusesNewWorkAndAbortsTheRest) {
  TestServer ts;
  RawClient inflight(ts.port()), longstream(ts.port()), idle(ts.port()), kept(ts.port());
  ASSERT_TRUE(kept.send(kGetPing));
  ASSERT_EQ(kept.read_response().status, 200);
  ASSERT_TRUE(inflight.send(post("/slow?ms=400", "")));
  ASSERT_TRUE(longstream.send(post("/stream?n=1000&gap=10", "")));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ts.server().begin_drain();
  EXPECT_TRUE(kept.closed_by_server(1000)) << "an idle kept-alive connection stays open during the drain";
  RawClient fresh(ts.port());
  ASSERT_TRUE(fresh.send(post("/echo", "x")));
  RawResponse refused = fresh.read_response();
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.header("Connection"), "close");
  RawClient h(ts.port());
  ASSERT_TRUE(h.send(kGetHealth));
  RawResponse hr = h.read_response();
  EXPECT_EQ(hr.status, 503);
  EXPECT_EQ(hr.body, "draining");
  // The short request finishes; the endless stream keeps the server busy.
  EXPECT_FALSE(ts.server().wait_idle(Clock::now() + std::chrono::milliseconds(800)));
  RawResponse done = inflight.read_response();
  EXPECT_EQ(done.status, 200);
  EXPECT_EQ(done.body, "done");
  ts.server().abort_in_flight();
  EXPECT_TRUE(ts.server().wait_idle(Clock::now() + std::chrono::seconds(2)));
  RawResponse cut = longstream.read_response();
  EXPECT_EQ(cut.status, 200);
  EXPECT_TRUE(cut.chunked);
  EXPECT_EQ(cut.body.substr(cut.body.size() - 3), "cut") << "the stream must end cleanly with its final piece";
  (void)idle;
}

TEST(HttpTransport, LoadingStateServesOnlyWhatNeedsNoModel) {
  TestServer ts({}, ServerState::kLoading);
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(kGetHealth + kGetPing));
  RawResponse h = c.read_response();
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.body, "loading");
  RawResponse p = c.read_response();
  EXPECT_EQ(p.status, 503);
  EXPECT_NE(p.body.find("model_loading"), std::string::npos);
  ts.server().set_state(ServerState::kReady);
  ASSERT_TRUE(c.send(kGetPing));
  EXPECT_EQ(c.read_response().status, 200);
}

TEST(HttpTransport, CorsPreflightAndHeadersAlsoWithAnApiKey) {
  HttpOptions o;
  o.api_key = "k";
  o.cors = CorsPolicy::parse("https://ui.example.com").value();
  TestServer ts(o);
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("OPTIONS /echo HTTP/1.1\r\nOrigin: https://ui.example.com\r\n"
                     "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, x-stainless-os\r\n\r\n"));
  RawResponse pre = c.read_response();
  EXPECT_EQ(pre.status, 204);
  EXPECT_EQ(pre.header("Access-Control-Allow-Origin"), "https://ui.example.com");
  EXPECT_EQ(pre.header("Access-Control-Allow-Headers"), "authorization, x-stainless-os");
  EXPECT_NE(pre.header("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  // The real request: its 401 (no key) and its 200 both carry the header.
  ASSERT_TRUE(c.send(post("/echo", "x", "Origin: https://ui.example.com\r\n")));
  RawResponse unauth = c.read_response();
  EXPECT_EQ(unauth.status, 401);
  EXPECT_EQ(unauth.header("Access-Control-Allow-Origin"), "https://ui.example.com");
  // (A refused request with a body closes its connection: the body was not read.)
  RawClient c2(ts.port());
  ASSERT_TRUE(c2.send(post("/echo", "x", "Origin: https://ui.example.com\r\nAuthorization: Bearer k\r\n")));
  RawResponse ok = c2.read_response();
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.header("Access-Control-Allow-Origin"), "https://ui.example.com");
  EXPECT_EQ(ok.header("Vary"), "Origin");

  RawClient evil(ts.port());
  ASSERT_TRUE(evil.send("OPTIONS /echo HTTP/1.1\r\nOrigin: https://evil.example\r\nAccess-Control-Request-Method: POST\r\n\r\n"));
  RawResponse no = evil.read_response();
  EXPECT_EQ(no.status, 403);
  EXPECT_EQ(no.header("Access-Control-Allow-Origin"), "");
}

TEST(HttpTransport, UnknownPathsAndMethods) {
  TestServer ts;
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("GET /nope HTTP/1.1\r\n\r\n" + std::string("GET /echo HTTP/1.1\r\n\r\n") +
                     "HEAD /ping HTTP/1.1\r\n\r\n" + kGetPing));
  EXPECT_EQ(c.read_response().status, 404);
  RawResponse r405 = c.read_response();
  EXPECT_EQ(r405.status, 405);
  EXPECT_EQ(r405.header("Allow"), "POST");
  // HEAD: the headers of GET, no body (the next response follows directly).
  RawResponse head = c.read_response(5000, /*head_only=*/true);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.header("Content-Length"), "4");
  RawResponse next = c.read_response();
  EXPECT_EQ(next.status, 200) << "HEAD must not send a body";
  EXPECT_EQ(next.body, "pong");
}

}  // namespace
}  // namespace ms::server

namespace ms::server {
namespace {

TEST(HttpTransport, GzipBodyIsDecodedAndABombIsRefusedAtTheLimit) {
  HttpOptions o;
  o.max_body_bytes = 1 << 20;
  TestServer ts(o);
  auto deflate_gzip = [](const std::string& data) { return testing::compress(data); };
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(post("/echo", deflate_gzip("hello gzip"), "Content-Encoding: gzip\r\n")));
  RawResponse r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello gzip");

  std::string bomb = deflate_gzip(std::string(size_t(64) << 20, 'a'));  // 64 MiB -> ~64 KiB
  RawClient b(ts.port());
  b.send(post("/echo", bomb, "Content-Encoding: gzip\r\n"));
  RawResponse br = b.read_response();
  EXPECT_EQ(br.status, 413);
  EXPECT_NE(br.body.find("decodes to more than"), std::string::npos) << br.body;
}

}  // namespace
}  // namespace ms::server
