// Builds a Responses API reply from one choice's deltas, as typed events and
// as the final Response object, so streamed and non-streamed replies agree.
//
// Output items, in the order the model wrote them: "reasoning" (plan text,
// content [{type: "reasoning_text"}]), "message" (one output_text part),
// "function_call" (call_id, name, arguments). The events, each with the
// next sequence_number (from 0), follow OpenAI's order:
//   response.created, response.in_progress
//   per item: response.output_item.added, then
//     message:   response.content_part.added, response.output_text.delta...,
//                response.output_text.done, response.content_part.done
//     reasoning: response.content_part.added, response.reasoning_text.delta...,
//                response.reasoning_text.done, response.content_part.done
//     function_call: response.function_call_arguments.delta...,
//                response.function_call_arguments.done
//   response.output_item.done
//   response.completed, response.incomplete (max_output_tokens), or
//   response.failed (error)
// SSE framing: "event: <type>\ndata: <json>\n\n"; no [DONE] (OpenAI sends none).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "server/choice_stream.h"
#include "server/responses_api.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {

class ResponseBuilder {
 public:
  using Sink = std::function<void(const Json& event)>;  // null: events are not needed
  ResponseBuilder(std::string id, int64_t created_at, std::string model, const ResponsesRequest& rq,
                  const Tokenizer& tok, Sink sink);

  void start();  // response.created, response.in_progress
  void add(const ChoiceDelta& d);
  // Closes the open item and returns the final Response. finish_reason
  // "length" makes it incomplete; `error` (non-empty) failed.
  Json finish(const std::string& finish_reason, const Json& usage, const std::string& error);
  int reasoning_tokens() const { return reasoning_tokens_; }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };
  void emit(Json event);
  void open(Kind kind, const ToolCallDelta* header);
  void close(const char* status);
  Json item_json(const char* status) const;
  Json part_json() const;

  std::string id_;
  int64_t created_at_;
  std::string model_;
  const ResponsesRequest& rq_;
  const Tokenizer& tok_;
  Sink sink_;
  int seq_ = 0;
  Json output_ = Json::array();
  // The open item.
  Kind kind_ = Kind::kNone;
  std::string item_id_, call_id_, name_, text_;
  Json logprobs_ = Json::array();
  int call_index_ = -1;  // the parser's index of the open call
  int reasoning_tokens_ = 0;
};

// "event: <type>\ndata: <json>\n\n".
std::string sse_typed_event(const Json& event);

// Prefixed random ids: "resp_", "msg_", "fc_", "rs_".
std::string random_item_id(const char* prefix);

}  // namespace ms::server
