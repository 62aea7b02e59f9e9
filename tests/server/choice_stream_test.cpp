// One choice's output pipeline on the demo tokenizer (Cohere format): the
// call limit of parallel_tool_calls false ends the choice after its first
// call, tool_choice none drops calls, and logprobs skip control tokens.
#include "server/choice_stream.h"
#include "server/responses.h"

#include <gtest/gtest.h>

namespace ms::server {
namespace {

class ChoiceStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = Tokenizer::load(std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo");
    ASSERT_TRUE(t.is_ok());
    tok_ = new Tokenizer(std::move(t.value()));
  }
  // Feeds the tokens of `text` one by one (then a stop finish if still open).
  static ChoiceAccumulator run(ChoiceStream& s, const std::string& text, int* fed = nullptr) {
    ChoiceAccumulator acc;
    int n = 0;
    for (int32_t id : tok_->encode(text, false, true)) {
      if (s.finished()) break;
      TokenEvent e;
      e.token = id;
      e.top = {{id, -0.1f}, {tok_->encode("<|START_ACTION|>", false, true)[0], -3.f}};
      acc.add(s.on_token(e));
      ++n;
    }
    if (!s.finished()) {
      FinishEvent f;
      f.reason = FinishReason::kStop;
      acc.add(s.on_finish(f));
    }
    if (fed) *fed = n;
    return acc;
  }
  static ChoiceOptions cohere() {
    ChoiceOptions o;
    o.tool_format = ToolCallFormat::kCohere;
    o.skip_special = false;
    return o;
  }
  static Tokenizer* tok_;
};
Tokenizer* ChoiceStreamTest::tok_ = nullptr;

const char* kTwoCalls =
    "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}},"
    " {\"tool_call_id\": \"1\", \"tool_name\": \"calculator\", \"parameters\": {\"expression\": \"3 * 4\"}}]<|END_ACTION|>";

TEST_F(ChoiceStreamTest, CallLimitEndsTheChoiceAfterTheFirstCall) {
  ChoiceOptions o = cohere();
  o.parser.max_calls = 1;
  ChoiceStream s(*tok_, o);
  int fed = 0;
  ChoiceAccumulator a = run(s, kTwoCalls, &fed);
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.tool_calls[0].name, "get_weather");
  EXPECT_EQ(a.finish_reason, "tool_calls");
  EXPECT_EQ(a.content, "");
  EXPECT_LT(fed, static_cast<int>(tok_->encode(kTwoCalls, false, true).size()));  // stopped early
  ChoiceStream both(*tok_, cohere());
  EXPECT_EQ(run(both, kTwoCalls).tool_calls.size(), 2u);
}

TEST_F(ChoiceStreamTest, NoCallsAllowedDropsTheActionKeepsTheAnswer) {
  ChoiceOptions o = cohere();
  o.parser.calls_allowed = false;
  ChoiceStream s(*tok_, o);
  ChoiceAccumulator a = run(s, std::string(kTwoCalls) + "<|START_RESPONSE|>Sunny.<|END_RESPONSE|>");
  EXPECT_TRUE(a.tool_calls.empty());
  EXPECT_EQ(a.content, "Sunny.");
  EXPECT_EQ(a.finish_reason, "stop");
  EXPECT_EQ(s.dropped_calls(), 1);
}

TEST_F(ChoiceStreamTest, LogprobsSkipControlTokensAndAlternatives) {
  ChoiceStream s(*tok_, cohere());
  ChoiceAccumulator a = run(s, "<|START_RESPONSE|>Hello there<|END_RESPONSE|>");
  EXPECT_EQ(a.content, "Hello there");
  std::string listed;
  for (const TokenEvent& e : a.tokens) {
    EXPECT_FALSE(tok_->is_special(e.token));
    for (const TokenLogprob& t : e.top) EXPECT_FALSE(tok_->is_special(t.token));
    int32_t id[1] = {e.token};
    listed += tok_->decode(id, false);
  }
  EXPECT_EQ(listed, "Hello there");
  EXPECT_EQ(s.completion_tokens(), static_cast<int>(tok_->encode("<|START_RESPONSE|>Hello there<|END_RESPONSE|>", false, true).size()));
  // With special tokens shown in the text (no tool parsing), they are listed.
  ChoiceOptions shown;
  shown.skip_special = false;
  shown.logprobs_special = true;
  ChoiceStream t(*tok_, shown);
  ChoiceAccumulator b = run(t, "<|START_RESPONSE|>Hi");
  ASSERT_FALSE(b.tokens.empty());
  EXPECT_TRUE(tok_->is_special(b.tokens[0].token));
}

}  // namespace
}  // namespace ms::server
