// forced_call_prefix: what the server appends to the prompt for tool_choice
// "required" / named, per format, and that each prefix parses as the start of
// a call to the named function.
#include <gtest/gtest.h>

#include "chat/tool_call_choice.h"
#include "chat/tool_call_parser.h"

namespace ms {
namespace {

ToolChoice choice(const char* tc) {
  nlohmann::json tools = nlohmann::json::parse(
      R"([{"type":"function","function":{"name":"get_weather"}},{"type":"function","function":{"name":"calc"}}])");
  auto r = resolve_tool_choice(tools, nlohmann::json::parse(tc));
  EXPECT_TRUE(r.is_ok());
  return *r;
}

TEST(ForcedCallPrefix, NoneForAutoAndNone) {
  for (auto f : {ToolCallFormat::kCohere, ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json}) {
    EXPECT_EQ(forced_call_prefix(f, choice(R"("auto")")), "");
    EXPECT_EQ(forced_call_prefix(f, choice(R"("none")")), "");
  }
  EXPECT_EQ(forced_call_prefix(ToolCallFormat::kNone, choice(R"("required")")), "");
}

TEST(ForcedCallPrefix, RequiredOpensACall) {
  EXPECT_EQ(forced_call_prefix(ToolCallFormat::kCohere, choice(R"("required")")), "<|START_ACTION|>");
  EXPECT_EQ(forced_call_prefix(ToolCallFormat::kHermes, choice(R"("required")")), "<tool_call>\n");
  EXPECT_EQ(forced_call_prefix(ToolCallFormat::kLlama3Json, choice(R"("required")")), "{\"name\":");
}

TEST(ForcedCallPrefix, NamedPrefixPlusArgumentsParsesAsThatCall) {
  const ToolChoice c = choice(R"({"type":"function","function":{"name":"get_weather"}})");
  struct Case {
    ToolCallFormat f;
    const char* rest;  // what a model would write after the prefix
  } cases[] = {
      {ToolCallFormat::kCohere, R"( {"city": "Oslo"}}]<|END_ACTION|>)"},
      {ToolCallFormat::kHermes, " {\"city\": \"Oslo\"}}\n</tool_call>"},
      {ToolCallFormat::kLlama3Json, R"( {"city": "Oslo"}})"},
  };
  for (const auto& k : cases) {
    std::string prefix = forced_call_prefix(k.f, c);
    ASSERT_FALSE(prefix.empty());
    EXPECT_NE(prefix.back(), ' ') << "a trailing space tokenizes unlike model output";
    ParserOptions po;
    po.allowed_names = c.allowed_names();
    ParsedMessage m = parse_tool_calls(k.f, prefix + k.rest, po);
    ASSERT_EQ(m.tool_calls.size(), 1u) << tool_call_format_name(k.f) << ": " << m.content;
    EXPECT_EQ(m.tool_calls[0].name, "get_weather");
    EXPECT_EQ(m.tool_calls[0].arguments, R"({"city":"Oslo"})");
    EXPECT_EQ(m.content, "");
  }
}

TEST(ForcedCallPrefix, EscapesTheName) {
  nlohmann::json tools = nlohmann::json::parse(R"([{"type":"function","function":{"name":"we\"ird"}}])");
  auto c = resolve_tool_choice(tools, nlohmann::json::parse(R"({"type":"function","function":{"name":"we\"ird"}})"));
  ASSERT_TRUE(c.is_ok());
  EXPECT_NE(forced_call_prefix(ToolCallFormat::kHermes, *c).find(R"("we\"ird")"), std::string::npos);
}

}  // namespace
}  // namespace ms
