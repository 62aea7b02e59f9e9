// Real-format model outputs with their expected parse, shared by the one-shot
// and the streaming tool-call tests.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "chat/tool_call_parser.h"

namespace ms::tool_call_test {

struct ExpectedCall {
  std::string name;
  std::string arguments;  // exact compact text
};

struct Case {
  std::string label;
  ToolCallFormat format;
  std::string text;
  std::string content;
  std::vector<ExpectedCall> calls;
  std::string reasoning;
  ParserOptions options;

  Case(std::string label_, ToolCallFormat format_, std::string text_, std::string content_,
       std::vector<ExpectedCall> calls_, std::string reasoning_ = "", ParserOptions options_ = {})
      : label(std::move(label_)), format(format_), text(std::move(text_)), content(std::move(content_)),
        calls(std::move(calls_)), reasoning(std::move(reasoning_)), options(std::move(options_)) {}
};

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

inline ParserOptions allow(std::vector<std::string> names) {
  ParserOptions o;
  o.allowed_names = std::move(names);
  return o;
}

inline ParserOptions at_most(int calls, std::vector<std::string> names = {}) {
  ParserOptions o = allow(std::move(names));
  o.max_calls = calls;
  return o;
}

inline ParserOptions no_calls() {
  ParserOptions o;
  o.calls_allowed = false;
  return o;
}

inline ParserOptions in_reasoning() {
  ParserOptions o;
  o.starts_in_reasoning = true;
  return o;
}

inline std::vector<Case> all_cases() {
  using F = ToolCallFormat;
  return {
      // ---------------------------------------------------------------- Hermes / Qwen
      {"hermes_single", F::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
       "", {{"get_weather", R"({"location":"Paris","unit":"celsius"})"}}},
      {"hermes_text_then_two_calls", F::kHermes,
       "Let me check both cities.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Tokyo\"}}\n</tool_call>",
       "Let me check both cities.",
       {{"get_weather", R"({"location":"Paris"})"}, {"get_weather", R"({"location":"Tokyo"})"}}},
      {"hermes_nested_braces_escapes_unicode", F::kHermes,
       "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.c\", \"code\": \"int f() { return \\\"}\\\"[0]; }\\n\","
       " \"s\": \"caf\\u00e9 \\ud83d\\ude00 \xC3\xA9\", \"nested\": {\"a\": [1, -2.5e3, {\"b\": \"}]\"}], \"t\": true, \"n\": null}}}\n</tool_call>",
       "",
       {{"write_file", "{\"path\":\"a.c\",\"code\":\"int f() { return \\\"}\\\"[0]; }\\n\",\"s\":\"caf\\u00e9 \\ud83d\\ude00 \xC3\xA9\","
                       "\"nested\":{\"a\":[1,-2.5e3,{\"b\":\"}]\"}],\"t\":true,\"n\":null}}"}}},
      {"hermes_no_arguments_key", F::kHermes, "<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>", "",
       {{"get_time", "{}"}}},
      {"hermes_empty_arguments", F::kHermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", "",
       {{"get_time", "{}"}}},
      {"hermes_arguments_before_name", F::kHermes,
       "<tool_call>{\"arguments\": {\"x\": [1, 2]}, \"name\": \"sum\"}</tool_call>", "", {{"sum", R"({"x":[1,2]})"}}},
      {"hermes_parameters_key_and_extra_keys", F::kHermes,
       "<tool_call>\n{\"id\": 7, \"name\": \"f\", \"parameters\": {\"k\": 0}, \"extra\": [\"}\"]}\n</tool_call>", "",
       {{"f", R"({"k":0})"}}},
      {"hermes_marker_inside_string", F::kHermes,
       "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"text\": \"<tool_call></tool_call>\"}}\n</tool_call>", "",
       {{"echo", R"({"text":"<tool_call></tool_call>"})"}}},
      {"hermes_raw_newline_in_string", F::kHermes,
       "<tool_call>\n{\"name\": \"run\", \"arguments\": {\"cmd\": \"ls\n\tpwd\"}}\n</tool_call>", "",
       {{"run", R"({"cmd":"ls\n\tpwd"})"}}},
      {"hermes_missing_closing_brace", F::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>", "", {{"f", R"({"a":1})"}}},
      {"hermes_missing_close_tag_at_end", F::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n", "",
       {{"f", R"({"a":1})"}}},
      {"hermes_missing_close_tag_then_next_call", F::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>", "",
       {{"f", "{}"}, {"g", "{}"}}},
      {"hermes_text_after_call", F::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\nDone, waiting for the result.",
       "Done, waiting for the result.", {{"f", "{}"}}},
      {"hermes_think_block_kept_in_content", F::kHermes,
       "<think>\nI should call the tool.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>",
       "<think>\nI should call the tool.\n</think>", {{"f", R"({"q":"x"})"}}},
      {"hermes_marker_lookalikes", F::kHermes, "Use <tool> or <tool_cal, a << b, <<tool_call and x < y.\n",
       "Use <tool> or <tool_cal, a << b, <<tool_call and x < y.\n", {}},
      // Malformed markup is dropped, never shown as content; the text around
      // it keeps one gap.
      {"hermes_malformed_not_json_dropped", F::kHermes, "Hi <tool_call>\nnot json\n</tool_call> bye", "Hi bye", {}},
      {"hermes_malformed_no_name_dropped", F::kHermes, "<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>", "", {}},
      {"hermes_malformed_name_not_string_dropped", F::kHermes, "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
       "", {}},
      {"hermes_malformed_arguments_not_object_dropped", F::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "", {}},
      {"hermes_malformed_stringified_not_object_dropped", F::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>", "", {}},
      {"hermes_malformed_then_text_no_closer_dropped", F::kHermes, "Ok.\n<tool_call>\nI will not call.", "Ok.", {}},
      {"hermes_stray_closer_stripped", F::kHermes, "Done.</tool_call>\n", "Done.", {}},
      {"hermes_stringified_arguments", F::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": \\\"x y\\\", \\\"b\\\": [1, 2]}\"}\n</tool_call>", "",
       {{"f", R"({"a":"x y","b":[1,2]})"}}},
      {"hermes_truncated_before_name_dropped", F::kHermes, "Sure.\n<tool_call>\n{\"na", "Sure.", {}},
      {"hermes_truncated_arguments", F::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"hel", "",
       {{"f", R"({"a":"hel)"}}},
      // After the announcement a syntax error cannot be taken back: the call
      // keeps what was streamed, the rest of its region is dropped.
      {"hermes_syntax_error_after_announcement", F::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1,, \"b\": 2}}</tool_call> ok", "ok",
       {{"f", R"({"a":1,)"}}},
      {"hermes_valid_then_malformed", F::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\noops\n</tool_call>", "",
       {{"f", "{}"}}},
      {"hermes_malformed_then_valid", F::kHermes,
       "<tool_call><tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "", {{"f", "{}"}}},
      {"hermes_unknown_name_dropped", F::kHermes, "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>", "", {},
       "", allow({"f"})},
      {"hermes_unknown_name_skipped_next_kept", F::kHermes,
       "<tool_call>{\"name\": \"rm\", \"arguments\": {\"p\": \"/\"}}</tool_call>\n"
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>",
       "", {{"f", R"({"a":1})"}}, "", allow({"f"})},
      {"hermes_max_one_call", F::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>\n"
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 2}}</tool_call> more text",
       "", {{"f", R"({"a":1})"}}, "", at_most(1)},
      {"hermes_no_calls_allowed", F::kHermes,
       "Let me see. <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "Let me see.", {}, "", no_calls()},
      {"hermes_plain_text_keeps_whitespace", F::kHermes, "  Hello,\n\nworld!\n", "  Hello,\n\nworld!\n", {}},
      // ---------------------------------------------------------------- Cohere
      {"cohere_plan_and_two_actions", F::kCohere,
       "<|START_THINKING|>I will look up the weather, then the time.<|END_THINKING|><|START_ACTION|>[\n"
       "    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}},\n"
       "    {\"tool_call_id\": \"1\", \"tool_name\": \"get_time\", \"parameters\": {}}\n]<|END_ACTION|>",
       "", {{"get_weather", R"({"location":"Paris"})"}, {"get_time", "{}"}}, "I will look up the weather, then the time."},
      {"cohere_response", F::kCohere, "<|START_RESPONSE|>It is 20\xC2\xB0" "C in Paris.<|END_RESPONSE|>",
       "It is 20\xC2\xB0" "C in Paris.", {}},
      {"cohere_prompt_opened_thinking", F::kCohere,
       "The user wants a file.<|END_THINKING|><|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"write\","
       " \"parameters\": {\"body\": \"{\\\"k\\\": [\\\"]\\\"]}\"}}]<|END_ACTION|>",
       "", {{"write", R"({"body":"{\"k\": [\"]\"]}"})"}}, "The user wants a file.", in_reasoning()},
      {"cohere_thinking_then_response", F::kCohere, "Easy.<|END_THINKING|><|START_RESPONSE|>Hi!<|END_RESPONSE|>", "Hi!", {},
       "Easy.", in_reasoning()},
      {"cohere_stringified_parameters", F::kCohere,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": \"{\\\"q\\\": 1}\"}]<|END_ACTION|>",
       "", {{"f", R"({"q":1})"}}},
      {"cohere_empty_action", F::kCohere, "<|START_ACTION|>[]<|END_ACTION|>", "", {}},
      {"cohere_missing_end_action", F::kCohere,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {\"a\": [1]}}]", "",
       {{"f", R"({"a":[1]})"}}},
      {"cohere_missing_object_brace", F::kCohere,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {}]<|END_ACTION|>", "", {{"f", "{}"}}},
      {"cohere_malformed_action_dropped", F::kCohere, "<|START_ACTION|>[not json]<|END_ACTION|>", "", {}},
      {"cohere_malformed_no_tool_name_dropped", F::kCohere,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"parameters\": {}}]<|END_ACTION|>", "", {}},
      {"cohere_valid_then_malformed_element", F::kCohere,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {}}, {\"x\": 1}]<|END_ACTION|>",
       "", {{"f", "{}"}}},
      {"cohere_missing_comma_dropped", F::kCohere,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {}} {\"tool_call_id\": \"1\"}]"
       "<|END_ACTION|>",
       "", {{"f", "{}"}}},
      {"cohere_cut_off_before_name_dropped", F::kCohere,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_na", "", {}},
      {"cohere_unknown_between_known", F::kCohere,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {\"a\": 1}},"
       " {\"tool_call_id\": \"1\", \"tool_name\": \"rm\", \"parameters\": {\"a\": [\"}\"]}},"
       " {\"tool_call_id\": \"2\", \"tool_name\": \"f\", \"parameters\": {\"a\": 3}}]<|END_ACTION|>",
       "", {{"f", R"({"a":1})"}, {"f", R"({"a":3})"}}, "", allow({"f"})},
      {"cohere_max_one_call", F::kCohere,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {}},"
       " {\"tool_call_id\": \"1\", \"tool_name\": \"g\", \"parameters\": {}}]<|END_ACTION|>",
       "", {{"f", "{}"}}, "", at_most(1)},
      {"cohere_no_calls_allowed_then_response", F::kCohere,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {}}]<|END_ACTION|>"
       "<|START_RESPONSE|>Paris.<|END_RESPONSE|>",
       "Paris.", {}, "", no_calls()},
      {"cohere_plain_text_no_markers", F::kCohere, "Just text.", "Just text.", {}},
      // ---------------------------------------------------------------- Llama 3 JSON
      {"llama3_single", F::kLlama3Json, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco\"}}", "",
       {{"get_weather", R"({"city":"San Francisco"})"}}},
      {"llama3_python_tag_arguments", F::kLlama3Json,
       "<|python_tag|>{\"name\": \"search\", \"arguments\": {\"q\": \"a;b {c}\"}}", "", {{"search", R"({"q":"a;b {c}"})"}}},
      {"llama3_several_semicolon", F::kLlama3Json,
       "{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}};", "",
       {{"a", R"({"x":1})"}, {"b", "{}"}}},
      {"llama3_type_key_and_leading_ws", F::kLlama3Json,
       "\n\n{\"type\": \"function\", \"name\": \"now\", \"parameters\": {}}\n", "", {{"now", "{}"}}},
      {"llama3_json_answer_is_content", F::kLlama3Json, "{\"name\": \"John\", \"age\": 30}", "{\"name\": \"John\", \"age\": 30}",
       {}},
      {"llama3_plain_text", F::kLlama3Json, "The answer is {42}.", "The answer is {42}.", {}},
      {"llama3_builtin_python_call_dropped", F::kLlama3Json, "<|python_tag|>brave_search.call(query=\"x\")", "", {}},
      {"llama3_no_calls_bare_json_is_content", F::kLlama3Json, "{\"name\": \"f\", \"parameters\": {}}",
       "{\"name\": \"f\", \"parameters\": {}}", {}, "", no_calls()},
      {"llama3_unknown_name_is_content", F::kLlama3Json, "{\"name\": \"John\", \"parameters\": {}}",
       "{\"name\": \"John\", \"parameters\": {}}", {}, "", allow({"get_weather"})},
      {"llama3_truncated_name", F::kLlama3Json, "{\"name\": \"get_wea", "{\"name\": \"get_wea", {}},
      // ---------------------------------------------------------------- none
      {"none_passthrough", F::kNone, "  <tool_call>{\"name\": \"f\"}</tool_call>\n\n",
       "  <tool_call>{\"name\": \"f\"}</tool_call>\n\n", {}},
  };
}

}  // namespace ms::tool_call_test
