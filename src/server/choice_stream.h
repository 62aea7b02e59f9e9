// One choice's output pipeline: token ids -> streaming detokenizer -> stop
// strings -> tool-call parser -> OpenAI-style deltas. A choice whose parser
// reached its call limit (parallel_tool_calls false) ends there with
// finish_reason "tool_calls"; control tokens never reach logprobs. Used identically by
// streaming responses (each delta is a chunk) and non-streaming ones (deltas
// are folded into one message), so both always agree.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/tool_call_parser.h"
#include "engine/request.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {

struct ChoiceOptions {
  std::vector<std::string> stop;
  bool skip_special = true;
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // kNone: output is plain content
  ParserOptions parser;
  std::vector<int32_t> hidden_ids;  // end-of-sequence ids: counted, never shown as text
  // Special tokens (and their alternatives) appear in logprobs only when they
  // can appear in the text: skip_special_tokens false and no tool parsing.
  bool logprobs_special = false;
};

// What one engine event produced for the client.
struct ChoiceDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;
  std::vector<TokenEvent> tokens;             // the tokens behind this delta that logprobs list
  std::optional<std::string> finish_reason;   // "stop", "length", "tool_calls" once the choice ends
  std::optional<Status> error;                // the engine failed this choice
  bool has_payload() const { return !content.empty() || !reasoning.empty() || !tool_calls.empty(); }
};

class ChoiceStream {
 public:
  ChoiceStream(const Tokenizer& tokenizer, ChoiceOptions options);
  // Text the server wrote at the start of the reply in the model's name (a
  // forced tool-call prefix): parsed like model output; what it yields goes
  // out with the first token's delta. Not counted as completion tokens.
  void prime(const std::string& text);
  ChoiceDelta on_token(const TokenEvent& e);
  // The engine finished this choice (ignored if it already ended on a stop string).
  ChoiceDelta on_finish(const FinishEvent& e);
  bool finished() const { return finished_; }
  int completion_tokens() const { return completion_tokens_; }
  bool made_tool_call() const { return tool_calls_ > 0; }
  // Tool-call markup the parser dropped (malformed, not allowed, over the limit).
  int dropped_calls() const { return parser_ ? parser_->dropped_calls() : 0; }

 private:
  void push_text(const std::string& text, ChoiceDelta* d);
  void append_parsed(const StreamDelta& s, ChoiceDelta* d);
  void finish(const char* reason, ChoiceDelta* d);
  bool listed(int32_t token) const;  // shown in logprobs

  const Tokenizer* tokenizer_;
  ChoiceOptions options_;
  StreamingDetokenizer detok_;
  StopMatcher stop_;
  std::unique_ptr<ToolCallStreamParser> parser_;  // null: no tool parsing
  bool finished_ = false;
  int completion_tokens_ = 0;
  int tool_calls_ = 0;
  ChoiceDelta primed_;  // deltas from prime(), sent with the first token
};

}  // namespace ms::server
