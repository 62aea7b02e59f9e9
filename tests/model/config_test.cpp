// ModelConfig parsing: every family, the fields that change the math, and
// settings the engine does not implement (errors that name them).
#include <gtest/gtest.h>

#include "model/config.h"

namespace ms {
namespace {

using nlohmann::json;

json nmc_tiny_json() { return preset_config(Arch::kCohere2Moe, "tiny")->to_json(); }

TEST(Config, NorthMiniCodeFullShape) {
  auto c = preset_config(Arch::kCohere2Moe, "full");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->n_layers, 49);
  EXPECT_EQ(c->q_width(), 4096);
  EXPECT_TRUE(c->parallel_block);
  EXPECT_EQ(c->rope_style, RopeStyle::kInterleaved);
  int full = 0, nope = 0;
  for (int i = 0; i < 49; ++i) {
    const LayerSpec& l = c->layers[i];
    EXPECT_EQ(l.sliding, i % 4 != 0) << i;
    EXPECT_EQ(l.moe, i != 0) << i;
    EXPECT_EQ(l.rope, l.sliding || i == 0) << i;
    full += !l.sliding;
    nope += !l.rope;
  }
  EXPECT_EQ(full, 13);
  EXPECT_EQ(nope, 12);
  // MISSION.md: 30.5B parameters, 3.3B active (6.61 GB bf16 read per token).
  EXPECT_NEAR(c->param_count() / 1e9, 30.5, 0.1);
  EXPECT_NEAR(c->active_param_count() * 2 / 1e9, 6.61, 0.05);
}

TEST(Config, RoundTripsThroughJsonForEveryFamily) {
  for (Arch a : {Arch::kCohere2Moe, Arch::kQwen3Moe, Arch::kQwen3, Arch::kLlama}) {
    for (const char* size : {"tiny", "full"}) {
      auto c = preset_config(a, size);
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      auto back = ModelConfig::from_json(c->to_json());
      ASSERT_TRUE(back.is_ok()) << arch_name(a) << ": " << back.status().to_string();
      EXPECT_EQ(back->param_count(), c->param_count());
      EXPECT_EQ(back->rope_scaling.kind, c->rope_scaling.kind);
      for (int i = 0; i < c->n_layers; ++i) {
        EXPECT_EQ(back->layers[i].sliding, c->layers[i].sliding);
        EXPECT_EQ(back->layers[i].rope, c->layers[i].rope);
        EXPECT_EQ(back->layers[i].moe, c->layers[i].moe);
      }
    }
  }
}

TEST(Config, CohereDerivesLayerTypesFromPatterns) {
  json j = nmc_tiny_json();
  j.erase("layer_types");
  j.erase("mlp_layer_types");
  j["num_hidden_layers"] = 9;
  j["first_k_dense_replace"] = 1;
  auto c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  for (int i = 0; i < 9; ++i) EXPECT_EQ(c->layers[i].sliding, i % 4 != 0) << i;
  // Dense prefix with pattern 2 -> prefix layer is sliding ((0+1) % 2 != 0), RoPE on.
  j["prefix_dense_sliding_window_pattern"] = 2;
  c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.is_ok());
  EXPECT_TRUE(c->layers[0].sliding);
  EXPECT_TRUE(c->layers[0].rope);
}

TEST(Config, CohereLayerNormWhenNoRmsEps) {
  json j = nmc_tiny_json();
  j.erase("rms_norm_eps");
  j["layer_norm_eps"] = 1e-5;
  auto c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->norm, NormKind::kLayer);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-5f);
}

TEST(Config, RopeParametersV5AndLegacy) {
  json j = nmc_tiny_json();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1234.0}};
  auto c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.is_ok());
  EXPECT_DOUBLE_EQ(c->rope_theta, 1234.0);
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1234.0}, {"factor", 4.0}};
  c = ModelConfig::from_json(j, "x/config.json");
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("yarn"), std::string::npos);
  EXPECT_NE(c.status().message().find("x/config.json"), std::string::npos);
}

struct BadCase {
  const char* what;
  std::function<void(json&)> edit;
  const char* must_mention;
};

TEST(Config, RejectsWhatItDoesNotImplementByName) {
  std::vector<BadCase> cases = {
      {"unknown arch", [](json& j) { j["model_type"] = "mixtral"; }, "mixtral"},
      {"activation", [](json& j) { j["hidden_act"] = "gelu"; }, "gelu"},
      {"router fn", [](json& j) { j["expert_selection_fn"] = "sparsemax"; }, "sparsemax"},
      {"attention bias", [](json& j) { j["attention_bias"] = true; }, "attention_bias"},
      {"layer type", [](json& j) { j["layer_types"][1] = "chunked_attention"; }, "chunked_attention"},
      {"quantized", [](json& j) { j["quantization_config"] = {{"quant_method", "fp8"}}; }, "quantization_config"},
      {"shared strategy", [](json& j) { j["shared_expert_combination_strategy"] = "max"; }, "max"},
      {"missing hidden", [](json& j) { j.erase("hidden_size"); }, "hidden_size"},
      {"string hidden", [](json& j) { j["hidden_size"] = "64"; }, "hidden_size"},
      {"bad gqa", [](json& j) { j["num_key_value_heads"] = 3; }, "num_key_value_heads"},
      {"top_k > experts", [](json& j) { j["num_experts_per_tok"] = 99; }, "num_experts_per_tok"},
      {"layer_types length", [](json& j) { j["layer_types"].erase(0); }, "layer_types"},
  };
  for (const auto& c : cases) {
    json j = nmc_tiny_json();
    c.edit(j);
    auto r = ModelConfig::from_json(j, "m/config.json");
    ASSERT_FALSE(r.is_ok()) << c.what;
    EXPECT_NE(r.status().message().find(c.must_mention), std::string::npos)
        << c.what << ": " << r.status().message();
  }
}

TEST(Config, Qwen3MoeDenseLayersAndRouter) {
  json j = preset_config(Arch::kQwen3Moe, "tiny")->to_json();
  j["mlp_only_layers"] = {1};
  j["norm_topk_prob"] = false;
  j.erase("num_experts");
  j["num_local_experts"] = 8;
  auto c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_FALSE(c->layers[1].moe);
  EXPECT_TRUE(c->layers[0].moe);
  EXPECT_FALSE(c->softmax_over_topk);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->parallel_block);
}

TEST(Config, LlamaRopeScaling) {
  auto c = preset_config(Arch::kLlama, "full");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 32.0);
  json j = c->to_json();
  j["mlp_bias"] = true;
  EXPECT_FALSE(ModelConfig::from_json(j).is_ok());
}

}  // namespace
}  // namespace ms
