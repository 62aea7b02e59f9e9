// The fp32 CPU reference backend against Hugging Face transformers: logits at
// every prompt position and 32 greedy decode steps, for every family, on
// prompts longer than the sliding window (fixtures: tools/make_hf_fixtures.py).
// Tolerance: relative L2 error per logits row < 1e-4 (both sides fp32 from the
// same bf16 weights; measured errors are ~1e-6).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "model/model_loader.h"
#include "ref/ref_backend.h"

namespace ms {
namespace {

constexpr double kTol = 1e-4;

std::string fixture_dir(const std::string& family) {
  return std::string(MEGASERVE_SOURCE_DIR) + "/tests/fixtures/hf/" + family;
}

nlohmann::json load_golden(const std::string& family) {
  std::ifstream in(fixture_dir(family) + "/golden.json");
  return nlohmann::json::parse(in);
}

double rel_err(const std::vector<float>& got, const nlohmann::json& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double w = want[i].get<double>();
    num += (got[i] - w) * (got[i] - w);
    den += w * w;
  }
  return std::sqrt(num / den);
}

struct Case {
  std::string family;
  int block_size;
  int prefill_chunk;
};

// Loads a fixture family and a reference backend with the case's block size.
void open_fixture(const Case& c, std::unique_ptr<LoadedModel>* model, std::unique_ptr<RefBackend>* backend) {
  auto m = load_model(fixture_dir(c.family));
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  RefBackendOptions opt;
  opt.block_size = c.block_size;
  opt.kv_bytes = 4 << 20;
  opt.threads = 2;
  auto b = RefBackend::create((*m)->config, (*m)->weights, opt);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  *model = std::move(*m);
  *backend = std::move(*b);
}

class HfGolden : public ::testing::TestWithParam<Case> {};

TEST_P(HfGolden, GreedyDecodeMatchesTransformers) {
  const Case& c = GetParam();
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<RefBackend> backend;
  ASSERT_NO_FATAL_FAILURE(open_fixture(c, &model, &backend));
  nlohmann::json g = load_golden(c.family);
  std::vector<int32_t> prompt = g["prompt"].get<std::vector<int32_t>>();
  ASSERT_GT(static_cast<int>(prompt.size()), model->config.sliding_window);
  GenerateOptions go;
  go.max_new_tokens = static_cast<int>(g["greedy"].size());
  go.prefill_chunk = c.prefill_chunk;
  go.stop_at_eos = false;
  double worst = 0;
  go.on_logits = [&](int step, const std::vector<float>& logits) {
    double e = rel_err(logits, g["step_logits"][step]);
    worst = std::max(worst, e);
    EXPECT_LT(e, kTol) << "step " << step;
  };
  auto out = generate_greedy(*backend, prompt, go);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out, g["greedy"].get<std::vector<int32_t>>());
  RecordProperty("worst_rel_err", std::to_string(worst));
  std::printf("%s: worst decode-step rel err %.2e\n", c.family.c_str(), worst);
}

class HfPromptLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(HfPromptLogits, EveryPosition) {
  const Case c{GetParam(), 8, 1};
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<RefBackend> backend;
  ASSERT_NO_FATAL_FAILURE(open_fixture(c, &model, &backend));
  nlohmann::json g = load_golden(c.family);
  std::vector<int32_t> prompt = g["prompt"].get<std::vector<int32_t>>();
  // Token-by-token prefill: logits at each position.
  const KvSpec& kv = backend->kv_spec();
  SeqWork w;
  w.block_tables.assign(kv.groups.size(), {});
  for (size_t t = 0; t < prompt.size(); ++t) {
    w.tokens = {prompt[t]};
    w.start_pos = static_cast<int32_t>(t);
    for (auto& table : w.block_tables)
      while (table.size() * c.block_size < t + 1) table.push_back(static_cast<int32_t>(table.size()));
    StepResult r;
    ASSERT_TRUE(backend->step({w}, &r).is_ok());
    EXPECT_LT(rel_err(r.logits[0], g["prompt_logits"][t]), kTol) << "position " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, HfGolden,
    ::testing::Values(Case{"cohere2_moe", 8, 0}, Case{"cohere2_moe", 4, 5}, Case{"cohere2_moe_shared", 8, 0},
                      Case{"cohere2_moe_shared", 3, 7}, Case{"qwen3_moe", 8, 0}, Case{"qwen3_moe", 5, 4},
                      Case{"qwen3", 8, 0}, Case{"qwen3", 4, 3}, Case{"llama", 8, 0}, Case{"llama", 16, 6}),
    [](const auto& info) {
      return info.param.family + "_bs" + std::to_string(info.param.block_size) + "_chunk" +
             std::to_string(info.param.prefill_chunk);
    });

INSTANTIATE_TEST_SUITE_P(Families, HfPromptLogits,
                         ::testing::Values("cohere2_moe", "cohere2_moe_shared", "qwen3_moe", "qwen3", "llama"));

}  // namespace
}  // namespace ms
