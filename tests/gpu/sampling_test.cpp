// The device sampler (gpu/ops/sampling.h) against the CPU sampler
// (sampling/sampler.h, the specification) on random logits rows of four
// vocabulary sizes, half of them rounded to bf16 so that ties are common, for
// every parameter family: greedy (identical tokens required), temperature,
// top-k, top-p, min-p, all together, penalties over prompt / output
// histories, logit_bias (alone and merged with penalties), logprobs 0..20 (within 1e-4). Sampled tokens must agree on
// >= 99% of (row, seed) draws; the count is printed. Then: the RNG bit for
// bit, seed determinism, and GpuBackend::step_sample against step() +
// sample_token on a fixture model; and the same with grammar allowed-token
// masks (dense, sparse, single token) on rows and through step_sample.
#include "gpu/ops/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>

#include "gpu/gpu_backend.h"
#include "gpu_test_util.h"
#include "model/model_loader.h"
#include "sampling/sampler.h"

namespace ms::gpu::test {
namespace {

constexpr double kLogprobTol = 1e-4;
constexpr double kMinAgreement = 0.99;

struct ParamCase {
  const char* name;
  SamplingParams p;
};

SamplingParams params(float temperature, int top_k = 0, float top_p = 1.f, float min_p = 0.f, int logprobs = -1) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.logprobs = logprobs;
  return p;
}

SamplingParams penalised(SamplingParams p, float rep, float freq, float pres) {
  p.repetition_penalty = rep;
  p.frequency_penalty = freq;
  p.presence_penalty = pres;
  return p;
}

// Biases on tokens below the smallest vocabulary tested (512): a ban, a
// large push that often wins, and small pushes either way.
SamplingParams biased(SamplingParams p) {
  p.logit_bias = {{3, -100.f}, {17, 2.5f}, {200, -1.5f}, {333, 6.f}, {511, 8.f}};
  return p;
}

std::vector<ParamCase> param_cases() {
  return {
      {"greedy", params(0.f)},
      {"greedy_penalties_lp5", penalised(params(0.f, 0, 1.f, 0.f, 5), 1.3f, 0.5f, 0.3f)},
      {"greedy_lp20", params(0.f, 0, 1.f, 0.f, 20)},
      {"temperature", params(0.8f)},
      {"top_k", params(1.f, 40)},
      {"top_k1", params(1.f, 1)},
      {"top_p", params(1.f, 0, 0.9f)},
      {"top_p_small", params(1.3f, 0, 0.3f)},
      {"min_p", params(1.f, 0, 1.f, 0.05f)},
      {"all", penalised(params(0.7f, 100, 0.8f, 0.02f, 20), 1.1f, 0.2f, 0.4f)},
      {"penalties", penalised(params(1.f), 1.5f, 1.f, -0.5f)},
      {"lp0", params(1.f, 0, 1.f, 0.f, 0)},
      {"lp20_top_p", params(1.2f, 0, 0.95f, 0.f, 20)},
      {"logit_bias_greedy", biased(params(0.f, 0, 1.f, 0.f, 3))},
      {"logit_bias_penalties", biased(penalised(params(0.9f, 0, 0.9f), 1.2f, 0.3f, 0.2f))},
  };
}

// Row r: N(0, 3^2) logits; odd rows rounded to bf16 (many exact ties).
std::vector<float> logits_row(int V, int r) {
  std::vector<float> v = randn(size_t(V), 1000 + r, 3.f);
  if (r % 2 == 1) to_bf16_rounding(v);
  return v;
}

// A history: prompt tokens anywhere, output tokens drawn mostly from the
// row's 64 largest logits (so penalties change the outcome), with repeats.
void history(const std::vector<float>& row, int seed, std::vector<int32_t>* prompt, std::vector<int32_t>* output) {
  const int V = static_cast<int>(row.size());
  std::mt19937 g(seed);
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  const int top = std::min(V, 64);
  std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), [&](int a, int b) { return row[a] > row[b]; });
  prompt->clear();
  output->clear();
  for (int i = 0; i < 40; ++i) prompt->push_back(i % 3 == 0 ? ids[g() % top] : static_cast<int32_t>(g() % V));
  const int n_out = 3 + seed % 17;
  for (int i = 0; i < n_out; ++i) output->push_back(i % 4 == 3 ? static_cast<int32_t>(g() % V) : ids[g() % 16]);
}

struct Draw {
  int row = 0;
  uint64_t seed = 0;
  std::vector<int32_t> prompt, output;
  std::vector<uint32_t> allowed;  // empty: unconstrained
};

// Runs the device sampler on `draws` (all with params p) over `rows`.
Status run_device(const std::vector<std::vector<float>>& rows, const SamplingParams& p, const std::vector<Draw>& draws,
                  std::vector<SampleResult>* got) {
  const int V = static_cast<int>(rows[0].size());
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  std::vector<SampleRowParams> packed(draws.size());
  std::vector<SamplePenalty> pens;
  std::vector<uint32_t> masks;
  for (size_t i = 0; i < draws.size(); ++i) {
    pack_sample_row(p, draws[i].prompt, draws[i].output, draws[i].seed, draws[i].row, V, &packed[i], &pens);
    if (!draws[i].allowed.empty()) {
      packed[i].mask_row = static_cast<int32_t>(masks.size() / sample_mask_words(V));
      masks.insert(masks.end(), draws[i].allowed.begin(), draws[i].allowed.end());
    }
  }
  if (pens.empty()) pens.push_back({});
  if (masks.empty()) masks.push_back(0);
  DeviceBuffer<float> d_logits, d_scratch;
  DeviceBuffer<SampleRowParams> d_rows;
  DeviceBuffer<SamplePenalty> d_pens;
  DeviceBuffer<SampleRowOut> d_out;
  DeviceBuffer<uint32_t> d_masks;
  MS_RETURN_IF_ERROR(d_masks.upload(masks));
  MS_RETURN_IF_ERROR(d_logits.upload(flat));
  MS_RETURN_IF_ERROR(d_rows.upload(packed));
  MS_RETURN_IF_ERROR(d_pens.upload(pens));
  MS_RETURN_IF_ERROR(d_scratch.alloc(draws.size() * size_t(V)));
  MS_RETURN_IF_ERROR(d_out.alloc(draws.size()));
  MS_RETURN_IF_ERROR(launch_sample(d_logits.get(), V, d_rows.get(), static_cast<int>(draws.size()), d_pens.get(),
                                   d_masks.get(), d_scratch.get(), d_out.get(), nullptr));
  MS_CUDA_RETURN(cudaDeviceSynchronize());
  std::vector<SampleRowOut> out;
  MS_RETURN_IF_ERROR(d_out.download(&out));
  got->clear();
  for (const auto& o : out) got->push_back(to_sample_result(o, p.logprobs));
  return Status::ok();
}

class DeviceSampler : public ::testing::TestWithParam<int> {};

TEST_P(DeviceSampler, MatchesCpuSampler) {
  MS_GPU_TEST_GUARD();
  const int V = GetParam();
  const int kRows = 4, kSeeds = V > 200000 ? 6 : 10;
  std::vector<std::vector<float>> rows;
  std::vector<std::vector<float>> raw_lp;
  for (int r = 0; r < kRows; ++r) {
    rows.push_back(logits_row(V, r));
    raw_lp.push_back(log_softmax(rows.back()));
  }
  int sampled = 0, sampled_same = 0;
  for (const ParamCase& c : param_cases()) {
    const SamplingParams& p = c.p;
    std::vector<Draw> draws;
    for (int r = 0; r < kRows; ++r)
      for (int s = 0; s < kSeeds; ++s) {
        Draw d;
        d.row = r;
        d.seed = 0x1234567ull * (s + 1) + r;
        history(rows[r], s * 7 + r, &d.prompt, &d.output);
        draws.push_back(std::move(d));
      }
    std::vector<SampleResult> got;
    ASSERT_OK(run_device(rows, p, draws, &got));
    int same = 0;
    for (size_t i = 0; i < draws.size(); ++i) {
      const Draw& d = draws[i];
      SamplerContext ctx{d.prompt, d.output, d.seed, {}};
      const SampleResult want = sample_token(rows[d.row], p, ctx);
      if (p.greedy()) {
        EXPECT_EQ(got[i].token, want.token) << c.name << " V=" << V << " draw " << i;
      }
      same += got[i].token == want.token;
      ASSERT_GE(got[i].token, 0);
      ASSERT_LT(got[i].token, V);
      if (p.logprobs >= 0) {
        const auto& lp = raw_lp[d.row];
        EXPECT_NEAR(got[i].logprob, lp[got[i].token], kLogprobTol) << c.name << " draw " << i;
        ASSERT_EQ(got[i].top.size(), want.top.size()) << c.name << " draw " << i;
        for (size_t k = 0; k < want.top.size(); ++k) {
          EXPECT_NEAR(got[i].top[k].logprob, want.top[k].logprob, kLogprobTol) << c.name << " top " << k;
          EXPECT_NEAR(got[i].top[k].logprob, lp[got[i].top[k].token], kLogprobTol) << c.name << " top " << k;
          if (k > 0) {  // sorted: logprob desc, then id asc
            const auto& a = got[i].top[k - 1];
            const auto& b = got[i].top[k];
            EXPECT_TRUE(a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token)) << c.name;
          }
        }
        // Identical ids where the CPU's neighbours are not tied.
        for (size_t k = 0; k < want.top.size(); ++k) {
          const bool tied = (k > 0 && want.top[k - 1].logprob == want.top[k].logprob) ||
                            (k + 1 < want.top.size() && want.top[k + 1].logprob == want.top[k].logprob);
          if (!tied) {
            EXPECT_EQ(got[i].top[k].token, want.top[k].token) << c.name << " top " << k;
          }
        }
      }
    }
    std::printf("[ sampler ] V=%d %-22s tokens identical %d / %zu\n", V, c.name, same, draws.size());
    if (!p.greedy()) {
      sampled += static_cast<int>(draws.size());
      sampled_same += same;
    }
  }
  std::printf("[ sampler ] V=%d sampled draws identical: %d / %d (%.2f%%)\n", V, sampled_same, sampled,
              100.0 * sampled_same / std::max(sampled, 1));
  RecordProperty("sampled_identical", sampled_same);
  RecordProperty("sampled_total", sampled);
  EXPECT_GE(sampled_same, kMinAgreement * sampled);
}

INSTANTIATE_TEST_SUITE_P(Vocab, DeviceSampler, ::testing::Values(512, 4096 + 13, 151936, 262144));

// Grammar masks (sampler.h step 0) on the device against the CPU sampler:
// dense (half the vocabulary), sparse (a few dozen tokens, as inside JSON
// structure) and single-token masks, over every parameter family; tokens must
// always be allowed, greedy identical, logprobs those of the masked row.
std::vector<uint32_t> random_mask(int V, int kind, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint32_t> m(sample_mask_words(V), 0u);
  auto set = [&](int t) { m[t >> 5] |= 1u << (t & 31); };
  if (kind == 0) {
    for (int t = 0; t < V; ++t)
      if (g() % 2) set(t);
  } else if (kind == 1) {
    for (int i = 0; i < 40; ++i) set(static_cast<int>(g() % V));
  } else {
    set(static_cast<int>(g() % V));
  }
  return m;
}

class DeviceSamplerMasked : public ::testing::TestWithParam<int> {};

TEST_P(DeviceSamplerMasked, MatchesCpuSampler) {
  MS_GPU_TEST_GUARD();
  const int V = GetParam();
  const int kRows = 3, kSeeds = 6;
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < kRows; ++r) rows.push_back(logits_row(V, r));
  int sampled = 0, sampled_same = 0;
  for (const ParamCase& c : param_cases()) {
    std::vector<Draw> draws;
    for (int r = 0; r < kRows; ++r)
      for (int s = 0; s < kSeeds; ++s) {
        Draw d;
        d.row = r;
        d.seed = 0x9e37ull * (s + 1) + r;
        history(rows[r], s * 5 + r, &d.prompt, &d.output);
        d.allowed = random_mask(V, s % 3, 100 * r + s);
        draws.push_back(std::move(d));
      }
    std::vector<SampleResult> got;
    ASSERT_OK(run_device(rows, c.p, draws, &got));
    int same = 0;
    for (size_t i = 0; i < draws.size(); ++i) {
      const Draw& d = draws[i];
      SamplerContext ctx{d.prompt, d.output, d.seed, d.allowed};
      const SampleResult want = sample_token(rows[d.row], c.p, ctx);
      const int32_t t = got[i].token;
      ASSERT_TRUE(t >= 0 && t < V && ((d.allowed[t >> 5] >> (t & 31)) & 1u)) << c.name << " token " << t;
      if (c.p.greedy()) {
        EXPECT_EQ(t, want.token) << c.name << " draw " << i;
      }
      same += t == want.token;
      if (c.p.logprobs >= 0 && t == want.token) {
        EXPECT_NEAR(got[i].logprob, want.logprob, kLogprobTol) << c.name;
      }
      if (c.p.logprobs >= 0) {
        ASSERT_EQ(got[i].top.size(), want.top.size()) << c.name;
        for (size_t k = 0; k < want.top.size(); ++k) {
          if (std::isinf(want.top[k].logprob)) {  // fewer allowed tokens than asked for: the rest at -inf
            EXPECT_TRUE(std::isinf(got[i].top[k].logprob)) << c.name << " top " << k;
            continue;
          }
          EXPECT_NEAR(got[i].top[k].logprob, want.top[k].logprob, kLogprobTol) << c.name << " top " << k;
        }
      }
    }
    if (!c.p.greedy()) {
      sampled += static_cast<int>(draws.size());
      sampled_same += same;
    }
  }
  std::printf("[ sampler ] masked V=%d sampled draws identical: %d / %d\n", V, sampled_same, sampled);
  EXPECT_GE(sampled_same, kMinAgreement * sampled);
}

INSTANTIATE_TEST_SUITE_P(Vocab, DeviceSamplerMasked, ::testing::Values(512, 4096 + 13, 151936, 262144));

TEST(DeviceSamplerRng, BitIdenticalToSamplerUniform) {
  MS_GPU_TEST_GUARD();
  std::vector<uint64_t> seeds, idx;
  std::mt19937_64 g(7);
  for (int i = 0; i < 4096; ++i) {
    seeds.push_back(i < 4 ? (i == 0 ? 0 : ~0ull - i) : g());
    idx.push_back(i < 8 ? static_cast<uint64_t>(i) : g() % 100000);
  }
  auto ds = dev(seeds), di = dev(idx);
  DeviceBuffer<double> out;
  ASSERT_OK(out.alloc(seeds.size()));
  ASSERT_OK(launch_sampler_uniform(ds.get(), di.get(), static_cast<int>(seeds.size()), out.get(), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<double> got = host(out);
  for (size_t i = 0; i < seeds.size(); ++i) ASSERT_EQ(got[i], sampler_uniform(seeds[i], idx[i])) << i;
}

TEST(DeviceSamplerRng, SeedDeterminism) {
  MS_GPU_TEST_GUARD();
  const int V = 4096 + 13;
  std::vector<std::vector<float>> rows = {logits_row(V, 0)};
  const SamplingParams p = params(1.5f, 0, 0.98f);
  std::vector<Draw> draws;
  for (int s = 0; s < 64; ++s) {
    Draw d;
    d.seed = s % 8;  // eight seeds, each drawn at eight indices
    d.output.assign(s / 8, 1);
    draws.push_back(d);
  }
  std::vector<SampleResult> a, b;
  ASSERT_OK(run_device(rows, p, draws, &a));
  ASSERT_OK(run_device(rows, p, draws, &b));
  std::set<int32_t> distinct;
  for (size_t i = 0; i < draws.size(); ++i) {
    EXPECT_EQ(a[i].token, b[i].token) << i;
    distinct.insert(a[i].token);
  }
  EXPECT_GT(distinct.size(), 8u) << "different (seed, index) should give different draws";
}

// The qwen3 fixture model on the GPU backend (8-token blocks, 4 MB of KV).
struct Fixture {
  std::unique_ptr<LoadedModel> model;
  GpuBackendOptions opt;
  std::unique_ptr<GpuBackend> backend;
  void load() {
    auto m = load_model(std::string(MEGASERVE_SOURCE_DIR) + "/tests/fixtures/hf/qwen3");
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    model = std::move(m).value();
    opt.block_size = 8;
    opt.kv_bytes = 4 << 20;
    opt.max_context = 1024;
    auto gpu = GpuBackend::create(model->config, model->weights, opt);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    backend = std::move(gpu).value();
  }
};

// GpuBackend::step_sample against step() + sample_token on the same
// batch (a step rewrites the same KV slots with the same values, so running
// both on one backend is exact): a prefill of two sequences (eager), then
// decode steps (the graph), with greedy and sampled sequences.
TEST(DeviceSamplerBackend, StepSampleMatchesStepPlusCpuSampler) {
  MS_GPU_TEST_GUARD();
  Fixture fx;
  ASSERT_NO_FATAL_FAILURE(fx.load());
  GpuBackend& b = *fx.backend;
  const GpuBackendOptions& opt = fx.opt;
  ASSERT_TRUE(b.supports_sampling());
  const int V = b.config().vocab_size, G = static_cast<int>(b.kv_spec().groups.size());
  std::vector<SampleSpec> specs(3);
  specs[0].params = params(0.f, 0, 1.f, 0.f, 3);
  specs[1].params = penalised(params(0.9f, 20, 0.9f, 0.01f, 2), 1.2f, 0.3f, 0.1f);
  specs[2].params = params(1.0f);
  std::vector<std::vector<int32_t>> prompts(3), outputs(3);
  for (int s = 0; s < 3; ++s) {
    std::mt19937 g(s);
    for (int i = 0; i < 11 + 5 * s; ++i) prompts[s].push_back(static_cast<int32_t>(4 + g() % (V - 4)));
    specs[s].seed = 77 + s;
  }
  std::vector<SeqWork> batch(3);
  auto tables = [&](int s, int len) {
    batch[s].block_tables.assign(G, {});
    for (int g = 0; g < G; ++g)
      for (int blk = 0; blk * opt.block_size < len; ++blk) batch[s].block_tables[g].push_back(s * 8 + blk);
  };
  int agree = 0, total = 0;
  for (int step = 0; step < 8; ++step) {
    for (int s = 0; s < 3; ++s) {
      const int len = static_cast<int>(prompts[s].size() + outputs[s].size());
      batch[s].seq_id = s;
      if (step == 0) {
        batch[s].tokens = prompts[s];
        batch[s].start_pos = 0;
      } else {
        batch[s].tokens = {outputs[s].back()};
        batch[s].start_pos = len - 1;
      }
      tables(s, len);
      specs[s].prompt = prompts[s];
      specs[s].output = outputs[s];
    }
    StepResult ref;
    ASSERT_OK(b.step(batch, &ref));
    std::vector<const SampleSpec*> sp = {&specs[0], &specs[1], &specs[2]};
    std::vector<SampleResult> got;
    ASSERT_OK(b.step_sample(batch, sp, &got));
    ASSERT_EQ(got.size(), batch.size());
    for (int s = 0; s < 3; ++s) {
      SamplerContext ctx{specs[s].prompt, specs[s].output, specs[s].seed, {}};
      const SampleResult want = sample_token(ref.logits[s], specs[s].params, ctx);
      if (specs[s].params.greedy()) {
        EXPECT_EQ(got[s].token, want.token) << "step " << step;
      }
      agree += got[s].token == want.token;
      ++total;
      if (specs[s].params.logprobs >= 0) {
        EXPECT_NEAR(got[s].logprob, want.token == got[s].token ? want.logprob : got[s].logprob, kLogprobTol);
        ASSERT_EQ(got[s].top.size(), want.top.size());
        for (size_t k = 0; k < want.top.size(); ++k)
          EXPECT_NEAR(got[s].top[k].logprob, want.top[k].logprob, kLogprobTol);
      }
      outputs[s].push_back(want.token);  // continue on the CPU's choice
    }
  }
  std::printf("[ sampler ] step_sample vs step + sample_token: %d / %d tokens identical\n", agree, total);
  EXPECT_GE(agree, total - 1);
}

// step_sample with allowed-token masks on two of three rows (SampleSpec::allowed
// -> the uploaded per-row masks) against step() + sample_token with the same masks.
TEST(DeviceSamplerBackend, StepSampleAppliesGrammarMasks) {
  MS_GPU_TEST_GUARD();
  Fixture fx;
  ASSERT_NO_FATAL_FAILURE(fx.load());
  GpuBackend& b = *fx.backend;
  const GpuBackendOptions& opt = fx.opt;
  const int V = b.config().vocab_size, G = static_cast<int>(b.kv_spec().groups.size());
  std::vector<SampleSpec> specs(3);
  specs[0].params = params(0.f, 0, 1.f, 0.f, 2);
  specs[1].params = params(1.0f, 0, 0.9f);
  specs[2].params = params(0.8f);
  std::vector<std::vector<uint32_t>> masks = {random_mask(V, 1, 5), {}, random_mask(V, 0, 6)};
  std::vector<std::vector<int32_t>> prompts(3), outputs(3);
  std::vector<SeqWork> batch(3);
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 9 + 4 * s; ++i) prompts[s].push_back(static_cast<int32_t>(4 + (i * 37 + s) % (V - 4)));
    specs[s].seed = 5 + s;
    specs[s].allowed = masks[s];
  }
  int agree = 0, total = 0;
  for (int step = 0; step < 6; ++step) {
    for (int s = 0; s < 3; ++s) {
      const int len = static_cast<int>(prompts[s].size() + outputs[s].size());
      batch[s].seq_id = s;
      batch[s].tokens = step == 0 ? prompts[s] : std::vector<int32_t>{outputs[s].back()};
      batch[s].start_pos = step == 0 ? 0 : len - 1;
      batch[s].block_tables.assign(G, {});
      for (int g = 0; g < G; ++g)
        for (int blk = 0; blk * opt.block_size < len; ++blk) batch[s].block_tables[g].push_back(s * 8 + blk);
      specs[s].prompt = prompts[s];
      specs[s].output = outputs[s];
    }
    StepResult ref;
    ASSERT_OK(b.step(batch, &ref));
    std::vector<SampleResult> got;
    ASSERT_OK(b.step_sample(batch, {&specs[0], &specs[1], &specs[2]}, &got));
    for (int s = 0; s < 3; ++s) {
      SamplerContext ctx{specs[s].prompt, specs[s].output, specs[s].seed, specs[s].allowed};
      const SampleResult want = sample_token(ref.logits[s], specs[s].params, ctx);
      const int32_t t = got[s].token;
      if (!masks[s].empty()) {
        EXPECT_TRUE((masks[s][t >> 5] >> (t & 31)) & 1u) << "row " << s << " token " << t;
      }
      if (specs[s].params.greedy()) {
        EXPECT_EQ(t, want.token) << "step " << step;
      }
      agree += t == want.token;
      ++total;
      outputs[s].push_back(want.token);
    }
  }
  std::printf("[ sampler ] masked step_sample vs step + sample_token: %d / %d tokens identical\n", agree, total);
  EXPECT_GE(agree, total - 1);
}

}  // namespace
}  // namespace ms::gpu::test
