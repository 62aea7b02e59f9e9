// The engine's device-sampling plumbing (CPU only): with a backend that
// advertises supports_sampling(), run_step calls step_sample (never step),
// passes a spec exactly for the sequences that need a token (params, prompt,
// output so far, per-choice seed) and forwards each SampleResult unchanged
// to the request's channel. The fake backend wraps RefBackend and samples
// with the CPU sampler, then marks its results (token remapped, logprobs
// offset) so that any resampling by the engine would show.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <random>

#include "model/model_loader.h"
#include "ref/ref_backend.h"
#include "sampling/sampler.h"
#include "scheduler/engine_impl.h"

namespace ms {
namespace {

LoadedModel& qwen3() {
  static std::unique_ptr<LoadedModel> m = [] {
    auto r = load_model(std::string(MEGASERVE_SOURCE_DIR) + "/tests/fixtures/hf/qwen3");
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return std::move(r).value();
  }();
  return *m;
}

// What the fake returned, per sequence id, in step order.
struct SampleLog {
  std::mutex mu;
  std::map<int64_t, std::vector<SampleResult>> results;
  std::map<int64_t, std::vector<size_t>> output_sizes;  // spec.output.size() at each call
  std::map<int64_t, std::vector<uint64_t>> seeds;
  int step_calls = 0, step_sample_calls = 0;
};

class FakeDeviceSampler final : public Backend {
 public:
  FakeDeviceSampler(std::unique_ptr<RefBackend> inner, std::shared_ptr<SampleLog> log)
      : inner_(std::move(inner)), log_(std::move(log)) {}
  const char* name() const override { return "fake-device-sampler"; }
  const ModelConfig& config() const override { return inner_->config(); }
  const KvSpec& kv_spec() const override { return inner_->kv_spec(); }
  Status step(const std::vector<SeqWork>& batch, StepResult* out) override {
    std::lock_guard<std::mutex> lock(log_->mu);
    ++log_->step_calls;
    return inner_->step(batch, out);
  }
  bool supports_sampling() const override { return true; }
  Status step_sample(const std::vector<SeqWork>& batch, const std::vector<const SampleSpec*>& specs,
                     std::vector<SampleResult>* out) override {
    if (specs.size() != batch.size()) return internal_error("specs and batch differ in size");
    StepResult res;
    MS_RETURN_IF_ERROR(inner_->step(batch, &res));
    const int V = config().vocab_size;
    out->assign(batch.size(), SampleResult{});
    std::lock_guard<std::mutex> lock(log_->mu);
    ++log_->step_sample_calls;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!specs[i]) continue;
      if (!batch[i].need_logits) return internal_error("spec for a sequence without need_logits");
      const SampleSpec& s = *specs[i];
      SamplerContext ctx{s.prompt, s.output, s.seed, s.allowed};
      SampleResult r = sample_token(res.logits[i], s.params, ctx);
      r.token = (r.token * 7 + 3) % V;  // mark: the engine must forward this, not resample
      r.logprob -= 100.f;
      for (auto& t : r.top) t.logprob -= 100.f;
      log_->results[batch[i].seq_id].push_back(r);
      log_->output_sizes[batch[i].seq_id].push_back(s.output.size());
      log_->seeds[batch[i].seq_id].push_back(s.seed);
      (*out)[i] = std::move(r);
    }
    return Status::ok();
  }

 private:
  std::unique_ptr<RefBackend> inner_;
  std::shared_ptr<SampleLog> log_;
};

std::unique_ptr<Backend> fake(std::shared_ptr<SampleLog> log) {
  LoadedModel& m = qwen3();
  RefBackendOptions o;
  o.block_size = 4;
  o.threads = 1;
  o.kv_bytes = size_t(2) * m.config.n_kv_heads * m.config.head_dim * 4 * sizeof(float) * 256 * m.config.n_layers;
  auto ref = RefBackend::create(m.config, m.weights, o);
  EXPECT_TRUE(ref.is_ok()) << ref.status().to_string();
  return std::make_unique<FakeDeviceSampler>(std::move(ref).value(), std::move(log));
}

TEST(EngineDeviceSampling, UsesStepSampleAndForwardsResultsUnchanged) {
  auto log = std::make_shared<SampleLog>();
  EngineOptions opt;
  opt.max_batch = 4;
  opt.prefill_chunk = 5;  // the 12-token prompt takes three steps: the first two need no token
  auto engine = make_engine(fake(log), opt);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  Request r;
  r.id = "device-sampling";
  std::mt19937 g(3);
  for (int i = 0; i < 12; ++i) r.prompt.push_back(static_cast<int32_t>(4 + g() % 500));
  r.max_tokens = 6;
  r.n = 2;
  r.sampling.temperature = 0.8f;
  r.sampling.top_k = 50;
  r.sampling.repetition_penalty = 1.2f;
  r.sampling.seed = 1234;
  r.sampling.logprobs = 2;
  r.sampling.ignore_eos = true;
  r.channel = std::make_shared<RequestChannel>();
  auto ch = r.channel;
  ASSERT_TRUE((*engine)->submit(std::move(r)).is_ok());
  std::vector<std::vector<TokenEvent>> events(2);
  int done = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done < 2 && std::chrono::steady_clock::now() < deadline)
    for (auto& item : ch->pop_all(50)) {
      if (item.token) events[item.token->choice].push_back(*item.token);
      if (item.finish) {
        EXPECT_TRUE(item.finish->error.is_ok()) << item.finish->error.to_string();
        ++done;
      }
    }
  ASSERT_EQ(done, 2);
  (*engine)->shutdown();

  std::lock_guard<std::mutex> lock(log->mu);
  EXPECT_EQ(log->step_calls, 0) << "a sampling backend must not get step()";
  EXPECT_GT(log->step_sample_calls, 0);
  ASSERT_EQ(log->results.size(), 2u);  // sequence ids 0 and 1: choices 0 and 1
  for (int c = 0; c < 2; ++c) {
    const auto& want = log->results[c];
    ASSERT_EQ(events[c].size(), want.size()) << "choice " << c;
    ASSERT_EQ(want.size(), 6u);
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(events[c][k].token, want[k].token);
      EXPECT_EQ(events[c][k].logprob, want[k].logprob);
      ASSERT_EQ(events[c][k].top.size(), want[k].top.size());
      for (size_t t = 0; t < want[k].top.size(); ++t) {
        EXPECT_EQ(events[c][k].top[t].token, want[k].top[t].token);
        EXPECT_EQ(events[c][k].top[t].logprob, want[k].top[t].logprob);
      }
      EXPECT_EQ(log->output_sizes[c][k], k) << "the draw index is the number of tokens sampled before";
      EXPECT_EQ(log->seeds[c][k], 1234u + c) << "per-choice seed";
    }
  }
}

}  // namespace
}  // namespace ms
