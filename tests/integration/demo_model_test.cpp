// The shipped demo model (models/north-mini-demo, trained with HF's
// Cohere2MoeForCausalLM by tools/demo_model/train.py) through megaserve's own
// stack: chat template rendering, tokenizer and the fp32 reference backend
// reproduce HF's prompt text, prompt ids and greedy continuation exactly.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "engine/generate.h"
#include "model/model_loader.h"
#include "ref/ref_backend.h"
#include "tokenizer/tokenizer.h"

namespace ms {
namespace {

const std::string kDir = std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo";

class DemoModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model(kDir);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    model_ = std::move(*m).release();
    auto t = Tokenizer::load(kDir);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    tok_ = new Tokenizer(std::move(*t));
    std::ifstream in(kDir + "/golden.json");
    golden_ = new nlohmann::ordered_json(nlohmann::ordered_json::parse(in));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tok_;
    delete golden_;
  }
  static LoadedModel* model_;
  static Tokenizer* tok_;
  static nlohmann::ordered_json* golden_;
};

LoadedModel* DemoModel::model_ = nullptr;
Tokenizer* DemoModel::tok_ = nullptr;
nlohmann::ordered_json* DemoModel::golden_ = nullptr;

TEST_F(DemoModel, IsNorthArchitecture) {
  const ModelConfig& c = model_->config;
  EXPECT_EQ(c.arch, Arch::kCohere2Moe);
  EXPECT_TRUE(c.parallel_block);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.router, RouterFn::kSigmoid);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_GE(c.n_experts, 16);
  EXPECT_GE(c.top_k, 2);
  EXPECT_FALSE(c.layers[0].moe);
  for (int i = 0; i < c.n_layers; ++i) EXPECT_EQ(c.layers[i].sliding, i % 4 != 0) << i;
  EXPECT_EQ(tok_->vocab_size(), c.vocab_size);
}

TEST_F(DemoModel, TemplateTokenizerAndGreedyMatchTransformers) {
  auto tmpl = ChatTemplate::create(tok_->chat_template());
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  RefBackendOptions opt;
  opt.block_size = 16;
  opt.kv_bytes = 64 << 20;
  opt.threads = 2;
  auto backend = RefBackend::create(model_->config, model_->weights, opt);
  ASSERT_TRUE(backend.is_ok());
  for (const auto& p : (*golden_)["prompts"]) {
    SCOPED_TRACE(p["name"].get<std::string>());
    nlohmann::ordered_json ctx = {{"messages", p["messages"]},
                                  {"add_generation_prompt", true},
                                  {"bos_token", tok_->bos_token()},
                                  {"eos_token", tok_->eos_token()}};
    if (!p["tools"].is_null()) ctx["tools"] = p["tools"];
    auto text = tmpl->render(ctx);
    ASSERT_TRUE(text.is_ok()) << text.status().to_string();
    EXPECT_EQ(*text, p["prompt_text"].get<std::string>());
    std::vector<int32_t> ids = tok_->encode(*text, /*add_special_tokens=*/false);
    ASSERT_EQ(ids, p["prompt_ids"].get<std::vector<int32_t>>());
    GenerateOptions go;
    go.max_new_tokens = 64;
    auto out = generate_greedy(**backend, ids, go);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ(*out, p["greedy"].get<std::vector<int32_t>>());
    EXPECT_EQ(tok_->decode(*out, /*skip_special=*/false), p["text"].get<std::string>());
  }
}

}  // namespace
}  // namespace ms
