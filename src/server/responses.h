// OpenAI response JSON: non-streaming bodies, streaming chunks, usage and
// logprobs objects, and the SSE framing (`data: {json}\n\n`, `data: [DONE]`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/tool_call_parser.h"
#include "engine/request.h"
#include "server/api_error.h"
#include "server/choice_stream.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {

struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
  bool usage_null = false;  // stream_options.include_usage: every chunk carries "usage": null
};

std::string sse_event(const Json& j);  // "data: <json>\n\n"
std::string sse_done();                // "data: [DONE]\n\n"

Json usage_json(int prompt_tokens, int completion_tokens, int cached_tokens);

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
Json chat_logprobs_entries(const Tokenizer& tok, const std::vector<TokenEvent>& tokens);
// Completions (legacy): {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; text_offset
// counts from *offset, which is advanced by each token's text length.
Json completion_logprobs(const Tokenizer& tok, const std::vector<TokenEvent>& tokens, int* offset);

// Streaming chunks.
Json chat_role_chunk(const ResponseMeta& m, int index);
Json chat_delta_chunk(const ResponseMeta& m, int index, const ChoiceDelta& d, const Json& logprobs);
Json completion_chunk(const ResponseMeta& m, int index, const std::string& text, const Json& logprobs,
                      const Json& finish_reason);
Json usage_chunk(const ResponseMeta& m, const char* object, const Json& usage);

// Accumulates one choice's deltas for a non-streaming response.
struct ChoiceAccumulator {
  std::string content, reasoning;
  std::vector<ToolCall> tool_calls;
  std::vector<TokenEvent> tokens;
  std::string finish_reason = "stop";
  void add(const ChoiceDelta& d);
};

Json chat_choice_json(const Tokenizer& tok, int index, const ChoiceAccumulator& a, bool logprobs);
Json completion_choice_json(const Tokenizer& tok, int index, const std::string& echo_prefix,
                            const ChoiceAccumulator& a, bool logprobs);
Json chat_response(const ResponseMeta& m, Json choices, const Json& usage);
Json completion_response(const ResponseMeta& m, Json choices, const Json& usage);

}  // namespace ms::server
