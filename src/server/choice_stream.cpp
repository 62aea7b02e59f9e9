#include "server/choice_stream.h"

#include <algorithm>

namespace ms::server {

ChoiceStream::ChoiceStream(const Tokenizer& tokenizer, ChoiceOptions options)
    : tokenizer_(&tokenizer),
      options_(std::move(options)),
      detok_(tokenizer, options_.skip_special),
      stop_(options_.stop) {
  if (options_.tool_format != ToolCallFormat::kNone) {
    parser_ = std::make_unique<ToolCallStreamParser>(options_.tool_format, options_.parser);
  }
}

void ChoiceStream::push_text(const std::string& text, ChoiceDelta* d) {
  if (text.empty()) return;
  if (!parser_) {
    d->content += text;
    return;
  }
  append_parsed(parser_->feed(text), d);
}

void ChoiceStream::append_parsed(const StreamDelta& s, ChoiceDelta* d) {
  d->content += s.content;
  d->reasoning += s.reasoning;
  for (const auto& tc : s.tool_calls) {
    if (tc.is_header()) ++tool_calls_;
    d->tool_calls.push_back(tc);
  }
}

void ChoiceStream::finish(const char* reason, ChoiceDelta* d) {
  if (parser_) append_parsed(parser_->finish(), d);
  finished_ = true;
  std::string r = reason;
  if (r == "stop" && tool_calls_ > 0) r = "tool_calls";
  d->finish_reason = r;
}

void ChoiceStream::prime(const std::string& text) { push_text(text, &primed_); }

bool ChoiceStream::listed(int32_t token) const {
  return options_.logprobs_special || !tokenizer_->is_special(token);
}

ChoiceDelta ChoiceStream::on_token(const TokenEvent& e) {
  ChoiceDelta d = std::move(primed_);
  primed_ = ChoiceDelta();
  if (finished_) return d;
  ++completion_tokens_;
  bool hidden = std::find(options_.hidden_ids.begin(), options_.hidden_ids.end(), e.token) !=
                options_.hidden_ids.end();
  if (!hidden && listed(e.token)) {
    TokenEvent shown = e;
    std::erase_if(shown.top, [&](const TokenLogprob& t) { return !listed(t.token); });
    d.tokens.push_back(std::move(shown));
  }
  if (hidden) return d;
  bool stopped = false;
  std::string released = stop_.feed(detok_.push(e.token), &stopped);
  push_text(released, &d);
  if (stopped) finish("stop", &d);
  else if (parser_ && parser_->saturated()) finish("stop", &d);  // the last allowed call is complete
  return d;
}

ChoiceDelta ChoiceStream::on_finish(const FinishEvent& e) {
  ChoiceDelta d = std::move(primed_);
  primed_ = ChoiceDelta();
  if (finished_) return d;
  bool stopped = false;
  push_text(stop_.feed(detok_.flush(), &stopped), &d);
  if (stopped) {
    finish("stop", &d);
    return d;
  }
  push_text(stop_.flush(), &d);
  switch (e.reason) {
    case FinishReason::kLength: finish("length", &d); break;
    case FinishReason::kError:
      finish("error", &d);
      d.error = e.error.is_ok() ? internal_error("generation failed") : e.error;
      break;
    default: finish("stop", &d); break;
  }
  return d;
}

}  // namespace ms::server
