// Bounded JSON parsing: same values as nlohmann's parser, and a clear error
// (no crash, no deep recursion) past the depth limit.
#include "core/json_parse.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

namespace ms {
namespace {

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(JsonParse, SameValuesAsNlohmann) {
  const char* docs[] = {
      "null", "true", "-12", "18446744073709551615", "1.5e3", "\"a\\u00e9\\n\"", "[]", "{}",
      R"({"b": [1, {"c": null}], "a": "x", "d": {"e": [[], {}]}})", " [1, 2.5, \"3\", false] ",
  };
  for (const char* d : docs) {
    auto r = parse_json(d);
    ASSERT_TRUE(r.is_ok()) << d << ": " << r.status().to_string();
    EXPECT_EQ(*r, nlohmann::json::parse(d)) << d;
  }
}

TEST(JsonParse, OrderedKeepsKeyOrderAndLastDuplicate) {
  auto r = parse_ordered_json(R"({"z": 1, "a": 2, "z": 3})");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->dump(), R"({"z":3,"a":2})");
}

TEST(JsonParse, DepthAtTheLimitIsAccepted) {
  auto r = parse_json(nested(kMaxJsonDepth));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const nlohmann::json* p = &*r;
  int depth = 0;
  while (p->is_array()) { p = &(*p)[0]; ++depth; }
  EXPECT_EQ(depth, kMaxJsonDepth);
}

TEST(JsonParse, OneLevelPastTheLimitIsOutOfRangeNamingItAndTheByte) {
  const std::string doc = "{\"a\": " + nested(kMaxJsonDepth) + "}";
  auto r = parse_ordered_json(doc);
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(is_json_too_deep(r.status()));
  EXPECT_NE(r.status().message().find("limit of 128 levels"), std::string::npos) << r.status().message();
  // The object is level 1, so the 128th '[' (byte 6 + 127) opens level 129.
  EXPECT_NE(r.status().message().find("at byte 133"), std::string::npos) << r.status().message();
}

TEST(JsonParse, ObjectsCountLikeArrays) {
  std::string doc;
  for (int i = 0; i < 200; ++i) doc += "{\"k\":";
  doc += "1" + std::string(200, '}');
  auto r = parse_json(doc);
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(is_json_too_deep(r.status()));
  EXPECT_TRUE(parse_json(doc, 200).is_ok());
}

TEST(JsonParse, BracketsInsideStringsDoNotCount) {
  const std::string doc = "[\"" + std::string(1000, '[') + "\\\"{{{\"]";
  auto r = parse_json(doc);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].get<std::string>().size(), 1004u);
}

// The issue's repro: 40k levels inside chat_template_kwargs. It used to parse
// and then overflow the stack in dump()/copies; now it stops at level 129.
TEST(JsonParse, VeryDeepDocumentFailsFastWithoutRecursion) {
  const int d = 1000000;
  const std::string doc = "{\"chat_template_kwargs\":{\"x\":" + nested(d, "") + "}}";
  auto t0 = std::chrono::steady_clock::now();
  auto r = parse_ordered_json(doc);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(is_json_too_deep(r.status()));
  EXPECT_LT(ms, 500.0);
  // Unclosed: the parse stops before it could notice the missing brackets.
  EXPECT_TRUE(is_json_too_deep(parse_json(std::string(d, '[')).status()));
}

TEST(JsonParse, MalformedIsInvalidArgumentWithThePosition) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"", "column 1"},      {"[1,]", "column 4"},  {"{\"a\" 1}", "column 6"},
      {"[1] x", "column 5"}, {"1e400", "number overflow"}, {"\"\\ud800\"", "surrogate"},
      {"[", "column 2"},
  };
  for (const auto& c : cases) {
    auto r = parse_json(c.text);
    ASSERT_FALSE(r.is_ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << c.text << ": " << r.status().message();
    EXPECT_EQ(r.status().message().find("[json.exception"), std::string::npos) << r.status().message();
  }
}

TEST(JsonParse, ReadJsonFileNamesThePath) {
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/ms_read_json_good.json", bad = dir + "/ms_read_json_bad.json";
  std::ofstream(good) << "{\"a\": [1, 2]}";
  std::ofstream(bad) << "{\"a\": ";
  auto g = read_json_file(good);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ((*g)["a"][1], 2);
  auto b = read_json_file(bad);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find(bad + ": not valid JSON"), std::string::npos) << b.status().message();
  auto m = read_json_file(dir + "/ms_read_json_missing.json");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("ms_read_json_missing.json: cannot open"), std::string::npos);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace ms
