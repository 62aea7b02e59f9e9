// Structured outputs at the API: `response_format` (json_object,
// json_schema) and strict tool arguments, turned into the grammar a request
// decodes under (SamplingParams::grammar).
//
// response_format (chat and completions):
//   {"type": "text"}                       unconstrained
//   {"type": "json_object"}                any JSON object
//   {"type": "json_schema", "json_schema": {"name", "schema", "strict"?, "description"?}}
// `strict` is accepted either way: the schema is always enforced (the output
// parses and validates whether or not the client asked for strict). A schema
// outside the supported subset (sampling/json_schema.h) is a 400 naming the
// keyword. Together with tools it is refused unless tool_choice is "none":
// the grammar would otherwise forbid the model's tool calls.
//
// Tools: with tool_choice "required" or a named function, and the called
// function(s) declared `"strict": true`, the call's arguments are constrained
// to the function's `parameters` schema (non-strict functions in a required
// choice get "any JSON object"); the call's envelope after the forced prefix
// (tool_call_choice.h) is part of the grammar, and the output is exactly one
// call. Without a strict function nothing changes (the prefix alone, as before).
//
// Chat output envelope: a Cohere-format model answers inside
// <|START_RESPONSE|> ... <|END_RESPONSE|>, so a constrained plain answer gets
// <|START_RESPONSE|> appended to the prompt and the JSON is the whole reply.
//
// StructuredOutputCache: compiled grammars (with their token-mask caches)
// keyed by what they were built from, least recently used first out, shared
// by every request thread (one mutex); the token vocabulary is built once per
// tokenizer, on first use.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/tool_call_choice.h"
#include "chat/tool_call_parser.h"
#include "sampling/json_schema.h"
#include "sampling/token_mask.h"
#include "server/api_error.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {

struct ResponseFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema };
  Kind kind = Kind::kText;
  std::string name;  // json_schema.name
  Json schema;       // json_schema.schema
  bool strict = false;
};

// Validates a request's `response_format` value (not null).
ApiError parse_response_format(const Json& value, ResponseFormat* out);

class StructuredOutputCache {
 public:
  explicit StructuredOutputCache(size_t capacity = 64) : capacity_(capacity) {}
  // The compiled grammar of `alts` over `tok`'s vocabulary (compiled and its
  // masks precomputed on a miss, in the calling thread). InvalidArgument for
  // a schema outside the subset.
  Result<std::shared_ptr<CompiledGrammar>> get(const Tokenizer& tok, const std::vector<JsonAlternative>& alts);
  size_t size() const;

 private:
  std::shared_ptr<const TokenVocab> vocab_for(const Tokenizer& tok);
  const size_t capacity_;
  mutable std::mutex mu_;  // guards everything below
  const Tokenizer* vocab_tokenizer_ = nullptr;
  std::shared_ptr<const TokenVocab> vocab_;
  std::list<std::string> lru_;  // keys, most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<CompiledGrammar>, std::list<std::string>::iterator>> map_;
};

// What a request decodes under.
struct StructuredOutput {
  std::shared_ptr<CompiledGrammar> grammar;  // null: unconstrained
  std::string prompt_suffix;                 // appended to the (chat) prompt before generation
};

struct StructuredRequest {
  bool chat = true;
  ToolCallFormat model_format = ToolCallFormat::kNone;  // the model's tool-call / answer format
  bool tools_parsed = false;                            // tool calls are parsed from this reply
  const ResponseFormat* response_format = nullptr;
  const ToolChoice* tool_choice = nullptr;
  const Json* tools = nullptr;                          // the request's tools (null / array)
};

// Decides the grammar (if any) of one request; errors are 400s naming
// response_format or tools.
ApiError plan_structured_output(StructuredOutputCache& cache, const Tokenizer& tok, const StructuredRequest& req,
                                StructuredOutput* out);

}  // namespace ms::server
