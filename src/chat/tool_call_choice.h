// OpenAI `tools` / `tool_choice` validation for a chat completion request.
//
// resolve_tool_choice() checks the request and says what the server must do:
//   parse()    run a ToolCallStreamParser on the output (false: tools are off,
//              the output is plain content, no tool prompt should be rendered)
//   required() the reply must contain a call ("required"), or a call to
//              `name` (named choice). The server enforces it by prefilling:
//              forced_call_prefix() is appended to the prompt as if the model
//              had written it (the opening marker of a call, and for a named
//              choice the call up to its arguments), so the model continues
//              inside a call; the arguments themselves are not constrained.
// With tool_choice "none" the template is still given `tools` (OpenAI keeps
// them in context) but the output is not parsed.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ms {

struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kNamed };
  Mode mode = Mode::kNone;
  std::string name;                     // kNamed: the function that must be called
  std::vector<std::string> tool_names;  // every function in `tools`, in order

  bool parse() const { return mode != Mode::kNone; }
  bool required() const { return mode == Mode::kRequired || mode == Mode::kNamed; }
  // Names a call may use (ParserOptions::allowed_names): the named function,
  // else all tools.
  std::vector<std::string> allowed_names() const;
};

// `tools`: null/absent or an array of {"type": "function", "function":
// {"name", "description"?, "parameters"?}}. `tool_choice`: null/absent
// ("auto" if there are tools, else "none"), "none", "auto", "required", or
// {"type": "function", "function": {"name": ...}}. Errors are InvalidArgument
// with a message fit for the OpenAI error object (e.g. naming an unknown tool).
Result<ToolChoice> resolve_tool_choice(const nlohmann::json& tools, const nlohmann::json& tool_choice);

enum class ToolCallFormat;  // tool_call_parser.h

// Text that starts the assistant's reply when a call is required (empty when
// it is not, or the format is unknown): e.g. for Cohere actions and a named
// choice `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "NAME", "parameters":`.
// The server appends it to the prompt and feeds it to the reply's parser first.
std::string forced_call_prefix(ToolCallFormat format, const ToolChoice& choice);

}  // namespace ms
