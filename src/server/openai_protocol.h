// Parsing and validation of OpenAI request bodies (/v1/chat/completions,
// /v1/completions; /v1/responses in responses_api.h) into one GenRequest.
// Every top-level field is checked against an explicit allowlist: a field we
// do not implement is a 400 that names it, never silently ignored. Documented
// chat fields that change nothing this server produces (metadata, store,
// service_tier, prompt_cache_key, safety_identifier, verbosity, prediction,
// ...) are type-checked, logged at debug and ignored; fields whose non-null
// value asks for something not done here (audio, functions, web search) are
// accepted only as null. Types and ranges are checked here, before anything
// reaches the tokenizer or the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/tool_call_choice.h"
#include "sampling/sampling_params.h"
#include "server/api_error.h"
#include "server/generation_defaults.h"
#include "server/structured_output.h"

namespace ms::server {

enum class Endpoint { kChat, kCompletions, kResponses };

struct ProtocolLimits {
  int vocab_size = 0;     // token-id prompts and stop_token_ids must be below it (0: unchecked)
  int max_n = 16;
  int max_logprobs = 20;  // top_logprobs / logprobs upper bound
  int max_stop = 16;      // stop strings per request
  // Sampling fields a request leaves out (--generation-config, --override-generation-config).
  GenerationDefaults sampling_defaults;
};

struct PromptInput {
  std::string text;             // when !is_tokens
  std::vector<int32_t> tokens;  // when is_tokens
  bool is_tokens = false;
};

struct GenRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                 // "" if absent
  Json messages = Json::array();     // chat: normalized for the chat template
  Json tools;                        // chat: null or the request's tools array
  ToolChoice tool_choice;            // chat
  bool parallel_tool_calls = true;   // chat: false allows at most one call per reply
  std::vector<PromptInput> prompts;  // completions: one per prompt
  std::optional<int> max_tokens;     // max_tokens / max_completion_tokens / max_output_tokens
  std::string max_tokens_param = "max_tokens";  // the field max_tokens came from (for errors)
  // Extension: a max_tokens that does not fit the context is a 400 instead of
  // being clamped to what fits.
  bool strict_max_tokens = false;
  int n = 1;
  SamplingParams sampling;           // sampling.logprobs: -1 none, else top-k alternatives
  bool logprobs = false;             // any logprobs requested
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;                 // completions
  bool skip_special_tokens = true;
  bool add_generation_prompt = true; // chat
  Json chat_template_kwargs = Json::object();
  ResponseFormat response_format;    // structured_output.h
};

// body: the parsed JSON (any type; a non-object is a 400).
ApiError parse_chat_request(const Json& body, const ProtocolLimits& limits, GenRequest* out);
ApiError parse_completion_request(const Json& body, const ProtocolLimits& limits, GenRequest* out);

// response_format (chat) / text.format (Responses), named `param` in errors:
// {"type": "text"} is accepted; structured outputs are a 400 for now.
ApiError parse_response_format(const Json& rf, const std::string& param, GenRequest* r);

// Chat-shaped `tools` / `tool_choice` (null: absent) -> r->tools and
// r->tool_choice, validated (400 naming tools or tool_choice).
ApiError set_tools(const Json* tools, const Json* choice, GenRequest* r);

// OpenAI logit_bias {"token id": bias in [-100, 100]} -> sorted (id, bias).
ApiError parse_logit_bias(const Json& lb, int vocab_size, std::vector<std::pair<int32_t, float>>* out);

// Assistant tool_calls [{"id"?, "function": {"name", "arguments"}}] in the
// shape templates expect: arguments decoded to a mapping when they are JSON.
ApiError normalize_tool_calls(const Json& calls, const std::string& where, Json* out);

// Fits a request into the context (vLLM's wording for the error). A prompt
// that leaves no room for one token is a 400 naming prompt_param. Otherwise
// *max_tokens = `requested` (or `fallback` when absent) clamped to the room
// left, so generation ends with finish_reason "length" when it runs out;
// with `strict`, a requested value that does not fit is a 400 naming
// max_tokens_param instead.
ApiError fit_context(int prompt_tokens, std::optional<int> requested, int fallback, int max_model_len, bool strict,
                     const std::string& prompt_param, const std::string& max_tokens_param, int* max_tokens);

}  // namespace ms::server
