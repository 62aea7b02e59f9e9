// Scheduler: chunked prefill interleaving, batch sizes 1..8 and preemption
// under a tiny KV budget against single-sequence greedy decoding on the CPU
// reference backend, cancellation, n > 1 prefix sharing, and long randomized
// operation sequences checking invariants.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/generate.h"
#include "model/model_loader.h"
#include "ref/ref_backend.h"

namespace ms {
namespace {

using V = std::vector<int32_t>;

KvSpec fake_spec(int block_size, std::vector<std::pair<int, int>> groups) {
  KvSpec s;
  s.block_size = block_size;
  for (auto [window, blocks] : groups) {
    KvGroupSpec g;
    g.window = window;
    g.num_blocks = blocks;
    s.groups.push_back(g);
  }
  return s;
}

V make_prompt(int n, int seed) {
  std::mt19937 rng(seed);
  V v(n);
  for (auto& t : v) t = 4 + rng() % 500;
  return v;
}

TEST(Scheduler, ChunkedPrefillNeverStallsDecodes) {
  Scheduler s(fake_spec(4, {{0, 64}}), {4, 8}, true, 1);
  ASSERT_TRUE(s.add({1, make_prompt(5, 1), 40, {}}).is_ok());
  // Step 1: prefill A entirely (5 tokens <= chunk 8).
  StepPlan p = s.schedule();
  ASSERT_EQ(p.work.size(), 1u);
  EXPECT_EQ(p.work[0].tokens.size(), 5u);
  EXPECT_TRUE(p.work[0].need_logits);
  s.update_from_output(p, {7});
  // A long prompt arrives: 30 tokens in chunks of 8, 8, 8, 6 while A decodes.
  ASSERT_TRUE(s.add({2, make_prompt(30, 2), 4, {}}).is_ok());
  std::vector<size_t> chunks;
  for (int step = 0; step < 4; ++step) {
    p = s.schedule();
    ASSERT_EQ(p.work.size(), 2u) << step;
    EXPECT_EQ(p.work[0].seq_id, 1);
    EXPECT_EQ(p.work[0].tokens.size(), 1u);  // A's decode row every step
    EXPECT_EQ(p.work[1].seq_id, 2);
    EXPECT_EQ(p.work[1].start_pos, step * 8);
    chunks.push_back(p.work[1].tokens.size());
    EXPECT_EQ(p.work[1].need_logits, step == 3);
    s.update_from_output(p, {7, 9});
    ASSERT_TRUE(s.check_invariants().is_ok());
  }
  EXPECT_EQ(chunks, (std::vector<size_t>{8, 8, 8, 6}));
  EXPECT_EQ(s.sequence(2).num_output(), 1);
}

TEST(Scheduler, RejectsASequenceThatCannotFitAlone) {
  Scheduler s(fake_spec(4, {{0, 4}}), {2, 8}, true, 1);
  Status st = s.add({1, make_prompt(10, 1), 7, {}});  // 17 tokens: 5 blocks > 4
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(s.add({2, make_prompt(10, 1), 6, {}}).is_ok());
  EXPECT_EQ(s.add({}).code(), StatusCode::kInvalidArgument);  // empty prompt
}

TEST(Scheduler, AbortFreesBlocksAtOnce) {
  Scheduler s(fake_spec(4, {{0, 16}, {6, 16}}), {4, 16}, true, 1);
  ASSERT_TRUE(s.add({1, make_prompt(12, 1), 8, {}}).is_ok());
  ASSERT_TRUE(s.add({2, make_prompt(3, 2), 8, {}}).is_ok());
  StepPlan p = s.schedule();
  ASSERT_EQ(p.work.size(), 2u);
  s.update_from_output(p, {5, 6});
  EXPECT_EQ(s.kv().pool(0).num_used(), 4);
  s.abort(1);
  EXPECT_EQ(s.kv().pool(0).num_used(), 1);
  EXPECT_TRUE(s.check_invariants().is_ok());
  s.abort(2);
  EXPECT_EQ(s.kv().num_blocks_used(), 0);
  EXPECT_TRUE(s.idle());
}

TEST(Scheduler, StopIdsAndMaxTokens) {
  Scheduler s(fake_spec(4, {{0, 16}}), {4, 16}, true, 1);
  ASSERT_TRUE(s.add({1, make_prompt(3, 1), 5, {42}}).is_ok());
  ASSERT_TRUE(s.add({2, make_prompt(3, 2), 2, {42}}).is_ok());
  StepPlan p = s.schedule();
  auto u = s.update_from_output(p, {10, 11});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].finish, FinishReason::kNone);
  p = s.schedule();
  u = s.update_from_output(p, {42, 12});
  EXPECT_EQ(u[0].finish, FinishReason::kStop);
  EXPECT_EQ(u[1].finish, FinishReason::kLength);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.kv().num_blocks_used(), 0);
}

TEST(Scheduler, SiblingsWaitForThePromptAndShareItsBlocks) {
  Scheduler s(fake_spec(4, {{0, 32}}), {4, 64}, true, 1);
  V prompt = make_prompt(10, 3);
  ASSERT_TRUE(s.add({1, prompt, 4, {}}).is_ok());
  ASSERT_TRUE(s.add({2, prompt, 4, {}, 1}).is_ok());
  ASSERT_TRUE(s.add({3, prompt, 4, {}, 1}).is_ok());
  StepPlan p = s.schedule();
  ASSERT_EQ(p.work.size(), 1u);  // siblings held back
  s.update_from_output(p, {20});
  p = s.schedule();
  ASSERT_EQ(p.work.size(), 3u);
  EXPECT_EQ(p.work[1].start_pos, 8);  // two full blocks from the cache
  EXPECT_EQ(p.work[2].start_pos, 8);
  EXPECT_EQ(p.work[1].block_tables[0][0], p.work[0].block_tables[0][0]);
  EXPECT_EQ(s.kv().pool(0).ref_count(p.work[0].block_tables[0][0]), 3);
  EXPECT_EQ(s.sequence(2).cached_prompt_tokens, 8);
  EXPECT_TRUE(s.check_invariants().is_ok());
}

// Randomized: random arrivals, aborts and sampled tokens over a small cache;
// invariants after every step; every sequence not aborted finishes.
class SchedulerRandomized : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SchedulerRandomized, InvariantsAndEveryRequestFinishes) {
  std::mt19937 rng(GetParam());
  const int max_batch = 1 + GetParam() % 8;
  Scheduler s(fake_spec(4, {{0, 20}, {6, 10}}), {max_batch, 1 + int(rng() % 12)}, GetParam() % 3 != 0, 9);
  std::vector<V> bases = {make_prompt(30, 1), make_prompt(30, 2)};
  int64_t next = 0;
  std::map<int64_t, int> max_tokens;
  std::map<int64_t, int> produced;
  int finished = 0, aborted = 0, rejected = 0;
  for (int step = 0; step < 2500 || !s.idle(); ++step) {
    ASSERT_LT(step, 200000) << "does not drain";
    if (rng() % 4 == 0 && step < 2500) {
      V prompt = bases[rng() % 2];
      prompt.resize(1 + rng() % 30);
      if (rng() % 2) prompt.push_back(rng() % 500);
      int mt = 1 + rng() % 30;
      int64_t wait = (rng() % 5 == 0 && next > 0) ? next - 1 : -1;
      Status st = s.add({next, prompt, mt, {3}, wait});
      if (st.is_ok()) {
        max_tokens[next] = mt;
      } else {
        ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
        ++rejected;
      }
      ++next;
    }
    if (rng() % 50 == 0 && !max_tokens.empty()) {
      auto it = std::next(max_tokens.begin(), rng() % max_tokens.size());
      s.abort(it->first);
      max_tokens.erase(it);
      ++aborted;
    }
    if (s.idle()) continue;
    StepPlan p = s.schedule();
    ASSERT_TRUE(p.failed.empty());
    ASSERT_FALSE(p.empty()) << "no progress at step " << step;
    ASSERT_LE(static_cast<int>(p.work.size()), max_batch);
    std::vector<int32_t> sampled;
    for (size_t i = 0; i < p.work.size(); ++i) sampled.push_back(rng() % 40);  // 3 = stop id sometimes
    for (const SeqUpdate& u : s.update_from_output(p, sampled)) {
      ++produced[u.seq_id];
      if (u.finish != FinishReason::kNone) {
        ASSERT_TRUE(max_tokens.count(u.seq_id));
        if (u.finish == FinishReason::kLength) {
          EXPECT_EQ(produced[u.seq_id], max_tokens[u.seq_id]);
        }
        EXPECT_LE(produced[u.seq_id], max_tokens[u.seq_id]);
        max_tokens.erase(u.seq_id);
        ++finished;
      }
    }
    Status st = s.check_invariants();
    ASSERT_TRUE(st.is_ok()) << "step " << step << ": " << st.to_string();
  }
  EXPECT_TRUE(s.idle());
  EXPECT_TRUE(max_tokens.empty()) << max_tokens.size() << " never finished";
  EXPECT_EQ(s.kv().num_blocks_used(), 0);
  EXPECT_GT(finished, 100);
  RecordProperty("preemptions", std::to_string(s.stats().preemptions));
  (void)aborted;
  (void)rejected;
}

INSTANTIATE_TEST_SUITE_P(Seeds, SchedulerRandomized, ::testing::Range(1u, 17u));

// ---- On the CPU reference backend -------------------------------------------

struct Model {
  std::unique_ptr<LoadedModel> m;
};

LoadedModel& fixture(const std::string& family) {
  static std::map<std::string, Model> cache;
  auto& slot = cache[family];
  if (!slot.m) {
    auto r = load_model(std::string(MEGASERVE_SOURCE_DIR) + "/tests/fixtures/hf/" + family);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    slot.m = std::move(r).value();
  }
  return *slot.m;
}

std::unique_ptr<RefBackend> ref_backend(const std::string& family, int blocks_per_group, int block_size = 4) {
  LoadedModel& m = fixture(family);
  RefBackendOptions o;
  o.block_size = block_size;
  o.threads = 1;
  // make_kv_spec: each group gets budget / n_layers * its layers bytes.
  size_t per_layer_block = size_t(2) * m.config.n_kv_heads * m.config.head_dim * block_size * sizeof(float);
  o.kv_bytes = per_layer_block * blocks_per_group * m.config.n_layers;
  auto b = RefBackend::create(m.config, m.weights, o);
  EXPECT_TRUE(b.is_ok());
  return std::move(b).value();
}

std::vector<V> reference_outputs(const std::string& family, const std::vector<V>& prompts, int max_tokens) {
  auto b = ref_backend(family, 256);
  std::vector<V> out;
  for (const auto& p : prompts) {
    GenerateOptions go;
    go.max_new_tokens = max_tokens;
    go.stop_at_eos = false;
    auto r = generate_greedy(*b, p, go);
    EXPECT_TRUE(r.is_ok());
    out.push_back(*r);
  }
  return out;
}

// Runs all prompts through the scheduler with greedy sampling.
void run_greedy(Scheduler& s, Backend& b, const std::vector<V>& prompts, int max_tokens, int max_batch,
                std::vector<V>* out) {
  out->assign(prompts.size(), {});
  for (size_t i = 0; i < prompts.size(); ++i) ASSERT_TRUE(s.add({int64_t(i), prompts[i], max_tokens, {}}).is_ok());
  for (int step = 0; !s.idle(); ++step) {
    ASSERT_LT(step, 5000) << "no completion";
    StepPlan p = s.schedule();
    ASSERT_TRUE(p.failed.empty());
    ASSERT_FALSE(p.empty());
    ASSERT_LE(static_cast<int>(p.work.size()), max_batch);
    StepResult r;
    Status st = b.step(p.work, &r);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    std::vector<int32_t> sampled(p.work.size(), 0);
    for (size_t i = 0; i < p.work.size(); ++i)
      if (p.work[i].need_logits) sampled[i] = argmax(r.logits[i]);
    for (const SeqUpdate& u : s.update_from_output(p, sampled)) (*out)[u.seq_id].push_back(u.token);
    ASSERT_TRUE(s.check_invariants().is_ok());
  }
}

std::vector<V> test_prompts(int count, int seed) {
  std::vector<V> prompts;
  V shared = make_prompt(9, seed);  // a common prefix, for cache hits
  for (int i = 0; i < count; ++i) {
    V p = (i % 2) ? shared : V{};
    V tail = make_prompt(3 + (i * 7) % 23, seed + 100 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  return prompts;
}

class BatchSizes : public ::testing::TestWithParam<int> {};

TEST_P(BatchSizes, GreedyOutputsMatchSingleSequenceDecoding) {
  const int max_batch = GetParam();
  auto prompts = test_prompts(9, 11);
  auto want = reference_outputs("qwen3", prompts, 12);
  auto b = ref_backend("qwen3", 256);
  Scheduler s(b->kv_spec(), {max_batch, 7}, true, 1);
  std::vector<V> got;
  run_greedy(s, *b, prompts, 12, max_batch, &got);
  EXPECT_EQ(got, want);
  EXPECT_EQ(s.kv().num_blocks_used(), 0);
  EXPECT_GT(s.stats().prefix_hit_tokens, 0u);
}

INSTANTIATE_TEST_SUITE_P(OneToEight, BatchSizes, ::testing::Range(1, 9));

struct PreemptCase {
  std::string family;
  int blocks;
  int max_batch;
  int chunk;
  bool prefix_caching;
};

class Preemption : public ::testing::TestWithParam<PreemptCase> {};

TEST_P(Preemption, OutputsIdenticalToAnUnpreemptedRun) {
  const PreemptCase& c = GetParam();
  auto prompts = test_prompts(7, 5);
  const int max_tokens = 20;
  auto want = reference_outputs(c.family, prompts, max_tokens);
  auto b = ref_backend(c.family, c.blocks);
  Scheduler s(b->kv_spec(), {c.max_batch, c.chunk}, c.prefix_caching, 1);
  std::vector<V> got;
  run_greedy(s, *b, prompts, max_tokens, c.max_batch, &got);
  EXPECT_EQ(got, want);
  EXPECT_GT(s.stats().preemptions, 0u);
  EXPECT_EQ(s.kv().num_blocks_used(), 0);
  std::printf("%s blocks=%d batch=%d: %llu preemptions\n", c.family.c_str(), c.blocks, c.max_batch,
              static_cast<unsigned long long>(s.stats().preemptions));
}

INSTANTIATE_TEST_SUITE_P(TinyKv, Preemption,
                         ::testing::Values(PreemptCase{"qwen3", 14, 4, 8, true}, PreemptCase{"qwen3", 14, 8, 5, false},
                                           PreemptCase{"cohere2_moe", 14, 4, 8, true},
                                           PreemptCase{"cohere2_moe", 16, 8, 3, true}));

}  // namespace
}  // namespace ms
