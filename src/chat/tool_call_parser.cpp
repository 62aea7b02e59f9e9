// Tool-call formats, their detection, ids, and the OpenAI JSON shapes
// (the streaming state machine itself is in tool_call_stream.cpp).
#include "chat/tool_call_parser.h"

namespace ms {
namespace {

bool has(const std::string& s, std::string_view needle) { return s.find(needle) != std::string::npos; }

ToolCallFormat format_from_template(const std::string& t) {
  if (has(t, "START_ACTION")) return ToolCallFormat::kCohere;
  if (has(t, "<tool_call>")) {
    // Qwen3-Coder / GLM / Nemotron wrap XML-style calls (<function=..>,
    // <arg_key>) in the same tags: a different, unsupported format.
    if (has(t, "<function=") || has(t, "<arg_key>")) return ToolCallFormat::kNone;
    return ToolCallFormat::kHermes;
  }
  if (has(t, "<|python_tag|>")) return ToolCallFormat::kLlama3Json;
  // Llama 3.2 style: headers, tools, and the JSON call instruction.
  if (has(t, "<|start_header_id|>") && has(t, "tools") && has(t, "\"parameters\"")) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

// The template text(s) carried by tokenizer_config.json, joined.
std::string config_templates(const nlohmann::json& config) {
  if (!config.is_object()) return "";
  auto it = config.find("chat_template");
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  std::string all;
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (!entry.is_object()) continue;
      auto t = entry.find("template");
      if (t != entry.end() && t->is_string()) all += t->get<std::string>() + "\n";
    }
  }
  return all;
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone: return "none";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kCohere: return "cohere";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
  }
  return "none";
}

Result<ToolCallFormat> parse_tool_call_format(std::string_view name) {
  if (name == "none") return ToolCallFormat::kNone;
  if (name == "hermes" || name == "qwen") return ToolCallFormat::kHermes;
  if (name == "cohere" || name == "command") return ToolCallFormat::kCohere;
  if (name == "llama3_json" || name == "llama3") return ToolCallFormat::kLlama3Json;
  return invalid_argument("unknown tool-call format '" + std::string(name) +
                          "' (expected one of: none, hermes, cohere, llama3_json)");
}

ToolCallFormat detect_tool_call_format(const std::string& chat_template,
                                       const nlohmann::json& tokenizer_config) {
  std::string text = chat_template.empty() ? config_templates(tokenizer_config) : chat_template;
  ToolCallFormat f = format_from_template(text);
  if (f != ToolCallFormat::kNone) return f;
  // A template that never mentions tools cannot prompt for calls.
  if (!text.empty() && !has(text, "tool")) return ToolCallFormat::kNone;
  // Fall back on the vocabulary's added tokens.
  if (tokenizer_config.is_object()) {
    auto it = tokenizer_config.find("added_tokens_decoder");
    if (it != tokenizer_config.end() && it->is_object()) {
      bool hermes = false, cohere = false, llama = false;
      for (const auto& [id, tok] : it->items()) {
        if (!tok.is_object() || !tok.contains("content") || !tok["content"].is_string()) continue;
        const std::string& c = tok["content"].get_ref<const std::string&>();
        cohere |= c == "<|START_ACTION|>";
        hermes |= c == "<tool_call>";
        llama |= c == "<|python_tag|>";
      }
      if (cohere) return ToolCallFormat::kCohere;
      if (hermes) return ToolCallFormat::kHermes;
      if (llama) return ToolCallFormat::kLlama3Json;
    }
  }
  return ToolCallFormat::kNone;
}

bool prompt_opens_reasoning(ToolCallFormat format, std::string_view prompt) {
  if (format != ToolCallFormat::kCohere) return false;
  while (!prompt.empty() && (prompt.back() == ' ' || prompt.back() == '\n')) prompt.remove_suffix(1);
  constexpr std::string_view kOpen = "<|START_THINKING|>";
  return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

std::string ToolCallIdGenerator::next() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kAlnum[rng_() % 62]);
  return id;
}

nlohmann::json ToolCall::to_json() const {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

nlohmann::json ToolCallDelta::to_json() const {
  if (is_header()) {
    return {{"index", index},
            {"id", id},
            {"type", "function"},
            {"function", {{"name", name}, {"arguments", arguments}}}};
  }
  return {{"index", index}, {"function", {{"arguments", arguments}}}};
}

nlohmann::json ParsedMessage::tool_calls_json() const {
  nlohmann::json a = nlohmann::json::array();
  for (const ToolCall& c : tool_calls) a.push_back(c.to_json());
  return a;
}

void append_delta(ParsedMessage& message, const StreamDelta& delta) {
  message.content += delta.content;
  message.reasoning += delta.reasoning;
  for (const ToolCallDelta& d : delta.tool_calls) {
    if (d.index < 0) continue;
    if (static_cast<size_t>(d.index) >= message.tool_calls.size()) message.tool_calls.resize(d.index + 1);
    ToolCall& c = message.tool_calls[d.index];
    if (d.is_header()) {
      c.id = d.id;
      c.name = d.name;
    }
    c.arguments += d.arguments;
  }
}

ParsedMessage parse_tool_calls(ToolCallFormat format, std::string_view text, const ParserOptions& options) {
  ToolCallStreamParser parser(format, options);
  ParsedMessage message;
  append_delta(message, parser.feed(text));
  append_delta(message, parser.finish());
  return message;
}

}  // namespace ms
