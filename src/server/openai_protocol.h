// Parsing and validation of OpenAI request bodies (/v1/chat/completions,
// /v1/completions) into one GenRequest. Every top-level field is checked
// against an explicit allowlist: a field we do not implement is a 400 that
// names it, never silently ignored. Types and ranges are checked here, before
// anything reaches the tokenizer or the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/tool_call_choice.h"
#include "sampling/sampling_params.h"
#include "server/api_error.h"
#include "server/structured_output.h"

namespace ms::server {

enum class Endpoint { kChat, kCompletions };

struct ProtocolLimits {
  int vocab_size = 0;     // token-id prompts and stop_token_ids must be below it (0: unchecked)
  int max_n = 16;
  int max_logprobs = 20;  // top_logprobs / logprobs upper bound
  int max_stop = 16;      // stop strings per request
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
  std::vector<PromptInput> prompts;  // completions: one per prompt
  std::optional<int> max_tokens;     // max_tokens / max_completion_tokens
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

// The context-length check of a prompt + max_tokens, with vLLM's wording.
ApiError check_context_length(int prompt_tokens, int max_tokens, int max_model_len, bool max_tokens_given);

}  // namespace ms::server
