// Responses API requests -> GenRequest, and the Response object; see responses_api.h.
#include "server/responses_api.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "server/request_fields.h"

namespace ms::server {
namespace {

const std::set<std::string>& handled_fields() {
  static const std::set<std::string> k = {
      "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "top_logprobs", "include",
      "tools", "tool_choice", "parallel_tool_calls", "stream", "stream_options", "store", "previous_response_id",
      "text", "reasoning", "metadata", "truncation",
      // megaserve sampling extensions, as on the chat endpoint
      "top_k", "min_p", "seed", "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias",
      "strict_max_tokens"};
  return k;
}

// Documented fields that change nothing here; the value is why.
const FieldReasons& ignored_fields() {
  static const FieldReasons k = {
      {"user", "abuse-detection tag"},
      {"safety_identifier", "abuse-detection tag"},
      {"prompt_cache_key", "prefix caching is automatic"},
      {"prompt_cache_retention", "prefix caching is automatic"},
      {"prompt_cache_options", "prefix caching is automatic"},
      {"service_tier", "there is one tier"},
      {"max_tool_calls", "limits built-in tools, which this server has none of"},
  };
  return k;
}

// Documented fields accepted only as null (or false): the feature is not here.
const FieldReasons& null_only_fields() {
  static const FieldReasons k = {
      {"background", "background responses are not supported"},
      {"conversation", "conversations are not supported; use previous_response_id"},
      {"prompt", "prompt templates are not supported"},
      {"context_management", "server-side compaction is not supported"},
      {"moderation", "moderation is not supported"},
      {"access_programs", "not supported"},
      {"image", "image generation is not supported"},
      {"background_options", "background responses are not supported"},
  };
  return k;
}

ApiError check_fields(const Json& body) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    if (handled_fields().count(k)) continue;
    bool known = false;
    MS_API_CHECK(check_documented_field(k, *it, ignored_fields(), null_only_fields(), &known));
    if (!known) return unsupported_field(k);
  }
  return no_error();
}

std::string at(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

// Text of a content value: a string, or parts of the given text types.
ApiError content_text(const Json& content, const std::string& where, Json* out) {
  if (content.is_string()) {
    *out = content;
    return no_error();
  }
  if (!content.is_array()) return type_error(where, "a string or an array of content parts", content);
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    std::string p = at(where, j);
    if (!part.is_object()) return type_error(p, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return bad_request("'" + p + ".type' must be a string", p + ".type");
    const std::string& t = type->get_ref<const std::string&>();
    const char* key = (t == "input_text" || t == "output_text" || t == "text") ? "text"
                      : t == "refusal"                                        ? "refusal"
                                                                              : nullptr;
    if (!key) {
      return bad_request("content part type '" + t + "' is not supported (only input_text / output_text)", p + ".type",
                         "unsupported_parameter");
    }
    auto v = part.find(key);
    if (v == part.end() || !v->is_string()) return bad_request("'" + p + "." + key + "' must be a string", p + "." + key);
    text += v->get<std::string>();
  }
  *out = text;
  return no_error();
}

// Builds chat messages from input items: an assistant message and the
// function calls after it are one assistant turn; reasoning items go to the
// next assistant turn's reasoning_content.
class InputConverter {
 public:
  InputConverter(const ResponseStore& store, Json* messages) : store_(store), out_(messages) {}

  ApiError add(const Json& item, const std::string& p, int depth = 0) {
    if (!item.is_object()) return type_error(p, "an object", item);
    std::string type = "message";
    if (auto t = item.find("type"); t != item.end() && !t->is_null()) {
      if (!t->is_string()) return type_error(p + ".type", "a string", *t);
      type = t->get<std::string>();
    }
    if (type == "message") return message(item, p);
    if (type == "function_call") return function_call(item, p);
    if (type == "function_call_output") return function_call_output(item, p);
    if (type == "reasoning") return reasoning(item, p);
    if (type == "item_reference" && depth == 0) {
      auto id = item.find("id");
      if (id == item.end() || !id->is_string()) return bad_request("'" + p + ".id' must be a string", p + ".id");
      std::optional<Json> found = store_.item(id->get<std::string>());
      if (!found) {
        return bad_request("Item with id '" + id->get<std::string>() + "' not found (responses are kept only when "
                           "'store' is true, in memory, until evicted or restarted)",
                           p + ".id", "item_not_found");
      }
      return add(*found, p, depth + 1);
    }
    return bad_request("input item type '" + type + "' is not supported (message, function_call, "
                       "function_call_output, reasoning, item_reference)",
                       p + ".type", "unsupported_parameter");
  }

  ApiError finish() { return flush(); }

 private:
  ApiError message(const Json& item, const std::string& p) {
    auto role = item.find("role");
    if (role == item.end() || !role->is_string()) return bad_request("'" + p + ".role' must be a string", p + ".role");
    std::string r = role->get<std::string>();
    static const std::set<std::string> kRoles = {"user", "assistant", "system", "developer"};
    if (!kRoles.count(r)) {
      return bad_request("'" + p + ".role' must be one of user, assistant, system, developer; got '" + r + "'",
                         p + ".role", "invalid_value");
    }
    auto c = item.find("content");
    if (c == item.end() || c->is_null()) return bad_request("'" + p + ".content' is required", p + ".content", "missing_required_parameter");
    Json text;
    MS_API_CHECK(content_text(*c, p + ".content", &text));
    if (r == "assistant") {
      open_turn();
      turn_["content"] = turn_["content"].get<std::string>() + text.get<std::string>();
      return no_error();
    }
    MS_API_CHECK(flush());
    out_->push_back(Json{{"role", r == "developer" ? "system" : r}, {"content", text}});
    return no_error();
  }

  ApiError function_call(const Json& item, const std::string& p) {
    auto call_id = item.find("call_id");
    auto name = item.find("name");
    auto args = item.find("arguments");
    if (call_id == item.end() || !call_id->is_string()) return bad_request("'" + p + ".call_id' must be a string", p + ".call_id");
    if (name == item.end() || !name->is_string()) return bad_request("'" + p + ".name' must be a string", p + ".name");
    if (args != item.end() && !args->is_null() && !args->is_string()) return type_error(p + ".arguments", "a string", *args);
    open_turn();
    Json fn = {{"name", *name}, {"arguments", args == item.end() || args->is_null() ? Json("{}") : *args}};
    calls_.push_back(Json{{"id", *call_id}, {"type", "function"}, {"function", fn}});
    call_where_.push_back(p);
    return no_error();
  }

  ApiError function_call_output(const Json& item, const std::string& p) {
    auto call_id = item.find("call_id");
    if (call_id == item.end() || !call_id->is_string()) return bad_request("'" + p + ".call_id' must be a string", p + ".call_id");
    auto o = item.find("output");
    if (o == item.end() || o->is_null()) return bad_request("'" + p + ".output' is required", p + ".output", "missing_required_parameter");
    Json text;
    MS_API_CHECK(content_text(*o, p + ".output", &text));
    MS_API_CHECK(flush());
    out_->push_back(Json{{"role", "tool"}, {"tool_call_id", *call_id}, {"content", text}});
    return no_error();
  }

  ApiError reasoning(const Json& item, const std::string& p) {
    std::string text;
    for (const char* key : {"content", "summary"}) {
      auto list = item.find(key);
      if (list == item.end() || list->is_null()) continue;
      if (!list->is_array()) return type_error(p + "." + key, "an array", *list);
      for (size_t j = 0; j < list->size(); ++j) {
        const Json& part = (*list)[j];
        auto t = part.is_object() ? part.find("text") : part.end();
        if (!part.is_object() || t == part.end() || !t->is_string()) {
          return bad_request("'" + at(p + "." + key, j) + ".text' must be a string", at(p + "." + key, j) + ".text");
        }
        if (!text.empty()) text += "\n";
        text += t->get<std::string>();
      }
      if (!text.empty()) break;  // the full text when there is one, else the summary
    }
    if (turn_open_ && (!calls_.empty() || !turn_["content"].get<std::string>().empty())) MS_API_CHECK(flush());
    reasoning_ += text;
    return no_error();
  }

  void open_turn() {
    if (turn_open_) return;
    turn_open_ = true;
    turn_ = Json{{"role", "assistant"}, {"content", ""}};
  }

  ApiError flush() {
    if (!turn_open_ && reasoning_.empty()) return no_error();
    open_turn();
    if (!calls_.empty()) {
      Json calls;
      MS_API_CHECK(normalize_tool_calls(calls_, call_where_.front(), &calls));
      turn_["tool_calls"] = calls;
    }
    if (!reasoning_.empty()) turn_["reasoning_content"] = reasoning_;
    out_->push_back(std::move(turn_));
    turn_open_ = false;
    turn_ = Json();
    calls_ = Json::array();
    call_where_.clear();
    reasoning_.clear();
    return no_error();
  }

  const ResponseStore& store_;
  Json* out_;
  bool turn_open_ = false;
  Json turn_;
  Json calls_ = Json::array();
  std::vector<std::string> call_where_;
  std::string reasoning_;
};

// Responses tools -> chat tools ({type, function: {...}}); chat-shaped ones pass.
ApiError convert_tools(const Json& tools, Json* out) {
  if (!tools.is_array()) return type_error("tools", "an array", tools);
  *out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    std::string p = at("tools", i);
    if (!t.is_object()) return type_error(p, "an object", t);
    auto type = t.find("type");
    if (type == t.end() || !type->is_string()) return bad_request("'" + p + ".type' must be a string", p + ".type");
    if (*type != "function") {
      return bad_request("tool type '" + type->get<std::string>() + "' is not supported (only function tools)",
                         p + ".type", "unsupported_parameter");
    }
    if (t.contains("function")) {
      out->push_back(t);
      continue;
    }
    Json fn = Json::object();
    for (const char* k : {"name", "description", "parameters", "strict"}) {
      if (auto v = t.find(k); v != t.end() && !v->is_null()) fn[k] = *v;
    }
    out->push_back(Json{{"type", "function"}, {"function", fn}});
  }
  return no_error();
}

// Responses tool_choice -> chat tool_choice; allowed_tools also narrows the
// names a call may use (*allowed, empty: all).
ApiError convert_tool_choice(const Json& choice, Json* out, std::vector<std::string>* allowed) {
  if (choice.is_string()) {
    *out = choice;
    return no_error();
  }
  if (!choice.is_object()) return type_error("tool_choice", "a string or an object", choice);
  auto type = choice.find("type");
  if (type == choice.end() || !type->is_string()) return bad_request("'tool_choice.type' must be a string", "tool_choice.type");
  if (*type == "function") {
    auto name = choice.find("name");
    if (name == choice.end() || !name->is_string()) {
      if (choice.contains("function")) {
        *out = choice;
        return no_error();
      }
      return bad_request("'tool_choice.name' must be a string", "tool_choice.name");
    }
    *out = Json{{"type", "function"}, {"function", {{"name", *name}}}};
    return no_error();
  }
  if (*type == "allowed_tools") {
    auto mode = choice.find("mode");
    if (mode == choice.end() || !mode->is_string() || (*mode != "auto" && *mode != "required")) {
      return bad_request("'tool_choice.mode' must be 'auto' or 'required'", "tool_choice.mode", "invalid_value");
    }
    auto list = choice.find("tools");
    if (list == choice.end() || !list->is_array()) return bad_request("'tool_choice.tools' must be an array", "tool_choice.tools");
    for (size_t i = 0; i < list->size(); ++i) {
      const Json& t = (*list)[i];
      auto name = t.is_object() ? t.find("name") : t.end();
      if (!t.is_object() || t.value("type", "") != "function" || name == t.end() || !name->is_string()) {
        return bad_request("'" + at("tool_choice.tools", i) + "' must be {\"type\": \"function\", \"name\": ...}",
                           at("tool_choice.tools", i), "invalid_value");
      }
      allowed->push_back(name->get<std::string>());
    }
    *out = *mode;
    return no_error();
  }
  return bad_request("tool_choice type '" + type->get<std::string>() + "' is not supported (only function tools)",
                     "tool_choice.type", "unsupported_parameter");
}

ApiError parse_sampling(const Json& body, const ProtocolLimits& limits, GenRequest* r) {
  SamplingParams& s = r->sampling;
  std::optional<int64_t> v;
  MS_API_CHECK(get_int(body, "max_output_tokens", 1, INT32_MAX, &v));
  if (v) {
    r->max_tokens = static_cast<int>(*v);
    r->max_tokens_param = "max_output_tokens";
  }
  limits.sampling_defaults.apply(&s);  // the request's own fields below win
  MS_API_CHECK(get_float(body, "temperature", 0, 2, false, false, &s.temperature));
  MS_API_CHECK(get_float(body, "top_p", 0, 1, true, false, &s.top_p));
  MS_API_CHECK(get_float(body, "min_p", 0, 1, false, false, &s.min_p));
  MS_API_CHECK(get_float(body, "presence_penalty", -2, 2, false, false, &s.presence_penalty));
  MS_API_CHECK(get_float(body, "frequency_penalty", -2, 2, false, false, &s.frequency_penalty));
  MS_API_CHECK(get_float(body, "repetition_penalty", 0, 2, true, false, &s.repetition_penalty));
  v.reset();
  MS_API_CHECK(get_int(body, "top_k", -1, INT32_MAX, &v));
  if (v) s.top_k = *v < 0 ? 0 : static_cast<int>(*v);
  if (const Json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) return type_error("seed", "an integer", *seed);
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  }
  if (const Json* lb = field(body, "logit_bias")) MS_API_CHECK(parse_logit_bias(*lb, limits.vocab_size, &s.logit_bias));
  return get_bool(body, "strict_max_tokens", &r->strict_max_tokens);
}

ApiError parse_include(const Json& body, ResponsesRequest* rq) {
  const Json* inc = field(body, "include");
  if (!inc) return no_error();
  if (!inc->is_array()) return type_error("include", "an array of strings", *inc);
  static const std::set<std::string> kKnown = {
      "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
      "message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs",
      "reasoning.encrypted_content", "message.output_text.logprobs"};
  for (size_t i = 0; i < inc->size(); ++i) {
    const Json& e = (*inc)[i];
    if (!e.is_string() || !kKnown.count(e.get<std::string>())) {
      return bad_request("'" + at("include", i) + "' must be one of the documented includables", at("include", i),
                         "invalid_value");
    }
    // The others name outputs of hosted tools (not here) or encrypted
    // reasoning (this server's reasoning is plain text in the item).
    if (e == "message.output_text.logprobs") rq->logprobs = true;
  }
  return no_error();
}

// text: {format, verbosity}; format goes where chat's response_format goes.
ApiError parse_text(const Json& body, GenRequest* r) {
  const Json* text = field(body, "text");
  if (!text) return no_error();
  if (!text->is_object()) return type_error("text", "an object", *text);
  for (auto it = text->begin(); it != text->end(); ++it) {
    if (it.key() != "format" && it.key() != "verbosity") return unsupported_field("text." + it.key());
  }
  if (const Json* v = field(*text, "verbosity"); v && !v->is_string()) return type_error("text.verbosity", "a string", *v);
  const Json* f = field(*text, "format");
  if (!f) return no_error();
  if (!f->is_object()) return type_error("text.format", "an object", *f);
  // Responses puts the schema fields next to `type`; chat nests them in json_schema.
  Json rf = *f;
  if (f->value("type", "") == "json_schema") {
    Json schema = *f;
    schema.erase("type");
    rf = Json{{"type", "json_schema"}, {"json_schema", schema}};
  }
  return parse_response_format(rf, "text.format", r);
}

}  // namespace

ApiError parse_responses_request(const Json& body, const ProtocolLimits& limits, const ResponseStore& store,
                                 GenRequest* r, ResponsesRequest* rq) {
  if (!body.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_type");
  r->endpoint = Endpoint::kResponses;
  MS_API_CHECK(check_fields(body));
  MS_API_CHECK(get_string(body, "model", &r->model));
  MS_API_CHECK(parse_sampling(body, limits, r));
  MS_API_CHECK(parse_include(body, rq));
  std::optional<int64_t> top;
  MS_API_CHECK(get_int(body, "top_logprobs", 0, limits.max_logprobs, &top));
  r->logprobs = rq->logprobs;
  r->sampling.logprobs = rq->logprobs ? static_cast<int>(top.value_or(0)) : -1;
  MS_API_CHECK(get_bool(body, "stream", &r->stream));
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) return type_error("stream_options", "an object", *so);
    if (!r->stream) return bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it.key() != "include_obfuscation") return unsupported_field("stream_options." + it.key());
      if (!it->is_null() && !it->is_boolean()) return type_error("stream_options.include_obfuscation", "a boolean", *it);
    }
  }
  MS_API_CHECK(get_bool(body, "store", &rq->store));
  MS_API_CHECK(get_bool(body, "parallel_tool_calls", &r->parallel_tool_calls));
  if (const Json* m = field(body, "metadata"); m && !m->is_object()) return type_error("metadata", "an object", *m);
  if (const Json* t = field(body, "truncation")) {
    if (*t != "auto" && *t != "disabled") return bad_request("'truncation' must be 'auto' or 'disabled'", "truncation", "invalid_value");
  }
  for (const char* k : {"user", "safety_identifier", "prompt_cache_key", "service_tier"}) {
    if (const Json* v = field(body, k); v && !v->is_string()) return type_error(k, "a string", *v);
  }
  if (const Json* re = field(body, "reasoning")) {
    if (!re->is_object()) return type_error("reasoning", "an object", *re);
    if (const Json* effort = field(*re, "effort")) {
      if (!effort->is_string()) return type_error("reasoning.effort", "a string", *effort);
      r->chat_template_kwargs["reasoning_effort"] = *effort;
    }
  }
  MS_API_CHECK(parse_text(body, r));

  // The conversation: the previous response's, then this input.
  std::string instructions;
  MS_API_CHECK(get_string(body, "instructions", &instructions));
  std::string prev;
  MS_API_CHECK(get_string(body, "previous_response_id", &prev));
  if (!prev.empty()) {
    auto stored = store.get(prev);
    if (!stored) {
      return bad_request("Previous response with id '" + prev + "' not found (responses are kept only when 'store' "
                         "is true, in memory, until evicted or restarted).",
                         "previous_response_id", "previous_response_not_found");
    }
    rq->history = stored->messages;
  }
  const Json* input = field(body, "input");
  if (!input && prev.empty()) return bad_request("'input' is required", "input", "missing_required_parameter");
  if (input) {
    if (input->is_string()) {
      rq->history.push_back(Json{{"role", "user"}, {"content", *input}});
    } else if (input->is_array()) {
      InputConverter conv(store, &rq->history);
      for (size_t i = 0; i < input->size(); ++i) MS_API_CHECK(conv.add((*input)[i], at("input", i)));
      MS_API_CHECK(conv.finish());
    } else {
      return type_error("input", "a string or an array of input items", *input);
    }
  }
  if (rq->history.empty()) return bad_request("'input' must not be empty", "input", "invalid_value");
  r->messages = Json::array();
  if (!instructions.empty()) r->messages.push_back(Json{{"role", "system"}, {"content", instructions}});
  for (const Json& m : rq->history) r->messages.push_back(m);

  // Tools.
  Json tools_chat = nullptr, choice_chat = nullptr;
  std::vector<std::string> allowed;
  if (const Json* t = field(body, "tools")) MS_API_CHECK(convert_tools(*t, &tools_chat));
  if (const Json* c = field(body, "tool_choice")) MS_API_CHECK(convert_tool_choice(*c, &choice_chat, &allowed));
  MS_API_CHECK(set_tools(tools_chat.is_null() ? nullptr : &tools_chat, choice_chat.is_null() ? nullptr : &choice_chat, r));
  if (!allowed.empty()) {
    for (const std::string& n : allowed) {
      if (std::find(r->tool_choice.tool_names.begin(), r->tool_choice.tool_names.end(), n) == r->tool_choice.tool_names.end()) {
        return bad_request("tool_choice.tools names function '" + n + "', which is not in tools", "tool_choice.tools",
                           "invalid_value");
      }
    }
    r->tool_choice.tool_names = allowed;
  }

  // What the Response object repeats (OpenAI's field order).
  Json& e = rq->echo;
  e["instructions"] = instructions.empty() ? Json(nullptr) : Json(instructions);
  e["max_output_tokens"] = r->max_tokens ? Json(*r->max_tokens) : Json(nullptr);
  e["metadata"] = field(body, "metadata") ? body["metadata"] : Json::object();
  e["parallel_tool_calls"] = r->parallel_tool_calls;
  e["previous_response_id"] = prev.empty() ? Json(nullptr) : Json(prev);
  e["reasoning"] = Json{{"effort", r->chat_template_kwargs.value("reasoning_effort", Json(nullptr))}, {"summary", nullptr}};
  e["service_tier"] = "default";
  e["store"] = rq->store;
  e["temperature"] = r->sampling.temperature;
  Json text = Json{{"format", Json{{"type", "text"}}}, {"verbosity", "medium"}};
  if (const Json* t = field(body, "text")) {
    if (const Json* f = field(*t, "format")) text["format"] = *f;
    if (const Json* v = field(*t, "verbosity")) text["verbosity"] = *v;
  }
  e["text"] = text;
  e["tool_choice"] = field(body, "tool_choice") ? body["tool_choice"] : Json("auto");
  e["tools"] = field(body, "tools") ? body["tools"] : Json::array();
  e["top_logprobs"] = top.value_or(0);
  e["top_p"] = r->sampling.top_p;
  e["truncation"] = field(body, "truncation") ? body["truncation"] : Json("disabled");
  e["user"] = field(body, "user") ? body["user"] : Json(nullptr);
  return no_error();
}

Json responses_usage(int input_tokens, int output_tokens, int cached_tokens, int reasoning_tokens) {
  Json u = Json::object();
  u["input_tokens"] = input_tokens;
  u["input_tokens_details"] = Json{{"cached_tokens", cached_tokens}};
  u["output_tokens"] = output_tokens;
  u["output_tokens_details"] = Json{{"reasoning_tokens", reasoning_tokens}};
  u["total_tokens"] = input_tokens + output_tokens;
  return u;
}

Json response_object(const std::string& id, int64_t created_at, const std::string& model, const ResponsesRequest& rq,
                     const char* status, const Json& output, const Json& usage, const Json& error,
                     const Json& incomplete_details) {
  // OpenAI's field order: instructions and max_output_tokens before model,
  // the rest of the echo after output.
  Json j = Json::object();
  j["id"] = id;
  j["object"] = "response";
  j["created_at"] = created_at;
  j["status"] = status;
  j["background"] = false;
  j["error"] = error;
  j["incomplete_details"] = incomplete_details;
  for (const char* k : {"instructions", "max_output_tokens"}) j[k] = rq.echo.value(k, Json(nullptr));
  j["model"] = model;
  j["output"] = output;
  for (auto it = rq.echo.begin(); it != rq.echo.end(); ++it) {
    if (!j.contains(it.key())) j[it.key()] = it.value();
  }
  j["usage"] = usage;
  return j;
}

StoredResponse stored_response(const Json& response, const ResponsesRequest& rq) {
  StoredResponse s;
  s.response = response;
  s.messages = rq.history;
  Json conv = Json::array();
  const ResponseStore none(0, 0);  // output items never reference others
  InputConverter converter(none, &conv);
  for (const Json& item : response["output"]) {
    if (item.contains("id") && item["id"].is_string()) s.items[item["id"].get<std::string>()] = item;
    converter.add(item, "output");
  }
  converter.finish();
  for (Json& m : conv) s.messages.push_back(std::move(m));
  return s;
}

}  // namespace ms::server
