// A request larger than the whole KV cache, through the real engine on the
// ref backend (a tiny North Mini Code shape with random weights and a cache
// of 4 blocks x 16 tokens per group): the engine lowers max_model_len to the
// 64 tokens the cache holds, a prompt over it is a 400 context_length_exceeded
// naming the numbers (and, as the server adds, the cache behind them), a
// fitting prompt with a too-large max_tokens is clamped and served, and
// /metrics shows the cache's size.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "model/random_model.h"
#include "scheduler/engine_impl.h"
#include "server/backend_factory.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "tokenizer/dummy_tokenizer.h"

namespace ms::server {
namespace {

class ContextLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cfg = preset_config(Arch::kCohere2Moe, "tiny");
    ASSERT_TRUE(cfg.is_ok());
    auto m = random_model(*cfg, 1);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = std::move(*m);
    BackendChoice c;
    c.block_size = 16;
    // fp32 K and V, 2 kv heads x 16: 4 KiB per layer and block; 4 blocks per group.
    c.kv_bytes = size_t(4096) * cfg->n_layers * 4;
    c.threads = 1;
    auto b = make_backend(*model_, c);
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    EngineOptions eo;
    eo.prefill_chunk = 16;
    auto e = make_engine(std::move(*b), eo);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    engine_ = std::move(*e);
    auto t = make_dummy_tokenizer(cfg->vocab_size, cfg->bos_id, cfg->eos_ids);
    ASSERT_TRUE(t.is_ok());
    tok_ = std::make_unique<Tokenizer>(std::move(*t));
    ctx_.engine = engine_.get();
    ctx_.tokenizer = tok_.get();
    ctx_.model_name = "m";
    ctx_.limits.vocab_size = tok_->vocab_size();
    ctx_.poll_ms = 1;
  }
  void TearDown() override {
    if (engine_) engine_->shutdown();
  }
  static Json ids(int n) {
    Json a = Json::array();
    for (int i = 0; i < n; ++i) a.push_back(300 + i);
    return a;
  }
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Tokenizer> tok_;
  ServerContext ctx_;
};

TEST_F(ContextLimit, PromptOverTheCacheIs400WithTheNumbers) {
  ASSERT_EQ(engine_->max_model_len(), 64);  // the model's 2048 lowered to the cache
  EXPECT_TRUE(engine_->stats().kv_capacity.bounds_context);
  ctx_.context_note = "(This server's KV cache holds 64 tokens for one request.)";
  std::shared_ptr<Generation> g;
  ApiError e = Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", ids(100)}, {"max_tokens", 4}}, &g);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(e.message.find("maximum context length is 64 tokens. However, you requested 104 tokens (100 in the "
                           "messages, 4 in the completion)"),
            std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("KV cache holds 64 tokens"), std::string::npos) << e.message;
  // Text prompts count their tokens the same way (one per byte here).
  e = Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", std::string(80, 'x')}}, &g);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
}

TEST_F(ContextLimit, FittingPromptIsClampedAndServed) {
  std::shared_ptr<Generation> g;
  ApiError e = Generation::start(ctx_, Endpoint::kCompletions,
                                 Json{{"prompt", ids(40)}, {"max_tokens", 1000}, {"ignore_eos", true}}, &g);
  ASSERT_TRUE(e.ok()) << e.message;
  Json out;
  ASSERT_TRUE(g->run_to_completion(&out).ok());
  EXPECT_EQ(out["usage"]["completion_tokens"], 24);  // 64 - 40
  EXPECT_EQ(out["choices"][0]["finish_reason"], "length");
  // Nothing leaked (the stats are published after the step that finished it).
  for (int i = 0; i < 200 && engine_->stats().kv_blocks_used > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine_->stats().kv_blocks_used, 0);
}

TEST_F(ContextLimit, MetricsShowTheCacheSize) {
  Metrics metrics;
  const std::string text = metrics.render(engine_->stats());
  EXPECT_NE(text.find("megaserve_kv_cache_block_size 16\n"), std::string::npos);
  EXPECT_NE(text.find("megaserve_kv_group_blocks{group=\"0\",attention=\"full\",window=\"0\",layers=\"2\"} 4\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("megaserve_kv_group_blocks{group=\"1\",attention=\"sliding\",window=\"8\",layers=\"4\"} 4\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("megaserve_kv_group_bytes{group=\"0\",attention=\"full\",window=\"0\",layers=\"2\"} 32768\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("megaserve_kv_cache_context_tokens 64\n"), std::string::npos);
  EXPECT_NE(text.find("megaserve_max_request_tokens 64\n"), std::string::npos);
}

}  // namespace
}  // namespace ms::server
