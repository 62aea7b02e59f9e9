// Tool-call parsing: from model output text to OpenAI `tool_calls`.
//
// Three output formats, one per model family:
//   kHermes     Qwen / Hermes: text, then <tool_call>\n{"name": .., "arguments": {..}}\n</tool_call> ...
//   kCohere     Command-A / R7B / North Mini Code: <|START_THINKING|>plan<|END_THINKING|>
//               <|START_ACTION|>[{"tool_call_id": "0", "tool_name": .., "parameters": {..}}, ..]<|END_ACTION|>
//               or <|START_RESPONSE|>answer<|END_RESPONSE|>
//   kLlama3Json Llama 3.x: the message is {"name": .., "parameters": {..}} (or "arguments"),
//               optionally after <|python_tag|>, several separated by ';'
//
// One state machine serves both interfaces: ToolCallStreamParser is fed text
// deltas and emits OpenAI-style deltas; parse_tool_calls() feeds the whole text
// at once and accumulates, so the two always agree. Guarantees:
//   - Text that may still turn out to be part of a call (a suffix that could
//     start a marker, a call whose name is not known yet) is held back; content
//     never contains text of an accepted call.
//   - A call is announced (index, id, type, name) once its name is decoded and
//     its arguments have begun; after that its arguments are streamed as
//     compact JSON (whitespace outside strings dropped, key order and escapes
//     kept). The fragments concatenated equal ToolCall::arguments.
//   - Tool-call markup never reaches content. A call region opened by a
//     marker (<tool_call>, <|START_ACTION|>, <|python_tag|>) that turns out
//     malformed before its call was announced (not JSON, no name, stream
//     ended) is dropped up to the region's closing marker (</tool_call>,
//     <|END_ACTION|>; the end of the output for <|python_tag|>) or the next
//     marker; so is the rest of a region whose announced call hit a syntax
//     error. A well-formed call to a name not in ParserOptions::allowed_names
//     is skipped by itself: the calls after it still count. Only Llama 3's
//     bare JSON (no marker) can be an answer rather than a call: when it does
//     not parse as an allowed call it is content, as written.
//   - After a call was announced it cannot be taken back: if generation stops
//     inside it (max_tokens) its arguments stay truncated, as OpenAI's do with
//     finish_reason "length".
//   - ParserOptions::calls_allowed false (tool_choice "none"): every call
//     region is dropped; max_calls > 0 (parallel_tool_calls false: 1): once
//     that many calls are complete, saturated() turns true and the rest of
//     the output is dropped.
//   - A missing closing brace of the call object is forgiven, and so are
//     stringified arguments ("arguments": "{\"a\": 1}"): decoded, and
//     announced only once the string is complete.
//   - Whitespace right next to a marker or a call is dropped from content.
// Cohere plan text (<|START_THINKING|>..<|END_THINKING|>) goes to `reasoning`,
// not content. The markers must reach the parser: detokenize with special
// tokens shown (<|START_ACTION|>, <|python_tag|> are special tokens).
// No exception escapes this API.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ms {

enum class ToolCallFormat { kNone, kHermes, kCohere, kLlama3Json };

// "none", "hermes", "cohere", "llama3_json".
const char* tool_call_format_name(ToolCallFormat format);
// For the CLI flag: "none", "hermes" (alias "qwen"), "cohere" (alias "command"),
// "llama3_json" (alias "llama3"); anything else is InvalidArgument listing them.
Result<ToolCallFormat> parse_tool_call_format(std::string_view name);
// Picks the format from the chat template text (or, if it is empty, from
// tokenizer_config["chat_template"], string or list of {name, template}), then
// from the added tokens in tokenizer_config["added_tokens_decoder"]:
// START_ACTION -> cohere; <tool_call> -> hermes (but none when the calls
// inside are XML-style, <function=..> / <arg_key>, as in Qwen3-Coder and GLM:
// not supported yet); <|python_tag|>, or Llama 3 headers plus a JSON
// "parameters" instruction -> llama3_json; else none.
ToolCallFormat detect_tool_call_format(const std::string& chat_template,
                                       const nlohmann::json& tokenizer_config);
// True when the rendered prompt leaves the model inside a reasoning block, so
// its output starts with plan text (Cohere prompts ending in <|START_THINKING|>).
// Pass the result as ParserOptions::starts_in_reasoning.
bool prompt_opens_reasoning(ToolCallFormat format, std::string_view prompt);

// OpenAI-style call ids, "call_" + 24 alphanumerics, deterministic per seed.
class ToolCallIdGenerator {
 public:
  explicit ToolCallIdGenerator(uint64_t seed) : rng_(seed) {}
  std::string next();

 private:
  std::mt19937_64 rng_;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // compact JSON object text
  // {"id", "type": "function", "function": {"name", "arguments"}}
  nlohmann::json to_json() const;
};

// One element of an OpenAI delta's `tool_calls`. The first delta of a call
// carries id and name (and arguments, maybe ""); later ones only arguments.
struct ToolCallDelta {
  int index = 0;
  std::string id;    // non-empty only in the call's first delta
  std::string name;  // non-empty only in the call's first delta
  std::string arguments;
  bool is_header() const { return !id.empty(); }
  // {"index", "id", "type", "function": {"name", "arguments"}} or {"index", "function": {"arguments"}}
  nlohmann::json to_json() const;
};

// What one feed()/finish() produced; any part may be empty. Within one
// StreamDelta a call has at most one element (header and fragments merged).
struct StreamDelta {
  std::string content;
  std::string reasoning;  // Cohere plan text; "reasoning_content" in vLLM's API
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

struct ParsedMessage {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  // The `tool_calls` array of an OpenAI assistant message.
  nlohmann::json tool_calls_json() const;
};

// Folds a delta into a message (what a client does with a stream).
void append_delta(ParsedMessage& message, const StreamDelta& delta);

struct ParserOptions {
  uint64_t id_seed = 0;  // seeds ToolCallIdGenerator
  // If non-empty, a call to any other name is not a call (given back as
  // content). Recommended for kLlama3Json, whose calls look like JSON answers.
  std::vector<std::string> allowed_names;
  // The output begins inside a reasoning block (see prompt_opens_reasoning).
  bool starts_in_reasoning = false;
  // false: no call is accepted; call regions are dropped (tool_choice "none").
  bool calls_allowed = true;
  // > 0: at most this many calls; the output after the last one is dropped.
  int max_calls = 0;
};

class ToolCallStreamParser {
 public:
  // kNone: everything is content, passed through unchanged.
  explicit ToolCallStreamParser(ToolCallFormat format, ParserOptions options = {});
  ~ToolCallStreamParser();
  ToolCallStreamParser(ToolCallStreamParser&&) noexcept;
  ToolCallStreamParser& operator=(ToolCallStreamParser&&) noexcept;

  // Feeds the next piece of output (any split, even inside a UTF-8 character:
  // an incomplete trailing character is held until completed).
  StreamDelta feed(std::string_view text);
  // End of output: releases held text (as content if it was not a call).
  // Call once; feed() after finish() is ignored.
  StreamDelta finish();
  // ParserOptions::max_calls calls are complete: nothing more will come out.
  bool saturated() const;
  // Call regions dropped so far (malformed, not allowed, over max_calls).
  int dropped_calls() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// One-shot: same as feeding `text` to a ToolCallStreamParser and finishing.
ParsedMessage parse_tool_calls(ToolCallFormat format, std::string_view text,
                               const ParserOptions& options = {});

}  // namespace ms
