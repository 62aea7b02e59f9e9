// The incremental JSON scanner and call-object parser behind streamed tool calls.
#include "chat/tool_call_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ms::tool_call_detail {
namespace {

// Scans a whole document; returns false on error. Trailing bytes after the
// value are an error except whitespace.
bool scan(const std::string& doc, std::string* compact) {
  JsonScanner s(compact);
  bool done = false;
  for (char c : doc) {
    if (done) {
      if (c != ' ' && c != '\n') return false;
      continue;
    }
    ScanStep st = s.push(c);
    if (st == ScanStep::kError) return false;
    if (st == ScanStep::kDone || st == ScanStep::kDoneUnused) done = true;
    if (st == ScanStep::kDoneUnused && c != ' ' && c != '\n') return false;
  }
  return done || s.can_end_at_eof();
}

TEST(JsonScanner, CompactsValidDocuments) {
  const char* docs[] = {
      "{}", "[]", " { } ", "0", "-0.5e+10", "1E3", "123", "\"x\"", "true", "false", "null",
      "{\"a\" : [1, 2.0, -3e-2, {\"b\": null}], \"c\": \"}{][\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\ude00\"}",
      "[[[[[]]]], {}, [{}], \"\"]",
      "{\"k\": \"\xE2\x82\xAC \xF0\x9F\x98\x80\"}",
  };
  for (const char* d : docs) {
    std::string compact;
    ASSERT_TRUE(scan(d, &compact)) << d;
    auto want = nlohmann::ordered_json::parse(d);
    auto got = nlohmann::ordered_json::parse(compact);
    EXPECT_EQ(got, want) << d << " -> " << compact;
    EXPECT_EQ(got.dump(), want.dump());
    // Nothing but string contents may hold whitespace.
    bool in_string = false, esc = false;
    for (char c : compact) {
      if (in_string) {
        if (esc) esc = false;
        else if (c == '\\') esc = true;
        else if (c == '"') in_string = false;
      } else {
        EXPECT_FALSE(c == ' ' || c == '\n') << compact;
        if (c == '"') in_string = true;
      }
    }
  }
}

TEST(JsonScanner, RejectsInvalidDocuments) {
  const char* bad[] = {"{\"a\" 1}", "{\"a\":}", "[1,]", "{,}", "{\"a\":1,}", "\"\\x\"", "\"\\u12g4\"", "01", "-",
                       "1.", "1e", "1e+", "tru", "trUe", "nul", "{\"a\":1}}", "[1 2]", "{1: 2}", "[}", "{]", "'a'",
                       "+1", ".5", "{\"a\":1]"};
  for (const char* d : bad) {
    std::string compact;
    EXPECT_FALSE(scan(d, &compact)) << d;
  }
}

TEST(JsonScanner, EscapesRawControlCharactersInStrings) {
  std::string compact;
  ASSERT_TRUE(scan(std::string("{\"a\": \"x\ny\tz\x01\"}"), &compact));
  EXPECT_EQ(compact, "{\"a\":\"x\\ny\\tz\\u0001\"}");
  EXPECT_EQ(nlohmann::json::parse(compact)["a"], std::string("x\ny\tz\x01"));
}

TEST(JsonScanner, DepthIsBounded) {
  std::string deep(JsonScanner::kMaxDepth + 1, '[');
  EXPECT_FALSE(scan(deep, nullptr));
  std::string ok(JsonScanner::kMaxDepth, '[');
  ok += std::string(JsonScanner::kMaxDepth, ']');
  EXPECT_TRUE(scan(ok, nullptr));
}

ScanStep push_all(CallObjectParser& p, const std::string& s) {
  ScanStep last = ScanStep::kMore;
  for (char c : s) {
    last = p.push(c);
    if (last == ScanStep::kError) return last;
  }
  return last;
}

TEST(CallObjectParser, ReadyOnceNameAndArgumentsBegin) {
  CallKeys keys{{"name"}, {"arguments"}, false};
  CallObjectParser p(&keys);
  EXPECT_EQ(push_all(p, "{\"name\": \"f\\u00e9\", "), ScanStep::kMore);
  EXPECT_FALSE(p.ready());
  EXPECT_EQ(p.name(), "f\xC3\xA9");
  EXPECT_EQ(push_all(p, "\"arguments\": {"), ScanStep::kMore);
  EXPECT_TRUE(p.ready());
  EXPECT_EQ(p.take_args(), "{");
  EXPECT_EQ(push_all(p, " \"a\" : 1 "), ScanStep::kMore);
  EXPECT_EQ(p.take_args(), "\"a\":1");
  EXPECT_EQ(push_all(p, "}}"), ScanStep::kDone);
  EXPECT_EQ(p.take_args(), "}");
}

TEST(CallObjectParser, StrictKeysRejectOtherObjects) {
  CallKeys keys{{"name"}, {"parameters"}, true};
  CallObjectParser p(&keys);
  EXPECT_EQ(push_all(p, "{\"name\": \"John\", \"age\""), ScanStep::kError);
  CallObjectParser q(&keys);
  EXPECT_EQ(push_all(q, "{\"type\": \"function\", \"name\": \"f\", \"parameters\": {}, \"x\": 1}"), ScanStep::kDone);
}

TEST(CallObjectParser, ForceCloseAtMemberBoundary) {
  CallKeys keys{{"name"}, {"arguments"}, false};
  CallObjectParser p(&keys);
  EXPECT_EQ(push_all(p, "{\"name\": \"f\", \"n\": 12"), ScanStep::kMore);
  EXPECT_TRUE(p.at_member_boundary());
  EXPECT_EQ(p.force_close(), ScanStep::kDone);
  EXPECT_EQ(p.take_args(), "{}");
  CallObjectParser q(&keys);
  EXPECT_EQ(push_all(q, "{\"name\": \"f\", \"arguments\": {\"a\""), ScanStep::kMore);
  EXPECT_FALSE(q.at_member_boundary());
}

}  // namespace
}  // namespace ms::tool_call_detail
