// Streaming tool-call parsing: whatever the split of the output into deltas,
// the deltas add up to the one-shot parse, are well formed, and never say
// anything (content or call) that a longer output would contradict.
#include <gtest/gtest.h>

#include <random>

#include "chat/tool_call_parser.h"
#include "tool_call_cases.h"

namespace ms {
namespace {

using tool_call_test::all_cases;
using tool_call_test::Case;

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char b = s[i];
    size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Checks one StreamDelta against the calls announced so far and folds it in.
void absorb(ParsedMessage& m, const StreamDelta& d, const std::string& where) {
  EXPECT_TRUE(valid_utf8(d.content)) << where;
  EXPECT_TRUE(valid_utf8(d.reasoning)) << where;
  std::vector<int> seen;
  int announced = static_cast<int>(m.tool_calls.size());
  for (const ToolCallDelta& t : d.tool_calls) {
    for (int s : seen) EXPECT_NE(s, t.index) << where << ": index twice in one delta";
    seen.push_back(t.index);
    if (t.is_header()) {
      EXPECT_EQ(t.index, announced++) << where << ": header out of order";
      EXPECT_FALSE(t.name.empty()) << where;
    } else {
      EXPECT_LT(t.index, announced) << where << ": fragment before header";
      EXPECT_FALSE(t.arguments.empty()) << where << ": empty fragment";
    }
    EXPECT_TRUE(valid_utf8(t.arguments)) << where;
  }
  append_delta(m, d);
}

void expect_same(const ParsedMessage& got, const ParsedMessage& want, const std::string& where) {
  EXPECT_EQ(got.content, want.content) << where;
  EXPECT_EQ(got.reasoning, want.reasoning) << where;
  ASSERT_EQ(got.tool_calls.size(), want.tool_calls.size()) << where;
  for (size_t i = 0; i < want.tool_calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].id, want.tool_calls[i].id) << where;
    EXPECT_EQ(got.tool_calls[i].name, want.tool_calls[i].name) << where;
    EXPECT_EQ(got.tool_calls[i].arguments, want.tool_calls[i].arguments) << where;
  }
}

// What has been emitted so far must be a prefix of the final message.
void expect_prefix_of(const ParsedMessage& part, const ParsedMessage& full, const std::string& where) {
  EXPECT_EQ(full.content.compare(0, part.content.size(), part.content), 0)
      << where << ": content '" << part.content << "' is not a prefix of '" << full.content << "'";
  EXPECT_EQ(full.reasoning.compare(0, part.reasoning.size(), part.reasoning), 0) << where;
  ASSERT_LE(part.tool_calls.size(), full.tool_calls.size()) << where << ": call announced that is not one";
  for (size_t i = 0; i < part.tool_calls.size(); ++i) {
    EXPECT_EQ(part.tool_calls[i].name, full.tool_calls[i].name) << where;
    EXPECT_EQ(full.tool_calls[i].arguments.compare(0, part.tool_calls[i].arguments.size(), part.tool_calls[i].arguments), 0)
        << where << ": arguments '" << part.tool_calls[i].arguments << "' vs '" << full.tool_calls[i].arguments << "'";
  }
}

ParsedMessage stream(const Case& c, const std::vector<size_t>& cuts, const std::string& where) {
  ToolCallStreamParser p(c.format, c.options);
  ParsedMessage m;
  size_t from = 0;
  for (size_t cut : cuts) {
    absorb(m, p.feed(std::string_view(c.text).substr(from, cut - from)), where);
    from = cut;
  }
  absorb(m, p.feed(std::string_view(c.text).substr(from)), where);
  absorb(m, p.finish(), where);
  EXPECT_TRUE(p.finish().empty());
  return m;
}

class Streaming : public testing::TestWithParam<Case> {};

TEST_P(Streaming, EveryTwoWaySplitMatchesOneShot) {
  const Case& c = GetParam();
  ParsedMessage want = parse_tool_calls(c.format, c.text, c.options);
  for (size_t i = 0; i <= c.text.size(); ++i) {
    expect_same(stream(c, {i}, "split at " + std::to_string(i)), want, "split at " + std::to_string(i));
    if (HasFailure()) return;
  }
}

TEST_P(Streaming, ByteByByteMatchesOneShotAndNeverRetracts) {
  const Case& c = GetParam();
  ParsedMessage want = parse_tool_calls(c.format, c.text, c.options);
  ToolCallStreamParser p(c.format, c.options);
  ParsedMessage m;
  for (size_t i = 0; i < c.text.size(); ++i) {
    std::string where = "after byte " + std::to_string(i);
    absorb(m, p.feed(c.text.substr(i, 1)), where);
    expect_prefix_of(m, want, where);
    if (HasFailure()) return;
  }
  absorb(m, p.finish(), "finish");
  expect_same(m, want, "byte by byte");
}

TEST_P(Streaming, RandomChunksMatchOneShot) {
  const Case& c = GetParam();
  ParsedMessage want = parse_tool_calls(c.format, c.text, c.options);
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> cuts;
    for (size_t at = 0;;) {
      at += 1 + rng() % 7;
      if (at >= c.text.size()) break;
      cuts.push_back(at);
    }
    expect_same(stream(c, cuts, "trial " + std::to_string(trial)), want, "trial " + std::to_string(trial));
    if (HasFailure()) return;
  }
}

// Every prefix is itself an output (generation may stop anywhere): feeding it
// in any split must agree with its one-shot parse, and what was streamed
// before the stop must not contradict the longer output.
TEST_P(Streaming, EveryTruncationIsConsistent) {
  const Case& c = GetParam();
  ParsedMessage full = parse_tool_calls(c.format, c.text, c.options);
  for (size_t n = 0; n <= c.text.size(); ++n) {
    // Generation stops between characters (the detokenizer never splits one).
    if (n < c.text.size() && (static_cast<unsigned char>(c.text[n]) & 0xC0) == 0x80) continue;
    Case t = c;
    t.text = c.text.substr(0, n);
    ParsedMessage want = parse_tool_calls(t.format, t.text, t.options);
    std::vector<size_t> cuts;
    for (size_t i = 1; i < n; ++i) cuts.push_back(i);
    expect_same(stream(t, cuts, "prefix " + std::to_string(n)), want, "prefix " + std::to_string(n));
    ToolCallStreamParser p(c.format, c.options);
    ParsedMessage part;
    append_delta(part, p.feed(t.text));
    expect_prefix_of(part, full, "prefix " + std::to_string(n));
    if (HasFailure()) return;
  }
}

std::string case_name(const testing::TestParamInfo<Case>& info) { return info.param.label; }

INSTANTIATE_TEST_SUITE_P(ToolCall, Streaming, testing::ValuesIn(all_cases()), case_name);

TEST(ToolCallStream, HeaderComesFirstThenArgumentFragments) {
  const std::string text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>";
  ToolCallStreamParser p(ToolCallFormat::kHermes);
  std::vector<ToolCallDelta> deltas;
  for (char ch : text) {
    for (auto& d : p.feed(std::string(1, ch)).tool_calls) deltas.push_back(d);
  }
  for (auto& d : p.finish().tool_calls) deltas.push_back(d);
  ASSERT_GE(deltas.size(), 3u);
  EXPECT_TRUE(deltas[0].is_header());
  EXPECT_EQ(deltas[0].name, "get_weather");
  EXPECT_EQ(deltas[0].arguments, "{");  // announced when the arguments begin
  std::string args;
  for (size_t i = 0; i < deltas.size(); ++i) {
    if (i > 0) {
      EXPECT_FALSE(deltas[i].is_header());
    }
    args += deltas[i].arguments;
  }
  EXPECT_EQ(args, "{\"location\":\"Paris\"}");
}

TEST(ToolCallStream, ContentBeforeACallIsNotDelayedMoreThanAMarker) {
  ToolCallStreamParser p(ToolCallFormat::kHermes);
  EXPECT_EQ(p.feed("Checking the weather").content, "Checking the weather");
  EXPECT_EQ(p.feed(" now.\n<tool_").content, " now.");  // "\n<tool_" may start a call
  StreamDelta d = p.feed("call>\n{\"name\": \"f\", \"arguments\": {}}");
  EXPECT_TRUE(d.content.empty());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{}");
}

TEST(ToolCallStream, Utf8SplitInsideACharacterIsHeld) {
  ToolCallStreamParser p(ToolCallFormat::kHermes);
  const std::string euro = "\xE2\x82\xAC";
  EXPECT_EQ(p.feed("a" + euro.substr(0, 1)).content, "a");
  EXPECT_EQ(p.feed(euro.substr(1, 1)).content, "");
  EXPECT_EQ(p.feed(euro.substr(2)).content, euro);
  // An invalid byte sequence still comes out at the end.
  EXPECT_EQ(p.feed("\xE2\x82").content, "");
  EXPECT_EQ(p.finish().content, "\xE2\x82");
}

TEST(ToolCallStream, GarbageNeverCrashesAndLosesNothingOutsideMarkup) {
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\":,; \n\\u0<>|/_tool_callnameargumentsSTART_ACTIONpython_tag";
  for (auto format : {ToolCallFormat::kHermes, ToolCallFormat::kCohere, ToolCallFormat::kLlama3Json}) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      size_t len = rng() % 80;
      for (size_t i = 0; i < len; ++i) text.push_back(alphabet[rng() % alphabet.size()]);
      ParsedMessage want = parse_tool_calls(format, text);
      Case c{"garbage", format, text, "", {}};
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
      expect_same(stream(c, cuts, "garbage"), want, text);
      if (want.tool_calls.empty() && want.reasoning.empty()) {
        // With no call and no markers stripped, only whitespace can vanish.
        auto strip = [](std::string s) {
          std::string r;
          for (char ch : s) if (ch != ' ' && ch != '\n') r.push_back(ch);
          return r;
        };
        std::string stripped = strip(text);
        // Markers are stripped, and markup regions they open are dropped.
        for (const char* m : {"<|START_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|END_ACTION|>", "<|START_THINKING|>",
                              "<|END_THINKING|>", "<tool_call>", "</tool_call>", "<|python_tag|>"}) {
          if (text.find(m) != std::string::npos) stripped.clear();
        }
        if (!stripped.empty()) {
          EXPECT_EQ(strip(want.content), stripped) << text;
        }
      }
      if (HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace ms
