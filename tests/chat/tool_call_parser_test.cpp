// One-shot tool-call parsing on real-format outputs, ids, JSON shapes, and
// format selection from real chat templates.
#include "chat/tool_call_parser.h"

#include <fstream>
#include <gtest/gtest.h>
#include <set>
#include <sstream>

#include "tool_call_cases.h"

namespace ms {
namespace {

using tool_call_test::all_cases;
using tool_call_test::Case;

class OneShot : public testing::TestWithParam<Case> {};

TEST_P(OneShot, MatchesExpected) {
  const Case& c = GetParam();
  ParsedMessage m = parse_tool_calls(c.format, c.text, c.options);
  EXPECT_EQ(m.content, c.content);
  EXPECT_EQ(m.reasoning, c.reasoning);
  ASSERT_EQ(m.tool_calls.size(), c.calls.size());
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(m.tool_calls[i].name, c.calls[i].name) << "call " << i;
    EXPECT_EQ(m.tool_calls[i].arguments, c.calls[i].arguments) << "call " << i;
    EXPECT_EQ(m.tool_calls[i].id.size(), 29u);
    EXPECT_EQ(m.tool_calls[i].id.rfind("call_", 0), 0u);
  }
}

std::string case_name(const testing::TestParamInfo<Case>& info) { return info.param.label; }

INSTANTIATE_TEST_SUITE_P(ToolCall, OneShot, testing::ValuesIn(all_cases()), case_name);

// Complete calls have arguments that are valid JSON objects and equal to what
// the model wrote.
TEST(ToolCallParse, CompleteArgumentsAreValidJson) {
  for (const Case& c : all_cases()) {
    if (c.label.find("truncated") != std::string::npos || c.label.find("syntax_error") != std::string::npos) continue;
    ParsedMessage m = parse_tool_calls(c.format, c.text, c.options);
    for (const ToolCall& call : m.tool_calls) {
      auto j = nlohmann::json::parse(call.arguments, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << c.label << ": " << call.arguments;
      EXPECT_TRUE(j.is_object()) << c.label;
    }
  }
}

TEST(ToolCallParse, NestedArgumentsDecodeToWhatTheModelMeant) {
  const std::string text =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"a\\\"}{\\\\\", \"u\": \"\\u00e9\\ud83d\\ude00\","
      " \"deep\": [[[{\"x\": {}}]]]}}\n</tool_call>";
  ParsedMessage m = parse_tool_calls(ToolCallFormat::kHermes, text);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  nlohmann::json args = nlohmann::json::parse(m.tool_calls[0].arguments);
  EXPECT_EQ(args["s"], "a\"}{\\");
  EXPECT_EQ(args["u"], "\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_TRUE(args["deep"][0][0][0]["x"].is_object());
}

TEST(ToolCallParse, IdsAreDeterministicPerSeedAndIgnoreCohereIds) {
  const std::string text =
      "<|START_ACTION|>[{\"tool_call_id\": \"7\", \"tool_name\": \"a\", \"parameters\": {}},"
      " {\"tool_call_id\": \"3\", \"tool_name\": \"b\", \"parameters\": {}}]<|END_ACTION|>";
  ParserOptions o;
  o.id_seed = 42;
  ParsedMessage m1 = parse_tool_calls(ToolCallFormat::kCohere, text, o);
  ParsedMessage m2 = parse_tool_calls(ToolCallFormat::kCohere, text, o);
  o.id_seed = 43;
  ParsedMessage m3 = parse_tool_calls(ToolCallFormat::kCohere, text, o);
  ASSERT_EQ(m1.tool_calls.size(), 2u);
  EXPECT_EQ(m1.tool_calls[0].name, "a");  // order kept
  EXPECT_EQ(m1.tool_calls[1].name, "b");
  EXPECT_EQ(m1.tool_calls[0].id, m2.tool_calls[0].id);
  EXPECT_NE(m1.tool_calls[0].id, m1.tool_calls[1].id);
  EXPECT_NE(m1.tool_calls[0].id, m3.tool_calls[0].id);
  for (const ToolCall& c : m1.tool_calls) {
    for (char ch : c.id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)));
  }
}

TEST(ToolCallParse, IdGeneratorDoesNotRepeat) {
  ToolCallIdGenerator g(1);
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(g.next()).second);
}

TEST(ToolCallParse, OpenAiJsonShapes) {
  ParsedMessage m = parse_tool_calls(ToolCallFormat::kHermes,
                                     "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>");
  nlohmann::json j = m.tool_calls_json();
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["type"], "function");
  EXPECT_EQ(j[0]["id"], m.tool_calls[0].id);
  EXPECT_EQ(j[0]["function"]["name"], "f");
  EXPECT_EQ(j[0]["function"]["arguments"], "{\"a\":1}");

  ToolCallDelta header{0, "call_x", "f", ""};
  EXPECT_EQ(header.to_json().dump(),
            R"({"function":{"arguments":"","name":"f"},"id":"call_x","index":0,"type":"function"})");
  ToolCallDelta frag{1, "", "", "{\"a\""};
  EXPECT_EQ(frag.to_json().dump(), R"({"function":{"arguments":"{\"a\""},"index":1})");
}

TEST(ToolCallFormatName, ParsesFlagValues) {
  EXPECT_EQ(*parse_tool_call_format("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(*parse_tool_call_format("qwen"), ToolCallFormat::kHermes);
  EXPECT_EQ(*parse_tool_call_format("cohere"), ToolCallFormat::kCohere);
  EXPECT_EQ(*parse_tool_call_format("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(*parse_tool_call_format("none"), ToolCallFormat::kNone);
  auto bad = parse_tool_call_format("mistral");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("mistral"), std::string::npos);
  for (auto f : {ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kCohere, ToolCallFormat::kLlama3Json}) {
    EXPECT_EQ(*parse_tool_call_format(tool_call_format_name(f)), f);
  }
}

std::string read_template(const std::string& name) {
  std::ifstream f(std::string(MEGASERVE_SOURCE_DIR) + "/tests/fixtures/templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ToolCallFormatDetect, RealTemplates) {
  struct T {
    const char* file;
    ToolCallFormat want;
  };
  const T cases[] = {
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"Cohere2MoE.jinja", ToolCallFormat::kCohere},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", ToolCallFormat::kCohere},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"lenml-llama3.jinja", ToolCallFormat::kNone},
      {"Qwen3-Coder.jinja", ToolCallFormat::kNone},  // XML-style calls: not supported
      {"GLM-4.6.jinja", ToolCallFormat::kNone},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::kNone},
  };
  for (const T& t : cases) {
    std::string tmpl = read_template(t.file);
    if (tmpl.empty()) GTEST_SKIP() << "fixture missing: " << t.file;
    EXPECT_EQ(detect_tool_call_format(tmpl, nlohmann::json::object()), t.want) << t.file;
  }
}

TEST(ToolCallFormatDetect, FromTokenizerConfig) {
  nlohmann::json cfg = {{"chat_template", nlohmann::json::array({{{"name", "default"}, {"template", "{{ messages }}"}},
                                                                  {{"name", "tool_use"}, {"template", "<|START_ACTION|>"}}})}};
  EXPECT_EQ(detect_tool_call_format("", cfg), ToolCallFormat::kCohere);
  nlohmann::json tokens = {{"added_tokens_decoder", {{"151657", {{"content", "<tool_call>"}}}}}};
  EXPECT_EQ(detect_tool_call_format("", tokens), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{ tools }}", tokens), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{ messages }}", tokens), ToolCallFormat::kNone);  // template never mentions tools
  EXPECT_EQ(detect_tool_call_format("", nlohmann::json()), ToolCallFormat::kNone);
  EXPECT_EQ(detect_tool_call_format("", nlohmann::json("garbage")), ToolCallFormat::kNone);
}

TEST(ToolCallFormatDetect, PromptOpensReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning(ToolCallFormat::kCohere, "...<|CHATBOT_TOKEN|><|START_THINKING|>"));
  EXPECT_FALSE(prompt_opens_reasoning(ToolCallFormat::kCohere, "<|START_THINKING|><|END_THINKING|>"));
  EXPECT_FALSE(prompt_opens_reasoning(ToolCallFormat::kHermes, "<|START_THINKING|>"));
}

}  // namespace
}  // namespace ms
