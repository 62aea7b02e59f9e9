// Sampling defaults for fields a request leaves out: generation_config.json
// (--generation-config auto), --override-generation-config on top, and the
// request's own fields winning in every endpoint's parser.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/generation_defaults.h"
#include "server/openai_protocol.h"
#include "server/responses_api.h"
#include "server/serve_command.h"

namespace ms::server {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("ms-gencfg-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
};

TEST(GenerationDefaults, ReadsTheSamplingKeysOfGenerationConfig) {
  TempDir d;
  // Qwen3's file, with HF's other keys (ignored).
  d.write("generation_config.json", R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
    "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})");
  auto g = load_generation_defaults(d.path.string(), "auto", "");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_FLOAT_EQ(*g->temperature, 0.6f);
  EXPECT_EQ(*g->top_k, 20);
  EXPECT_FLOAT_EQ(*g->top_p, 0.95f);
  EXPECT_FALSE(g->min_p);
  EXPECT_FALSE(g->repetition_penalty);
  EXPECT_EQ(g->describe(), "temperature=0.6, top_p=0.95, top_k=20");
  // none ignores the file; the override applies on top of either.
  auto none = load_generation_defaults(d.path.string(), "none", "");
  ASSERT_TRUE(none.is_ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(none->describe(), "none");
  auto over = load_generation_defaults(d.path.string(), "auto", R"({"temperature": 0, "min_p": 0.05})");
  ASSERT_TRUE(over.is_ok()) << over.status().message();
  EXPECT_FLOAT_EQ(*over->temperature, 0.0f);
  EXPECT_FLOAT_EQ(*over->min_p, 0.05f);
  EXPECT_EQ(*over->top_k, 20) << "the file's other keys stay";
}

TEST(GenerationDefaults, NoFileMeansNoDefaults) {
  TempDir d;
  auto g = load_generation_defaults(d.path.string(), "auto", "");
  ASSERT_TRUE(g.is_ok());
  EXPECT_TRUE(g->empty());
  // The demo model's file carries token ids only.
  auto demo = load_generation_defaults(std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo", "auto", "");
  ASSERT_TRUE(demo.is_ok()) << demo.status().message();
  EXPECT_TRUE(demo->empty());
}

TEST(GenerationDefaults, BadValuesNameTheSourceAndKey) {
  TempDir d;
  d.write("generation_config.json", R"({"temperature": "hot"})");
  auto g = load_generation_defaults(d.path.string(), "auto", "");
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("generation_config.json"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("'temperature'"), std::string::npos) << g.status().message();
  d.write("generation_config.json", "{not json");
  g = load_generation_defaults(d.path.string(), "auto", "");
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("not valid JSON"), std::string::npos) << g.status().message();
  for (const auto& [json, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"temperature": 3})", "'temperature'"},
           {R"({"temperature": -0.1})", "'temperature'"},
           {R"({"top_p": 0})", "'top_p'"},
           {R"({"top_k": 1.5})", "'top_k'"},
           {R"({"top_k": -2})", "'top_k'"},
           {R"({"min_p": 2})", "'min_p'"},
           {R"({"repetition_penalty": 0})", "'repetition_penalty'"},
           {R"([1, 2])", "not a JSON object"},
           {R"({"temperature": )", "not valid JSON"}}) {
    auto o = load_generation_defaults("", "none", json);
    ASSERT_FALSE(o.is_ok()) << json;
    EXPECT_NE(o.status().message().find("--override-generation-config"), std::string::npos) << o.status().message();
    EXPECT_NE(o.status().message().find(key), std::string::npos) << o.status().message();
  }
  EXPECT_FALSE(load_generation_defaults("", "model", "").is_ok());
}

TEST(GenerationDefaults, TheRequestsOwnFieldsWinInEveryEndpoint) {
  ProtocolLimits limits;
  limits.vocab_size = 1000;
  limits.sampling_defaults.temperature = 0.0f;
  limits.sampling_defaults.top_k = 20;
  const Json messages = Json::array({{{"role", "user"}, {"content", "hi"}}});
  {
    GenRequest r;
    ASSERT_TRUE(parse_chat_request(Json{{"messages", messages}}, limits, &r).ok());
    EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
    EXPECT_EQ(r.sampling.top_k, 20);
    EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f) << "no default: OpenAI's";
  }
  {
    GenRequest r;  // an explicit value equal to OpenAI's default still wins; null is absent
    ASSERT_TRUE(parse_chat_request(Json{{"messages", messages}, {"temperature", 1}, {"top_k", nullptr}}, limits, &r).ok());
    EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
    EXPECT_EQ(r.sampling.top_k, 20);
  }
  {
    GenRequest r;
    ASSERT_TRUE(parse_completion_request(Json{{"prompt", "hi"}, {"top_k", 3}}, limits, &r).ok());
    EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
    EXPECT_EQ(r.sampling.top_k, 3);
  }
  {
    GenRequest r;
    ResponsesRequest rq;
    ResponseStore store;
    ApiError e = parse_responses_request(Json{{"input", "hi"}}, limits, store, &r, &rq);
    ASSERT_TRUE(e.ok()) << e.message;
    EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
    EXPECT_EQ(r.sampling.top_k, 20);
    GenRequest r2;
    e = parse_responses_request(Json{{"input", "hi"}, {"temperature", 0.7}}, limits, store, &r2, &rq);
    ASSERT_TRUE(e.ok()) << e.message;
    EXPECT_FLOAT_EQ(r2.sampling.temperature, 0.7f);
  }
}

TEST(GenerationDefaults, ServeFlagsAreCheckedAtStart) {
  const std::string model = std::string(MEGASERVE_SOURCE_DIR) + "/models/configs/north-mini-code";
  bool help = false;
  auto c = parse_serve_args({"--model", model, "--override-generation-config", R"({"temperature": 0})"}, &help);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->generation_config, "auto");
  EXPECT_EQ(c->override_generation_config, R"({"temperature": 0})");
  EXPECT_NE(c->summary().find("override_generation_config="), std::string::npos);
  auto bad = parse_serve_args({"--model", model, "--override-generation-config", R"({"temperature": 9})"}, &help);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--override-generation-config"), std::string::npos);
  auto mode = parse_serve_args({"--model", model, "--generation-config", "vllm"}, &help);
  ASSERT_FALSE(mode.is_ok());
  EXPECT_NE(mode.status().message().find("--generation-config"), std::string::npos);
}

}  // namespace
}  // namespace ms::server
