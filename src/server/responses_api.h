// The OpenAI Responses API (POST /v1/responses): request parsing into the
// same GenRequest the chat path runs (so templates, tool calling, sampling
// and context handling are shared), and the Response object.
//
// Supported, with OpenAI's wire format (field names checked against the
// `openai` npm package's types):
//   input       a string, or items: messages (roles user / assistant / system /
//               developer; input_text / output_text / refusal parts),
//               function_call, function_call_output, reasoning (its text goes
//               back to the template as the turn's reasoning_content), and
//               item_reference to an output item of a stored response
//   instructions  a system message in front (not carried to the next turn)
//   tools       flat function tools {type: "function", name, description,
//               parameters, strict}; tool_choice none / auto / required /
//               {type: "function", name} / {type: "allowed_tools", ...};
//               parallel_tool_calls
//   max_output_tokens, temperature, top_p, top_logprobs with include
//   ["message.output_text.logprobs"], stream (typed events with
//   sequence_number: responses_stream.h), text.format (to the same field as
//   chat's response_format), reasoning.effort (to the template)
//   store / previous_response_id: responses are kept in a bounded in-memory
//   store (response_store.h) unless store is false; previous_response_id
//   continues its conversation (input, output) with the new input
// Accepted and ignored (no effect here): metadata (echoed), user,
// safety_identifier, prompt_cache_key / retention / options, service_tier,
// max_tool_calls (built-in tools only), truncation, text.verbosity,
// reasoning.summary, stream_options.include_obfuscation. Everything else is a
// 400 naming it: hosted tools, images / files / audio, background mode,
// conversations, prompt templates.
#pragma once

#include <string>

#include "server/api_error.h"
#include "server/openai_protocol.h"
#include "server/response_store.h"

namespace ms::server {

// What a Responses request carries besides its GenRequest.
struct ResponsesRequest {
  bool store = true;
  bool logprobs = false;          // include has "message.output_text.logprobs"
  Json history = Json::array();   // earlier turns + this input, as chat messages (no instructions)
  Json echo = Json::object();     // request fields the Response object repeats, in OpenAI's order
};

// body -> gen (endpoint kResponses, messages with the instructions first) and
// rq. previous_response_id and item_reference are resolved through `store`.
ApiError parse_responses_request(const Json& body, const ProtocolLimits& limits, const ResponseStore& store,
                                 GenRequest* gen, ResponsesRequest* rq);

// The Response object: id, created_at, status ("in_progress", "completed",
// "incomplete", "failed"), the request echo, output items, usage (null while
// in progress), error and incomplete_details (null or objects).
Json response_object(const std::string& id, int64_t created_at, const std::string& model, const ResponsesRequest& rq,
                     const char* status, const Json& output, const Json& usage, const Json& error,
                     const Json& incomplete_details);

// {"input_tokens", "input_tokens_details": {"cached_tokens"}, "output_tokens",
//  "output_tokens_details": {"reasoning_tokens"}, "total_tokens"}.
Json responses_usage(int input_tokens, int output_tokens, int cached_tokens, int reasoning_tokens);

// The store entry of a finished response: its conversation continued by the
// output items (as chat messages), and the items by id.
StoredResponse stored_response(const Json& response, const ResponsesRequest& rq);

}  // namespace ms::server
