// tools / tool_choice validation.
#include "chat/tool_call_choice.h"

#include <gtest/gtest.h>

namespace ms {
namespace {

nlohmann::json tools() {
  return nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "d",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time"}}
  ])");
}

TEST(ToolChoice, Defaults) {
  auto none = resolve_tool_choice(nullptr, nullptr);
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none->mode, ToolChoice::Mode::kNone);
  EXPECT_FALSE(none->parse());
  auto a = resolve_tool_choice(tools(), nullptr);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->mode, ToolChoice::Mode::kAuto);
  EXPECT_TRUE(a->parse());
  EXPECT_FALSE(a->required());
  EXPECT_EQ(a->tool_names, (std::vector<std::string>{"get_weather", "get_time"}));
  EXPECT_EQ(a->allowed_names(), a->tool_names);
}

TEST(ToolChoice, Strings) {
  EXPECT_EQ(resolve_tool_choice(tools(), "none")->mode, ToolChoice::Mode::kNone);
  EXPECT_EQ(resolve_tool_choice(tools(), "auto")->mode, ToolChoice::Mode::kAuto);
  EXPECT_EQ(resolve_tool_choice(nullptr, "auto")->mode, ToolChoice::Mode::kNone);
  auto r = resolve_tool_choice(tools(), "required");
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->parse());
  EXPECT_TRUE(r->required());
  EXPECT_FALSE(resolve_tool_choice(nullptr, "required").is_ok());
  auto bad = resolve_tool_choice(tools(), "always");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("always"), std::string::npos);
}

TEST(ToolChoice, Named) {
  auto n = resolve_tool_choice(tools(), {{"type", "function"}, {"function", {{"name", "get_time"}}}});
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(n->mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(n->name, "get_time");
  EXPECT_TRUE(n->required());
  EXPECT_EQ(n->allowed_names(), std::vector<std::string>{"get_time"});

  auto unknown = resolve_tool_choice(tools(), {{"type", "function"}, {"function", {{"name", "launch"}}}});
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("'launch'"), std::string::npos);
  EXPECT_FALSE(resolve_tool_choice(tools(), {{"type", "function"}}).is_ok());
  EXPECT_FALSE(resolve_tool_choice(tools(), {{"type", "tool"}, {"function", {{"name", "get_time"}}}}).is_ok());
  EXPECT_FALSE(resolve_tool_choice(tools(), 3).is_ok());
}

TEST(ToolChoice, MalformedTools) {
  EXPECT_FALSE(resolve_tool_choice({{"type", "function"}}, nullptr).is_ok());  // not an array
  auto no_name = resolve_tool_choice(nlohmann::json::parse(R"([{"type": "function", "function": {}}])"), nullptr);
  ASSERT_FALSE(no_name.is_ok());
  EXPECT_NE(no_name.status().message().find("tools[0].function.name"), std::string::npos);
  EXPECT_FALSE(resolve_tool_choice(nlohmann::json::parse(R"([{"type": "retrieval"}])"), nullptr).is_ok());
  EXPECT_FALSE(resolve_tool_choice(
                   nlohmann::json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": 3}}])"), nullptr)
                   .is_ok());
  auto dup = resolve_tool_choice(nlohmann::json::parse(R"([{"type": "function", "function": {"name": "f"}},
                                                            {"type": "function", "function": {"name": "f"}}])"),
                                 nullptr);
  ASSERT_FALSE(dup.is_ok());
  EXPECT_NE(dup.status().message().find("'f'"), std::string::npos);
}

}  // namespace
}  // namespace ms
