// Generation over a scripted fake Engine (no model): SSE framing and chunk
// order, stop strings cancelling the engine request, non-streaming bodies,
// client disconnects. The real engine is exercised by tests/e2e.
#include <gtest/gtest.h>

#include <thread>

#include "server/generation.h"

namespace ms::server {
namespace {

std::string src(const std::string& rel) { return std::string(MEGASERVE_SOURCE_DIR) + "/" + rel; }

// Answers every request with the tokens of `script` (per choice), then a finish.
class FakeEngine : public Engine {
 public:
  std::vector<int32_t> script;
  std::vector<std::shared_ptr<RequestChannel>> channels;
  Status next_status;
  ModelConfig cfg;
  Status submit(Request req) override {
    if (!next_status.is_ok()) return next_status;
    channels.push_back(req.channel);
    for (int c = 0; c < req.n; ++c) {
      int k = 0;
      for (int32_t t : script) {
        if (k++ >= req.max_tokens) break;
        req.channel->push_token(TokenEvent{c, t, -0.5f, {}});
      }
      FinishEvent f;
      f.choice = c;
      f.reason = k > req.max_tokens ? FinishReason::kLength : FinishReason::kStop;
      f.prompt_tokens = static_cast<int>(req.prompt.size());
      req.channel->push_finish(f);
    }
    return Status::ok();
  }
  EngineStats stats() const override { return {}; }
  const ModelConfig& config() const override { return cfg; }
  int max_model_len() const override { return 64; }
  void shutdown() override {}
};

class GenerationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = Tokenizer::load(src("models/north-mini-demo"));
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    tok_ = new Tokenizer(std::move(t.value()));
  }
  void SetUp() override {
    ctx_.engine = &engine_;
    ctx_.tokenizer = tok_;
    ctx_.model_name = "m";
    ctx_.limits.vocab_size = tok_->vocab_size();
    ctx_.poll_ms = 1;
    engine_.script = tok_->encode(" one two three four five", false);
  }
  static Tokenizer* tok_;
  FakeEngine engine_;
  ServerContext ctx_;
};
Tokenizer* GenerationTest::tok_ = nullptr;

TEST_F(GenerationTest, NonStreamingCompletion) {
  std::shared_ptr<Generation> g;
  ApiError e = Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", "hi"}, {"max_tokens", 50}, {"n", 2}}, &g);
  ASSERT_TRUE(e.ok()) << e.message;
  Json out;
  ASSERT_TRUE(g->run_to_completion(&out).ok());
  EXPECT_EQ(out["object"], "text_completion");
  ASSERT_EQ(out["choices"].size(), 2u);
  EXPECT_EQ(out["choices"][1]["index"], 1);
  EXPECT_EQ(out["choices"][0]["text"], " one two three four five");
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(out["usage"]["completion_tokens"], 2 * engine_.script.size());
  EXPECT_EQ(out["usage"]["total_tokens"], out["usage"]["prompt_tokens"].get<int>() + out["usage"]["completion_tokens"].get<int>());
}

TEST_F(GenerationTest, StopStringCutsTextAndCancels) {
  std::shared_ptr<Generation> g;
  ASSERT_TRUE(Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", "hi"}, {"stop", "ee f"}, {"max_tokens", 50}}, &g).ok());
  Json out;
  ASSERT_TRUE(g->run_to_completion(&out).ok());
  EXPECT_EQ(out["choices"][0]["text"], " one two thr");
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
  ASSERT_EQ(engine_.channels.size(), 1u);
  EXPECT_TRUE(engine_.channels[0]->cancelled());
}

TEST_F(GenerationTest, LengthFinish) {
  std::shared_ptr<Generation> g;
  ASSERT_TRUE(Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", "hi"}, {"max_tokens", 2}}, &g).ok());
  Json out;
  ASSERT_TRUE(g->run_to_completion(&out).ok());
  // The fake stops after max_tokens with kStop unless more remained: 2 < script size -> length.
  EXPECT_EQ(out["usage"]["completion_tokens"], 2);
}

TEST_F(GenerationTest, StreamingEventOrder) {
  std::shared_ptr<Generation> g;
  ApiError e = Generation::start(ctx_, Endpoint::kCompletions,
                                 Json{{"prompt", "hi"}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}, &g);
  ASSERT_TRUE(e.ok()) << e.message;
  std::vector<std::string> events;
  g->run_streaming([&](const std::string& s) {
    events.push_back(s);
    return true;
  });
  ASSERT_GE(events.size(), 4u);
  for (const auto& ev : events) {
    ASSERT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    ASSERT_EQ(ev.substr(ev.size() - 2), "\n\n");
  }
  EXPECT_EQ(events.back(), "data: [DONE]\n\n");
  Json usage = Json::parse(events[events.size() - 2].substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], engine_.script.size());
  Json fin = Json::parse(events[events.size() - 3].substr(6));
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  std::string text;
  for (size_t i = 0; i + 3 < events.size(); ++i) {
    Json j = Json::parse(events[i].substr(6));
    EXPECT_TRUE(j["usage"].is_null());
    EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
    text += j["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, " one two three four five");
}

TEST_F(GenerationTest, DisconnectCancels) {
  std::shared_ptr<Generation> g;
  ASSERT_TRUE(Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", "hi"}, {"stream", true}}, &g).ok());
  int writes = 0;
  g->run_streaming([&](const std::string&) { return ++writes < 2; });
  EXPECT_EQ(writes, 2);
  EXPECT_TRUE(engine_.channels[0]->cancelled());
}

TEST_F(GenerationTest, EngineErrorsMapToStatuses) {
  std::shared_ptr<Generation> g;
  engine_.next_status = resource_exhausted("queue full");
  ApiError e = Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", "hi"}}, &g);
  EXPECT_EQ(e.status, 429);
  EXPECT_GT(e.retry_after_s, 0);
  engine_.next_status = unavailable("down");
  EXPECT_EQ(Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", "hi"}}, &g).status, 503);
  engine_.next_status = Status::ok();
  EXPECT_EQ(Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", "hi"}, {"model", "x"}}, &g).status, 404);
  // max_tokens over the context (64): clamped, or with strict_max_tokens a 400 naming it.
  ASSERT_TRUE(Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", "hi"}, {"max_tokens", 100}}, &g).ok());
  Json out;
  ASSERT_TRUE(g->run_to_completion(&out).ok());
  ApiError strict = Generation::start(ctx_, Endpoint::kCompletions,
                                      Json{{"prompt", "hi"}, {"max_tokens", 100}, {"strict_max_tokens", true}}, &g);
  EXPECT_EQ(strict.code, "context_length_exceeded");
  EXPECT_EQ(strict.param, "max_tokens");
  ApiError long_prompt =
      Generation::start(ctx_, Endpoint::kCompletions, Json{{"prompt", std::string(400, 'x')}, {"max_tokens", 1}}, &g);
  EXPECT_EQ(long_prompt.code, "context_length_exceeded");
  EXPECT_EQ(long_prompt.param, "prompt");
  EXPECT_EQ(Generation::start(ctx_, Endpoint::kChat, Json{{"messages", Json::array({{{"role", "user"}, {"content", "x"}}})}}, &g).code,
            "no_chat_template");
}

}  // namespace
}  // namespace ms::server
