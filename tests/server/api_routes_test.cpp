// /health as an orchestrator sees it: loading (with the load's progress),
// ready, unhealthy (with the engine's reason) and draining; 200 only when
// ready. The engine here is a stand-in that only reports its health: the
// route must not touch anything else of it.
#include "server/api_routes.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "raw_http_client.h"

namespace ms::server {
namespace {

class HealthOnlyEngine : public Engine {
 public:
  Status submit(Request) override { return unavailable("not a real engine"); }
  EngineStats stats() const override { return stats_; }
  const ModelConfig& config() const override { return config_; }
  int max_model_len() const override { return 16; }
  void shutdown() override {}
  EngineStats stats_;
  ModelConfig config_;
};

nlohmann::json health(int port, int* status) {
  testing::RawClient c(port);
  c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  testing::RawResponse r = c.read_response();
  *status = r.status;
  return nlohmann::json::parse(r.body, nullptr, false);
}

TEST(HealthRoute, LoadingReadyUnhealthyDraining) {
  HealthOnlyEngine engine;
  ServerContext ctx;
  Metrics metrics;
  LoadProgress progress;
  HttpOptions o;
  o.port = 0;
  o.api_key = "k";  // /health needs no key
  HttpServer server(o);
  install_api_routes(server, ctx, progress);
  ASSERT_TRUE(server.bind().is_ok());
  server.start();

  int status = 0;
  progress.set("loading model.safetensors: 3/7 tensors");
  nlohmann::json j = health(server.port(), &status);
  EXPECT_EQ(status, 503);
  EXPECT_EQ(j["status"], "loading");
  EXPECT_EQ(j["reason"], "loading model.safetensors: 3/7 tensors");

  ctx.engine = &engine;
  ctx.metrics = &metrics;
  server.set_state(ServerState::kReady);
  j = health(server.port(), &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(j, nlohmann::json({{"status", "ready"}}));

  engine.stats_.healthy = false;
  engine.stats_.unhealthy_reason = "CUDA error: an illegal memory access";
  j = health(server.port(), &status);
  EXPECT_EQ(status, 503);
  EXPECT_EQ(j["status"], "unhealthy");
  EXPECT_EQ(j["reason"], "CUDA error: an illegal memory access");

  server.begin_drain();
  j = health(server.port(), &status);
  EXPECT_EQ(status, 503);
  EXPECT_EQ(j["status"], "draining");
  server.stop();
}

}  // namespace
}  // namespace ms::server
