// OpenAI `tools` / `tool_choice` validation (see tool_call_choice.h).
#include "chat/tool_call_choice.h"

#include <algorithm>

#include "chat/tool_call_parser.h"

namespace ms {
namespace {

Result<std::vector<std::string>> tool_names_of(const nlohmann::json& tools) {
  std::vector<std::string> names;
  if (tools.is_null()) return names;
  if (!tools.is_array()) return invalid_argument("'tools' must be an array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::json& t = tools[i];
    std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return invalid_argument(where + " must be an object");
    auto type = t.find("type");
    if (type == t.end() || !type->is_string() || *type != "function") {
      return invalid_argument(where + ".type must be \"function\"");
    }
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) return invalid_argument(where + ".function must be an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return invalid_argument(where + ".function.name must be a non-empty string");
    }
    auto params = fn->find("parameters");
    if (params != fn->end() && !params->is_object() && !params->is_null()) {
      return invalid_argument(where + ".function.parameters must be an object");
    }
    const std::string& n = name->get_ref<const std::string&>();
    if (std::find(names.begin(), names.end(), n) != names.end()) {
      return invalid_argument("duplicate tool name '" + n + "' in tools");
    }
    names.push_back(n);
  }
  return names;
}

}  // namespace

std::vector<std::string> ToolChoice::allowed_names() const {
  if (mode == Mode::kNamed) return {name};
  return tool_names;
}

Result<ToolChoice> resolve_tool_choice(const nlohmann::json& tools, const nlohmann::json& tool_choice) {
  ToolChoice choice;
  MS_ASSIGN_OR_RETURN(choice.tool_names, tool_names_of(tools));
  bool have_tools = !choice.tool_names.empty();

  if (tool_choice.is_null()) {
    choice.mode = have_tools ? ToolChoice::Mode::kAuto : ToolChoice::Mode::kNone;
    return choice;
  }
  if (tool_choice.is_string()) {
    const std::string& s = tool_choice.get_ref<const std::string&>();
    if (s == "none") {
      choice.mode = ToolChoice::Mode::kNone;
    } else if (s == "auto") {
      choice.mode = have_tools ? ToolChoice::Mode::kAuto : ToolChoice::Mode::kNone;
    } else if (s == "required") {
      if (!have_tools) return invalid_argument("tool_choice 'required' needs a non-empty 'tools' list");
      choice.mode = ToolChoice::Mode::kRequired;
    } else {
      return invalid_argument("tool_choice must be 'none', 'auto', 'required' or a function object, got '" + s + "'");
    }
    return choice;
  }
  if (!tool_choice.is_object()) return invalid_argument("tool_choice must be a string or an object");
  auto type = tool_choice.find("type");
  if (type == tool_choice.end() || !type->is_string() || *type != "function") {
    return invalid_argument("tool_choice.type must be \"function\"");
  }
  auto fn = tool_choice.find("function");
  if (fn == tool_choice.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
    return invalid_argument("tool_choice.function.name must be a string");
  }
  choice.name = (*fn)["name"].get<std::string>();
  if (std::find(choice.tool_names.begin(), choice.tool_names.end(), choice.name) == choice.tool_names.end()) {
    return invalid_argument("tool_choice names function '" + choice.name + "', which is not in tools");
  }
  choice.mode = ToolChoice::Mode::kNamed;
  return choice;
}

std::string forced_call_prefix(ToolCallFormat format, const ToolChoice& choice) {
  if (!choice.required()) return "";
  const bool named = choice.mode == ToolChoice::Mode::kNamed;
  const std::string name = nlohmann::json(choice.name).dump();  // quoted and escaped
  // Each prefix ends where byte-level pre-tokenizers split (after a marker,
  // a newline or a `":` punctuation run), so the prompt's tokens are the ones
  // the model would have produced itself; a trailing space or a lone `[`
  // would tokenize differently and derail it.
  switch (format) {
    case ToolCallFormat::kCohere:
      return named ? "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": " + name + ", \"parameters\":"
                   : "<|START_ACTION|>";
    case ToolCallFormat::kHermes:
      return named ? "<tool_call>\n{\"name\": " + name + ", \"arguments\":" : "<tool_call>\n";
    case ToolCallFormat::kLlama3Json:
      return named ? "{\"name\": " + name + ", \"parameters\":" : "{\"name\":";
    case ToolCallFormat::kNone:
      break;
  }
  return "";
}

}  // namespace ms
