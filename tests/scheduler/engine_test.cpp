// The engine (make_engine) on the CPU reference backend: concurrent submits,
// n > 1, max_tokens, stop token ids, seeds, logprobs, cancellation, errors
// (validation, OutOfRange with the numbers, queue full), a failing backend
// and shutdown with requests pending. Lives in tests/scheduler because the
// engine implementation is part of ms_scheduler.
#include "scheduler/engine_impl.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "engine/generate.h"
#include "model/model_loader.h"
#include "ref/ref_backend.h"
#include "sampling/json_schema.h"
#include "sampling/token_mask.h"

namespace ms {
namespace {

using V = std::vector<int32_t>;

LoadedModel& qwen3() {
  static std::unique_ptr<LoadedModel> m = [] {
    auto r = load_model(std::string(MEGASERVE_SOURCE_DIR) + "/tests/fixtures/hf/qwen3");
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return std::move(r).value();
  }();
  return *m;
}

std::unique_ptr<RefBackend> backend(int blocks = 256) {
  LoadedModel& m = qwen3();
  RefBackendOptions o;
  o.block_size = 4;
  o.threads = 1;
  o.kv_bytes = size_t(2) * m.config.n_kv_heads * m.config.head_dim * 4 * sizeof(float) * blocks * m.config.n_layers;
  return std::move(RefBackend::create(m.config, m.weights, o)).value();
}

V prompt_of(int n, int seed) {
  std::mt19937 rng(seed);
  V v(n);
  for (auto& t : v) t = 4 + rng() % 500;
  return v;
}

V greedy_reference(const V& prompt, int max_tokens) {
  auto b = backend();
  GenerateOptions go;
  go.max_new_tokens = max_tokens;
  go.stop_at_eos = false;
  return std::move(generate_greedy(*b, prompt, go)).value();
}

struct Collected {
  std::vector<V> tokens;
  std::vector<std::vector<TokenEvent>> events;
  std::vector<FinishEvent> finish;
  bool complete = false;
};

Collected collect(RequestChannel& ch, int n, int timeout_ms = 30000) {
  Collected c;
  c.tokens.resize(n);
  c.events.resize(n);
  c.finish.resize(n);
  int done = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (done < n && std::chrono::steady_clock::now() < deadline) {
    for (auto& item : ch.pop_all(50)) {
      if (item.token) {
        c.tokens[item.token->choice].push_back(item.token->token);
        c.events[item.token->choice].push_back(*item.token);
      }
      if (item.finish) {
        c.finish[item.finish->choice] = *item.finish;
        ++done;
      }
    }
  }
  c.complete = done == n;
  return c;
}

Request make_request(const V& prompt, int max_tokens, int n = 1) {
  Request r;
  r.id = "test";
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.n = n;
  r.sampling.temperature = 0;
  r.sampling.ignore_eos = true;
  r.channel = std::make_shared<RequestChannel>();
  return r;
}

std::unique_ptr<Engine> start(EngineOptions opt = {}, int blocks = 256) {
  auto e = make_engine(backend(blocks), opt);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  return std::move(e).value();
}

TEST(Engine, ConcurrentSubmitsFromSeveralThreads) {
  EngineOptions opt;
  opt.max_batch = 5;
  opt.prefill_chunk = 16;
  auto engine = start(opt);
  const int kThreads = 4, kPerThread = 4;
  std::vector<V> prompts;
  for (int i = 0; i < kThreads * kPerThread; ++i) prompts.push_back(prompt_of(5 + (i * 5) % 20, i));
  std::vector<Collected> results(prompts.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < kPerThread; ++k) {
        int i = t * kPerThread + k;
        Request r = make_request(prompts[i], 8);
        auto ch = r.channel;
        ASSERT_TRUE(engine->submit(std::move(r)).is_ok());
        results[i] = collect(*ch, 1);
      }
    });
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(results[i].complete) << i;
    EXPECT_EQ(results[i].tokens[0], greedy_reference(prompts[i], 8)) << i;
    EXPECT_EQ(results[i].finish[0].reason, FinishReason::kLength);
    EXPECT_EQ(results[i].finish[0].completion_tokens, 8);
    EXPECT_EQ(results[i].finish[0].prompt_tokens, static_cast<int>(prompts[i].size()));
  }
  EngineStats st = engine->stats();
  EXPECT_EQ(st.requests_finished, prompts.size());
  EXPECT_EQ(st.generation_tokens, 8 * prompts.size());
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_TRUE(st.healthy);
}

TEST(Engine, NChoicesShareThePromptAndFollowTheirSeeds) {
  auto engine = start();
  V prompt = prompt_of(14, 3);
  Request r = make_request(prompt, 6, 3);
  auto ch = r.channel;
  ASSERT_TRUE(engine->submit(std::move(r)).is_ok());
  Collected c = collect(*ch, 3);
  ASSERT_TRUE(c.complete);
  V want = greedy_reference(prompt, 6);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.tokens[i], want) << i;
  EXPECT_EQ(c.finish[1].cached_prompt_tokens, 12);  // 3 full blocks of the first choice
  EXPECT_EQ(c.finish[2].cached_prompt_tokens, 12);

  // Sampled with a seed: same seed -> same choices; choices differ from each other.
  auto run = [&](uint64_t seed) {
    Request q = make_request(prompt, 10, 2);
    q.sampling.temperature = 1.5f;
    q.sampling.seed = seed;
    auto qc = q.channel;
    EXPECT_TRUE(engine->submit(std::move(q)).is_ok());
    return collect(*qc, 2).tokens;
  };
  auto a = run(77), b = run(77), d = run(78);
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a, d);
}

TEST(Engine, StopTokenIdsAndEos) {
  auto engine = start();
  V prompt = prompt_of(9, 4);
  V want = greedy_reference(prompt, 10);
  Request r = make_request(prompt, 10);
  r.stop_token_ids = {want[3]};
  auto ch = r.channel;
  ASSERT_TRUE(engine->submit(std::move(r)).is_ok());
  Collected c = collect(*ch, 1);
  ASSERT_TRUE(c.complete);
  size_t first = std::find(want.begin(), want.end(), want[3]) - want.begin();
  EXPECT_EQ(c.tokens[0], V(want.begin(), want.begin() + first + 1));  // the stop token is reported, then stop
  EXPECT_EQ(c.finish[0].reason, FinishReason::kStop);
}

TEST(Engine, LogprobsAreReported) {
  auto engine = start();
  Request r = make_request(prompt_of(6, 5), 4);
  r.sampling.logprobs = 3;
  auto ch = r.channel;
  ASSERT_TRUE(engine->submit(std::move(r)).is_ok());
  Collected c = collect(*ch, 1);
  ASSERT_TRUE(c.complete);
  for (const TokenEvent& e : c.events[0]) {
    ASSERT_EQ(e.top.size(), 3u);
    EXPECT_EQ(e.top[0].token, e.token);  // greedy: the chosen token is the most likely
    EXPECT_FLOAT_EQ(e.top[0].logprob, e.logprob);
    EXPECT_LE(e.logprob, 0.f);
    EXPECT_GE(e.top[0].logprob, e.top[1].logprob);
  }
}

TEST(Engine, MaxModelLenAboveTheModelsIsRefused) {
  const int model_len = qwen3().config.max_position;
  ASSERT_GT(model_len, 0);
  EngineOptions opt;
  opt.max_model_len = model_len + 1;
  auto e = make_engine(backend(), opt);
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find(std::to_string(model_len)), std::string::npos) << e.status().message();
  EXPECT_NE(e.status().message().find("max_position_embeddings"), std::string::npos);
  opt.max_model_len = model_len;  // equal is fine
  EXPECT_TRUE(make_engine(backend(), opt).is_ok());
}

// The model's context (256 tokens here) is lowered to what one sequence can
// hold (8 blocks x 4 tokens per group: the sliding group cannot hold its
// window plus a 512-token chunk, so it bounds too); an explicit
// max_model_len over it is refused.
TEST(Engine, MaxModelLenFollowsTheKvCache) {
  auto small = start({}, 8);
  EXPECT_EQ(small->max_model_len(), 32);
  KvCapacity cap = small->stats().kv_capacity;
  EXPECT_TRUE(cap.bounds_context);
  EXPECT_EQ(cap.max_request_tokens, 32);
  EXPECT_EQ(cap.context_tokens, 32);
  EXPECT_EQ(cap.block_size, 4);
  ASSERT_EQ(cap.groups.size(), 2u);  // full and sliding (window 8) layers
  EXPECT_EQ(cap.groups[0].window, 0);
  EXPECT_EQ(cap.groups[0].blocks, 8);
  EXPECT_EQ(cap.groups[1].window, 8);

  auto big = start({}, 256);  // 1024 tokens: the model's 256 stand
  EXPECT_EQ(big->max_model_len(), 256);
  EXPECT_FALSE(big->stats().kv_capacity.bounds_context);
  EXPECT_EQ(big->stats().kv_capacity.max_request_tokens, 256);
  EXPECT_EQ(big->stats().kv_capacity.context_tokens, 1024);

  EngineOptions opt;
  opt.max_model_len = 64;
  auto refused = make_engine(backend(8), opt);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("max_model_len 64 does not fit the KV cache: one sequence can hold at "
                                            "most 32 tokens"),
            std::string::npos)
      << refused.status().message();
  opt.max_model_len = 32;
  EXPECT_TRUE(make_engine(backend(8), opt).is_ok());
}

TEST(Engine, ValidationErrors) {
  EngineOptions opt;
  opt.max_model_len = 100;
  auto engine = start(opt);
  EXPECT_EQ(engine->max_model_len(), 100);
  Status st = engine->submit(make_request(prompt_of(90, 1), 20));
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("90"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("20"), std::string::npos);
  EXPECT_NE(st.message().find("110"), std::string::npos);
  EXPECT_NE(st.message().find("100"), std::string::npos);
  EXPECT_EQ(engine->submit(make_request({}, 4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(make_request({1, 512}, 4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(make_request({1, -1}, 4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(make_request({1, 2}, 4, 0)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(make_request({1, 2}, 4, kMaxChoices + 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(make_request({1, 2}, 0)).code(), StatusCode::kInvalidArgument);
  Request bad = make_request({1, 2}, 4);
  bad.sampling.top_p = 2;
  EXPECT_EQ(engine->submit(std::move(bad)).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(make_engine(backend(), EngineOptions{9, 512, 256, 0, true}).is_ok());
  EXPECT_FALSE(make_engine(backend(), EngineOptions{0, 512, 256, 0, true}).is_ok());
}

TEST(Engine, QueueFullIsResourceExhausted) {
  EngineOptions opt;
  opt.max_batch = 1;
  opt.max_waiting = 2;
  auto engine = start(opt);
  std::vector<std::shared_ptr<RequestChannel>> accepted;
  int rejected = 0;
  for (int i = 0; i < 12; ++i) {
    Request r = make_request(prompt_of(8, i), 40);
    auto ch = r.channel;
    Status st = engine->submit(std::move(r));
    if (st.is_ok()) {
      accepted.push_back(ch);
    } else {
      EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  for (auto& ch : accepted) EXPECT_TRUE(collect(*ch, 1, 60000).complete);
}

// Fails every step after the first `ok_steps` with the given code.
class FailingBackend final : public Backend {
 public:
  FailingBackend(std::unique_ptr<Backend> inner, int ok_steps, StatusCode code)
      : inner_(std::move(inner)), ok_steps_(ok_steps), code_(code) {}
  const char* name() const override { return "failing"; }
  const ModelConfig& config() const override { return inner_->config(); }
  const KvSpec& kv_spec() const override { return inner_->kv_spec(); }
  Status step(const std::vector<SeqWork>& batch, StepResult* out) override {
    if (ok_steps_-- > 0) return inner_->step(batch, out);
    return Status(code_, "injected fault");
  }

 private:
  std::unique_ptr<Backend> inner_;
  int ok_steps_;
  StatusCode code_;
};

// Sleeps before each step so a test can act while a request is running.
class SlowBackend final : public Backend {
 public:
  explicit SlowBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const char* name() const override { return "slow"; }
  const ModelConfig& config() const override { return inner_->config(); }
  const KvSpec& kv_spec() const override { return inner_->kv_spec(); }
  Status step(const std::vector<SeqWork>& batch, StepResult* out) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    return inner_->step(batch, out);
  }

 private:
  std::unique_ptr<Backend> inner_;
};

TEST(Engine, CancellationFreesKv) {
  auto e = make_engine(std::make_unique<SlowBackend>(backend()), EngineOptions{});
  ASSERT_TRUE(e.is_ok());
  auto& engine = *e;
  Request r = make_request(prompt_of(20, 6), 200);
  auto ch = r.channel;
  ASSERT_TRUE(engine->submit(std::move(r)).is_ok());
  // Wait for the first token, then cancel.
  int tokens = 0;
  for (int i = 0; i < 400 && tokens == 0; ++i)
    for (auto& item : ch->pop_all(50)) tokens += item.token.has_value();
  ASSERT_GT(tokens, 0);
  // Stats are published after each step: poll.
  for (int i = 0; i < 100 && engine->stats().kv_blocks_used == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_GT(engine->stats().kv_blocks_used, 0);
  ch->cancel();
  Collected c = collect(*ch, 1);
  ASSERT_TRUE(c.complete);
  EXPECT_EQ(c.finish[0].reason, FinishReason::kCancelled);
  EXPECT_LT(c.finish[0].completion_tokens, 200);
  for (int i = 0; i < 100 && engine->stats().kv_blocks_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST(Engine, DeviceFaultFailsRequestsAndMarksUnhealthy) {
  auto e = make_engine(std::make_unique<FailingBackend>(backend(), 3, StatusCode::kInternal), EngineOptions{});
  ASSERT_TRUE(e.is_ok());
  auto& engine = *e;
  Request r = make_request(prompt_of(6, 7), 20);
  auto ch = r.channel;
  ASSERT_TRUE(engine->submit(std::move(r)).is_ok());
  Collected c = collect(*ch, 1);
  ASSERT_TRUE(c.complete);
  EXPECT_EQ(c.finish[0].reason, FinishReason::kError);
  EXPECT_NE(c.finish[0].error.message().find("injected fault"), std::string::npos);
  EXPECT_EQ(c.tokens[0].size(), 3u);
  for (int i = 0; i < 100 && engine->stats().healthy; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(engine->stats().healthy);
  EXPECT_EQ(engine->submit(make_request({1, 2}, 2)).code(), StatusCode::kUnavailable);
}

TEST(Engine, NonFatalStepErrorFailsOnlyThatStep) {
  auto e = make_engine(std::make_unique<FailingBackend>(backend(), 0, StatusCode::kInvalidArgument), EngineOptions{});
  ASSERT_TRUE(e.is_ok());
  Request r = make_request(prompt_of(6, 8), 5);
  auto ch = r.channel;
  ASSERT_TRUE((*e)->submit(std::move(r)).is_ok());
  Collected c = collect(*ch, 1);
  ASSERT_TRUE(c.complete);
  EXPECT_EQ(c.finish[0].reason, FinishReason::kError);
  EXPECT_TRUE((*e)->stats().healthy);
}

TEST(Engine, ShutdownFinishesPendingRequests) {
  EngineOptions opt;
  opt.max_batch = 1;
  auto engine = start(opt);
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (int i = 0; i < 4; ++i) {
    Request r = make_request(prompt_of(10, i), 200, 2);
    chans.push_back(r.channel);
    ASSERT_TRUE(engine->submit(std::move(r)).is_ok());
  }
  engine->shutdown();
  for (auto& ch : chans) {
    Collected c = collect(*ch, 2, 5000);
    ASSERT_TRUE(c.complete);
    for (const auto& f : c.finish) EXPECT_EQ(f.reason, FinishReason::kError);
  }
  EXPECT_EQ(engine->submit(make_request({1, 2}, 2)).code(), StatusCode::kUnavailable);
  engine->shutdown();  // idempotent
}

TEST(Engine, RequestLargerThanTheKvCacheIsRejected) {
  auto engine = start({}, 8);  // 8 blocks of 4 tokens per group
  Status st = engine->submit(make_request(prompt_of(30, 1), 10));
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  // The message names the request, the limit and the cache behind it.
  EXPECT_NE(st.message().find("= 40 tokens exceeds the maximum context length of 32 tokens (what the KV cache holds: "
                              "group 0"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("8 blocks x 4 tokens = 32 tokens"), std::string::npos) << st.message();
  Request ok = make_request(prompt_of(20, 1), 10);
  auto ch = ok.channel;
  EXPECT_TRUE(engine->submit(std::move(ok)).is_ok());
  EXPECT_TRUE(collect(*ch, 1).complete);
}

// Structured outputs through the engine: a random-weight model (it knows no
// JSON) constrained by a grammar over a 512-token vocabulary built for the
// fixture; every choice must finish "stop" with output that parses, an
// unconstrained request in the same batches must be unaffected, max_tokens
// cuts with "length", and ignore_eos does not keep a complete output running.
std::shared_ptr<CompiledGrammar> fixture_grammar(const char* schema) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  const char* pieces[] = {"{\"", "\":", "\",", "\"}", "true", "false", "null", " \"", "\n  ", "12", "\": \"",
                          "ab", "cd", "\"a\"", "}", "[", "]", ",", "\"b\""};
  for (int i = 0; bytes.size() < 512; ++i) bytes.push_back(std::string(pieces[i % std::size(pieces)]) + std::to_string(i));
  std::vector<uint8_t> excluded(bytes.size(), 0);
  excluded[3] = 1;  // the fixture's eos id: a stop token, not text
  auto g = compile_json_schema(nlohmann::ordered_json::parse(schema));
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return CompiledGrammar::create(std::move(g).value(), TokenVocab::create(std::move(bytes), std::move(excluded)));
}

TEST(Engine, GrammarConstrainsEveryChoiceAndOnlyItsOwnRequest) {
  EngineOptions opt;
  opt.max_batch = 4;
  auto engine = start(opt);
  auto cg = fixture_grammar(R"({"type":"object","properties":{"a":{"type":"string","maxLength":5},
    "b":{"type":"integer","minimum":0,"maximum":99},"c":{"type":"array","items":{"enum":[true,null]},"maxItems":2}},
    "required":["a","b","c"],"additionalProperties":false})");
  Request constrained = make_request(prompt_of(12, 3), 240, 3);  // the fixture has 256 positions
  constrained.sampling.temperature = 1.0f;
  constrained.sampling.seed = 11;
  constrained.sampling.ignore_eos = false;
  constrained.sampling.grammar = cg;
  Request plain = make_request(prompt_of(9, 4), 12);
  const V plain_prompt = plain.prompt;
  auto ch = constrained.channel, ch_plain = plain.channel;
  ASSERT_TRUE(engine->submit(std::move(constrained)).is_ok());
  ASSERT_TRUE(engine->submit(std::move(plain)).is_ok());
  Collected c = collect(*ch, 3), p = collect(*ch_plain, 1);
  ASSERT_TRUE(c.complete && p.complete);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(c.finish[k].reason, FinishReason::kStop) << k;
    std::string text;
    for (int32_t t : c.tokens[k]) text += cg->vocab().bytes(t);
    nlohmann::json v;
    ASSERT_NO_THROW(v = nlohmann::json::parse(text)) << text;
    EXPECT_TRUE(v["a"].is_string() && v["b"].is_number_integer() && v["c"].is_array()) << text;
    EXPECT_TRUE(grammar_accepts(cg->grammar(), text)) << text;
  }
  EXPECT_NE(c.tokens[0], c.tokens[1]);  // choices sample independently
  EXPECT_EQ(p.tokens[0], greedy_reference(plain_prompt, 12));
  for (int i = 0; i < 100 && engine->stats().kv_blocks_used != 0; ++i)  // stats publish after the step
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST(Engine, GrammarOutputCutByMaxTokensAndEndedDespiteIgnoreEos) {
  auto engine = start();
  auto cg = fixture_grammar(R"({"enum":["ab","cd"]})");
  Request cut = make_request(prompt_of(8, 5), 2);
  cut.sampling.grammar = fixture_grammar(R"({"type":"array","items":{"type":"integer"},"minItems":5})");
  Request whole = make_request(prompt_of(8, 6), 50);  // ignore_eos: the grammar still ends it
  whole.sampling.grammar = cg;
  auto ch_cut = cut.channel, ch_whole = whole.channel;
  ASSERT_TRUE(engine->submit(std::move(cut)).is_ok());
  ASSERT_TRUE(engine->submit(std::move(whole)).is_ok());
  Collected a = collect(*ch_cut, 1), b = collect(*ch_whole, 1);
  ASSERT_TRUE(a.complete && b.complete);
  EXPECT_EQ(a.finish[0].reason, FinishReason::kLength);
  EXPECT_EQ(a.tokens[0].size(), 2u);
  EXPECT_EQ(b.finish[0].reason, FinishReason::kStop);
  std::string text;
  for (int32_t t : b.tokens[0]) text += cg->vocab().bytes(t);
  EXPECT_TRUE(text == "\"ab\"" || text == "\"cd\"") << text;
}

}  // namespace
}  // namespace ms
