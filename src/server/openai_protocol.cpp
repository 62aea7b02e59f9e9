// Request parsing and validation; see openai_protocol.h.
#include "server/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/json_parse.h"
#include "core/log.h"
#include "sampling/sampler.h"
#include "server/request_fields.h"

namespace ms::server {

const char* json_type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

ApiError type_error(const std::string& param, const char* want, const Json& v) {
  return bad_request("'" + param + "' must be " + want + ", got " + json_type_name(v), param, "invalid_type");
}

ApiError range_error(const std::string& param, const std::string& range, const std::string& got) {
  return bad_request("'" + param + "' must be " + range + ", got " + got, param, "invalid_value");
}

ApiError unsupported_field(const std::string& param, const std::string& why) {
  return bad_request("Unsupported parameter: '" + param + "' is not supported by this server" +
                         (why.empty() ? "" : " (" + why + ")"),
                     param, "unsupported_parameter");
}

ApiError check_documented_field(const std::string& key, const Json& value, const FieldReasons& ignored,
                                const FieldReasons& null_only, bool* known) {
  *known = true;
  if (auto ig = ignored.find(key); ig != ignored.end()) {
    if (!value.is_null()) {
      MS_LOG(Debug) << "request field '" << key << "' accepted and ignored: " << ig->second;
    }
    return no_error();
  }
  if (auto no = null_only.find(key); no != null_only.end()) {
    if (value.is_null() || (value.is_boolean() && !value.get<bool>())) return no_error();
    return unsupported_field(key, no->second);
  }
  *known = false;
  return no_error();
}

const Json* field(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError get_bool(const Json& body, const char* key, bool* out) {
  const Json* v = field(body, key);
  if (!v) return no_error();
  if (!v->is_boolean()) return type_error(key, "a boolean", *v);
  *out = v->get<bool>();
  return no_error();
}

ApiError get_string(const Json& body, const char* key, std::string* out) {
  const Json* v = field(body, key);
  if (!v) return no_error();
  if (!v->is_string()) return type_error(key, "a string", *v);
  *out = v->get<std::string>();
  return no_error();
}

ApiError get_int(const Json& body, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const Json* v = field(body, key);
  if (!v) return no_error();
  if (!v->is_number_integer()) return type_error(key, "an integer", *v);
  int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v->get<int64_t>();
  if (x < lo || x > hi) {
    return range_error(key, "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", std::to_string(x));
  }
  *out = x;
  return no_error();
}

namespace {

std::string num_str(double v) { return Json(v).dump(); }

}  // namespace

ApiError get_float(const Json& body, const char* key, double lo, double hi, bool lo_open, bool hi_open,
                   float* out) {
  const Json* v = field(body, key);
  if (!v) return no_error();
  if (!v->is_number()) return type_error(key, "a number", *v);
  double x = v->get<double>();
  bool bad = !std::isfinite(x) || (lo_open ? x <= lo : x < lo) || (hi_open ? x >= hi : x > hi);
  if (bad) {
    std::string range = std::string(lo_open ? "(" : "[") + num_str(lo) + ", " + num_str(hi) + (hi_open ? ")" : "]");
    return range_error(key, "in " + range, num_str(x));
  }
  *out = static_cast<float>(x);
  return no_error();
}

namespace {

// Fields both endpoints accept.
const std::set<std::string>& common_fields() {
  static const std::set<std::string> k = {
      "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "n",
      "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos", "stream", "stream_options",
      "user", "logprobs", "skip_special_tokens", "logit_bias", "best_of", "strict_max_tokens"};
  return k;
}
const std::set<std::string>& chat_fields() {
  static const std::set<std::string> k = {"messages", "max_completion_tokens", "top_logprobs", "tools",
                                          "tool_choice", "parallel_tool_calls", "response_format",
                                          "add_generation_prompt", "chat_template_kwargs", "reasoning_effort",
                                          "modalities"};
  return k;
}
const std::set<std::string>& completion_fields() {
  static const std::set<std::string> k = {"prompt", "echo", "suffix", "response_format"};
  return k;
}

// Documented OpenAI chat fields that change nothing this server produces:
// accepted (type-checked), logged at debug, and ignored. The value is why.
const FieldReasons& ignored_chat_fields() {
  static const FieldReasons k = {
      {"metadata", "stored-completion tags; completions are not stored"},
      {"store", "completions are not stored"},
      {"service_tier", "there is one tier"},
      {"prompt_cache_key", "prefix caching is automatic"},
      {"prompt_cache_retention", "prefix caching is automatic"},
      {"prompt_cache_options", "prefix caching is automatic"},
      {"safety_identifier", "abuse-detection tag"},
      {"verbosity", "a hint for OpenAI's models; not a sampling parameter"},
      {"prediction", "predicted outputs only speed up decoding; the output is the same"},
  };
  return k;
}

// Documented fields whose non-null values ask for something this server does
// not do: null is the default and accepted, anything else is a 400 saying why.
const FieldReasons& null_only_chat_fields() {
  static const FieldReasons k = {
      {"audio", "audio output is not supported"},
      {"functions", "use 'tools'"},
      {"function_call", "use 'tool_choice'"},
      {"web_search_options", "web search is not supported"},
      {"moderation", "moderation is not supported"},
  };
  return k;
}

ApiError check_allowlist(const Json& body, const std::set<std::string>& extra, bool chat) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    if (common_fields().count(k) || extra.count(k)) continue;
    bool known = false;
    if (chat) MS_API_CHECK(check_documented_field(k, *it, ignored_chat_fields(), null_only_chat_fields(), &known));
    if (!known) return unsupported_field(k);
  }
  return no_error();
}

// Type checks of the ignored fields (a wrong type is still a client bug).
ApiError check_ignored_types(const Json& body) {
  static const char* kStrings[] = {"service_tier", "prompt_cache_key", "prompt_cache_retention", "safety_identifier",
                                   "verbosity"};
  for (const char* k : kStrings) {
    if (const Json* v = field(body, k); v && !v->is_string()) return type_error(k, "a string", *v);
  }
  for (const char* k : {"metadata", "prediction", "prompt_cache_options"}) {
    if (const Json* v = field(body, k); v && !v->is_object()) return type_error(k, "an object", *v);
  }
  bool store = false;
  return get_bool(body, "store", &store);
}

}  // namespace

ApiError parse_logit_bias(const Json& lb, int vocab_size, std::vector<std::pair<int32_t, float>>* out) {
  if (!lb.is_object()) return type_error("logit_bias", "an object mapping token ids to biases", lb);
  if (lb.size() > size_t(kMaxLogitBias)) {
    return range_error("logit_bias", "at most " + std::to_string(kMaxLogitBias) + " tokens", std::to_string(lb.size()));
  }
  out->clear();
  for (auto it = lb.begin(); it != lb.end(); ++it) {
    const std::string& key = it.key();
    std::string p = "logit_bias." + key;
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (...) {
      used = 0;
    }
    if (used != key.size() || key.empty() || id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      return bad_request("'logit_bias' keys must be token ids in [0, " + std::to_string(vocab_size) + "), got '" + key + "'",
                         "logit_bias", "invalid_value");
    }
    if (!it->is_number()) return type_error(p, "a number", *it);
    double b = it->get<double>();
    if (!std::isfinite(b) || b < -kLogitBiasLimit || b > kLogitBiasLimit) {
      return range_error(p, "in [-100, 100]", num_str(b));
    }
    out->emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  std::sort(out->begin(), out->end());
  for (size_t i = 1; i < out->size(); ++i) {
    if ((*out)[i].first == (*out)[i - 1].first) {
      return bad_request("'logit_bias' names token " + std::to_string((*out)[i].first) + " twice", "logit_bias",
                         "invalid_value");
    }
  }
  return no_error();
}

namespace {

ApiError parse_common(const Json& body, const ProtocolLimits& limits, GenRequest* r) {
  if (const Json* m = field(body, "model")) {
    if (!m->is_string()) return type_error("model", "a string", *m);
    r->model = m->get<std::string>();
  }
  std::optional<int64_t> v;
  MS_API_CHECK(get_int(body, "max_tokens", 1, INT32_MAX, &v));
  if (v) {
    r->max_tokens = static_cast<int>(*v);
    r->max_tokens_param = "max_tokens";
  }
  SamplingParams& s = r->sampling;
  limits.sampling_defaults.apply(&s);  // the request's own fields below win
  MS_API_CHECK(get_float(body, "temperature", 0, 2, false, false, &s.temperature));
  MS_API_CHECK(get_float(body, "top_p", 0, 1, true, false, &s.top_p));
  v.reset();
  MS_API_CHECK(get_int(body, "top_k", -1, INT32_MAX, &v));
  if (v) s.top_k = *v < 0 ? 0 : static_cast<int>(*v);
  MS_API_CHECK(get_float(body, "min_p", 0, 1, false, false, &s.min_p));
  MS_API_CHECK(get_float(body, "presence_penalty", -2, 2, false, false, &s.presence_penalty));
  MS_API_CHECK(get_float(body, "frequency_penalty", -2, 2, false, false, &s.frequency_penalty));
  MS_API_CHECK(get_float(body, "repetition_penalty", 0, 2, true, false, &s.repetition_penalty));
  if (const Json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) return type_error("seed", "an integer", *seed);
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  }
  v.reset();
  MS_API_CHECK(get_int(body, "n", 1, limits.max_n, &v));
  if (v) r->n = static_cast<int>(*v);
  if (const Json* bo = field(body, "best_of")) {
    if (!bo->is_number_integer() || bo->get<int64_t>() != r->n) {
      return bad_request("'best_of' is not supported (only best_of == n)", "best_of", "unsupported_parameter");
    }
  }
  if (const Json* lb = field(body, "logit_bias")) MS_API_CHECK(parse_logit_bias(*lb, limits.vocab_size, &s.logit_bias));
  MS_API_CHECK(get_bool(body, "strict_max_tokens", &r->strict_max_tokens));
  MS_API_CHECK(get_bool(body, "ignore_eos", &s.ignore_eos));
  MS_API_CHECK(get_bool(body, "skip_special_tokens", &r->skip_special_tokens));
  MS_API_CHECK(get_bool(body, "stream", &r->stream));
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) return type_error("stream_options", "an object", *so);
    if (!r->stream) {
      return bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    }
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it.key() == "include_usage") {
        if (it->is_null()) continue;
        if (!it->is_boolean()) return type_error("stream_options.include_usage", "a boolean", *it);
        r->include_usage = it->get<bool>();
      } else if (it.key() == "include_obfuscation") {
        // Obfuscation only pads chunks with random characters against
        // side-channel length attacks on a remote API: never added here.
        if (!it->is_null() && !it->is_boolean()) return type_error("stream_options.include_obfuscation", "a boolean", *it);
      } else if (it.key() == "continuous_usage_stats") {
        return bad_request("'stream_options.continuous_usage_stats' is not supported",
                           "stream_options.continuous_usage_stats", "unsupported_parameter");
      } else {
        return bad_request("Unsupported parameter: 'stream_options." + it.key() + "'", "stream_options." + it.key(),
                           "unsupported_parameter");
      }
    }
  }
  if (const Json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) return type_error("stop[" + std::to_string(i) + "]", "a string", (*stop)[i]);
        r->stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      return type_error("stop", "a string or an array of strings", *stop);
    }
    if (static_cast<int>(r->stop.size()) > limits.max_stop) {
      return range_error("stop", "at most " + std::to_string(limits.max_stop) + " strings",
                         std::to_string(r->stop.size()));
    }
    for (const auto& s : r->stop) {
      if (s.empty()) return bad_request("'stop' strings must not be empty", "stop", "invalid_value");
    }
  }
  if (const Json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) return type_error("stop_token_ids", "an array of integers", *ids);
    for (size_t i = 0; i < ids->size(); ++i) {
      const Json& t = (*ids)[i];
      std::string p = "stop_token_ids[" + std::to_string(i) + "]";
      if (!t.is_number_integer()) return type_error(p, "an integer", t);
      int64_t id = t.get<int64_t>();
      if (id < 0 || (limits.vocab_size > 0 && id >= limits.vocab_size)) {
        return range_error(p, "a token id in [0, " + std::to_string(limits.vocab_size) + ")", std::to_string(id));
      }
      r->stop_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  if (const Json* u = field(body, "user")) {
    if (!u->is_string()) return type_error("user", "a string", *u);
  }
  return no_error();
}

// Content: a string, null, or an array of {"type": "text", "text": ...} parts,
// which are joined (the templates we serve take text only).
ApiError normalize_content(const Json& content, const std::string& where, Json* out) {
  if (content.is_null() || content.is_string()) {
    *out = content;
    return no_error();
  }
  if (!content.is_array()) return type_error(where, "a string or an array of content parts", content);
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    std::string p = where + "[" + std::to_string(j) + "]";
    if (!part.is_object()) return type_error(p, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return bad_request("'" + p + ".type' must be a string", p + ".type");
    // A refusal part (assistant history) is text the model wrote.
    const char* key = *type == "text" ? "text" : *type == "refusal" ? "refusal" : nullptr;
    if (!key) {
      return bad_request("content part type '" + type->get<std::string>() + "' is not supported (only 'text')",
                         p + ".type", "unsupported_parameter");
    }
    auto t = part.find(key);
    if (t == part.end() || !t->is_string()) {
      return bad_request("'" + p + "." + key + "' must be a string", p + "." + key);
    }
    text += t->get<std::string>();
  }
  *out = text;
  return no_error();
}

ApiError parse_messages(const Json& body, GenRequest* r) {
  const Json* msgs = field(body, "messages");
  if (!msgs) return bad_request("'messages' is required", "messages", "missing_required_parameter");
  if (!msgs->is_array()) return type_error("messages", "an array", *msgs);
  if (msgs->empty()) return bad_request("'messages' must not be empty", "messages", "invalid_value");
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  // What clients send back from an earlier response: reasoning under either
  // name (vLLM / DeepSeek "reasoning_content", OpenRouter / newer vLLM
  // "reasoning"), and the null or empty audio / function_call / annotations
  // of a message object returned as is.
  static const std::set<std::string> kKeys = {"role",    "content",           "name",      "tool_calls",   "tool_call_id",
                                              "refusal", "reasoning_content", "reasoning", "function_call", "audio",
                                              "annotations"};
  r->messages = Json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const Json& m = (*msgs)[i];
    std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return type_error(p, "an object", m);
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!kKeys.count(it.key())) {
        return bad_request("Unsupported parameter: '" + p + "." + it.key() + "'", p + "." + it.key(),
                           "unsupported_parameter");
      }
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return bad_request("'" + p + ".role' must be a string", p + ".role");
    std::string rs = role->get<std::string>();
    if (!kRoles.count(rs)) {
      return bad_request("'" + p + ".role' must be one of system, developer, user, assistant, tool; got '" + rs + "'",
                         p + ".role", "invalid_value");
    }
    Json out = Json::object();
    out["role"] = rs == "developer" ? "system" : rs;
    Json content = nullptr;
    if (auto c = m.find("content"); c != m.end()) MS_API_CHECK(normalize_content(*c, p + ".content", &content));
    if (auto a = m.find("audio"); a != m.end() && !a->is_null()) {
      return unsupported_field(p + ".audio", "audio is not supported");
    }
    if (auto a = m.find("annotations"); a != m.end() && !a->is_null() && !a->is_array()) {
      return type_error(p + ".annotations", "an array", *a);
    }
    // The legacy function_call of an assistant message is one tool call.
    Json legacy_calls = Json(nullptr);
    if (auto fc = m.find("function_call"); fc != m.end() && !fc->is_null()) {
      if (rs != "assistant") return bad_request("'" + p + ".function_call' is only allowed on assistant messages", p + ".function_call");
      legacy_calls = Json::array({Json{{"type", "function"}, {"function", *fc}}});
    }
    bool has_calls = false;
    auto tc = m.find("tool_calls");
    const Json* calls_in = tc != m.end() && !tc->is_null() ? &*tc : legacy_calls.is_null() ? nullptr : &legacy_calls;
    if (calls_in) {
      if (rs != "assistant") return bad_request("'" + p + ".tool_calls' is only allowed on assistant messages", p + ".tool_calls");
      Json calls;
      MS_API_CHECK(normalize_tool_calls(*calls_in, p + (calls_in == &legacy_calls ? ".function_call" : ".tool_calls"), &calls));
      has_calls = !calls.empty();
      out["content"] = content.is_null() ? Json("") : content;
      if (has_calls) out["tool_calls"] = calls;
    } else {
      if (content.is_null() && rs != "assistant") {
        return bad_request("'" + p + ".content' is required", p + ".content", "missing_required_parameter");
      }
      out["content"] = content.is_null() ? Json("") : content;
    }
    if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null()) {
      if (!id->is_string()) return type_error(p + ".tool_call_id", "a string", *id);
      out["tool_call_id"] = *id;
    } else if (rs == "tool") {
      return bad_request("'" + p + ".tool_call_id' is required for tool messages", p + ".tool_call_id",
                         "missing_required_parameter");
    }
    if (auto n = m.find("name"); n != m.end() && !n->is_null()) {
      if (!n->is_string()) return type_error(p + ".name", "a string", *n);
      out["name"] = *n;
    }
    for (const char* rk : {"reasoning_content", "reasoning"}) {
      auto rc = m.find(rk);
      if (rc == m.end() || rc->is_null()) continue;
      if (!rc->is_string()) return type_error(p + "." + rk, "a string", *rc);
      if (rs != "assistant") return bad_request("'" + p + "." + rk + "' is only allowed on assistant messages", p + "." + rk);
      if (!out.contains("reasoning_content")) out["reasoning_content"] = *rc;
    }
    r->messages.push_back(std::move(out));
  }
  return no_error();
}

}  // namespace

ApiError normalize_tool_calls(const Json& calls, const std::string& where, Json* out) {
  if (!calls.is_array()) return type_error(where, "an array", calls);
  Json res = Json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const Json& c = calls[k];
    std::string p = where + "[" + std::to_string(k) + "]";
    if (!c.is_object()) return type_error(p, "an object", c);
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) return bad_request("'" + p + ".function' must be an object", p + ".function");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) {
      return bad_request("'" + p + ".function.name' must be a string", p + ".function.name");
    }
    Json args = Json::object();
    auto a = fn->find("arguments");
    if (a != fn->end() && !a->is_null()) {
      if (a->is_string()) {
        // Templates expect a mapping (transformers' convention); keep the text if it is not JSON.
        // Bounded like the body: the template walks what is parsed here.
        auto parsed = parse_ordered_json(a->get<std::string>());
        if (!parsed.is_ok() && is_json_too_deep(parsed.status())) {
          return bad_request("'" + p + ".function.arguments': " + parsed.status().message(),
                             p + ".function.arguments", "json_too_deep");
        }
        args = parsed.is_ok() ? std::move(parsed.value()) : *a;
      } else if (a->is_object()) {
        args = *a;
      } else {
        return type_error(p + ".function.arguments", "a string", *a);
      }
    }
    Json call = Json::object();
    if (auto id = c.find("id"); id != c.end() && id->is_string()) call["id"] = *id;
    call["type"] = "function";
    call["function"] = Json{{"name", *name}, {"arguments", args}};
    res.push_back(call);
  }
  *out = res;
  return no_error();
}

ApiError parse_response_format(const Json& rf, const std::string& param, GenRequest* r) {
  ApiError e = parse_response_format(rf, &r->response_format);  // structured_output.h
  // Errors name chat's field; the Responses API's is text.format.
  const std::string chat = "response_format";
  if (!e.ok() && param != chat && e.param.rfind(chat, 0) == 0) e.param = param + e.param.substr(chat.size());
  return e;
}

ApiError parse_chat_request(const Json& body, const ProtocolLimits& limits, GenRequest* r) {
  if (!body.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_type");
  r->endpoint = Endpoint::kChat;
  MS_API_CHECK(check_allowlist(body, chat_fields(), true));
  MS_API_CHECK(check_ignored_types(body));
  MS_API_CHECK(parse_common(body, limits, r));
  std::optional<int64_t> v;
  MS_API_CHECK(get_int(body, "max_completion_tokens", 1, INT32_MAX, &v));
  if (v) {
    r->max_tokens = static_cast<int>(*v);
    r->max_tokens_param = "max_completion_tokens";
  }
  bool lp = false;
  MS_API_CHECK(get_bool(body, "logprobs", &lp));
  v.reset();
  MS_API_CHECK(get_int(body, "top_logprobs", 0, limits.max_logprobs, &v));
  if (v && !lp) return bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  r->logprobs = lp;
  r->sampling.logprobs = lp ? static_cast<int>(v.value_or(0)) : -1;
  MS_API_CHECK(parse_messages(body, r));
  MS_API_CHECK(get_bool(body, "add_generation_prompt", &r->add_generation_prompt));
  if (const Json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) return type_error("chat_template_kwargs", "an object", *kw);
    r->chat_template_kwargs = *kw;
  }
  if (const Json* rf = field(body, "response_format")) MS_API_CHECK(parse_response_format(*rf, "response_format", r));
  MS_API_CHECK(get_bool(body, "parallel_tool_calls", &r->parallel_tool_calls));
  // Templates that know it (gpt-oss and others) read it, as in vLLM.
  if (const Json* re = field(body, "reasoning_effort")) {
    if (!re->is_string()) return type_error("reasoning_effort", "a string", *re);
    if (!r->chat_template_kwargs.contains("reasoning_effort")) r->chat_template_kwargs["reasoning_effort"] = *re;
  }
  if (const Json* mod = field(body, "modalities")) {
    if (!mod->is_array()) return type_error("modalities", "an array of strings", *mod);
    for (const Json& m : *mod) {
      if (m != "text") return unsupported_field("modalities", "only [\"text\"] output");
    }
  }
  return set_tools(field(body, "tools"), field(body, "tool_choice"), r);
}

ApiError set_tools(const Json* tools, const Json* choice, GenRequest* r) {
  r->tools = tools ? *tools : Json(nullptr);
  nlohmann::json tools_j = tools ? nlohmann::json::parse(tools->dump()) : nlohmann::json(nullptr);
  nlohmann::json choice_j = choice ? nlohmann::json::parse(choice->dump()) : nlohmann::json(nullptr);
  auto tc = resolve_tool_choice(tools_j, choice_j);
  if (!tc.is_ok()) {
    bool about_choice = tc.status().message().find("tool_choice") != std::string::npos;
    return bad_request(tc.status().message(), about_choice ? "tool_choice" : "tools", "invalid_value");
  }
  r->tool_choice = tc.value();
  if (r->tools.is_array() && r->tools.empty()) r->tools = nullptr;
  return no_error();
}

ApiError parse_completion_request(const Json& body, const ProtocolLimits& limits, GenRequest* r) {
  if (!body.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_type");
  r->endpoint = Endpoint::kCompletions;
  MS_API_CHECK(check_allowlist(body, completion_fields(), false));
  MS_API_CHECK(parse_common(body, limits, r));
  std::optional<int64_t> v;
  MS_API_CHECK(get_int(body, "logprobs", 0, limits.max_logprobs, &v));
  r->logprobs = v.has_value();
  r->sampling.logprobs = v ? static_cast<int>(*v) : -1;
  MS_API_CHECK(get_bool(body, "echo", &r->echo));
  if (const Json* rf = field(body, "response_format")) MS_API_CHECK(parse_response_format(*rf, "response_format", r));
  if (const Json* sfx = field(body, "suffix")) {
    if (!sfx->is_string() || !sfx->get<std::string>().empty()) {
      return bad_request("'suffix' is not supported", "suffix", "unsupported_parameter");
    }
  }
  const Json* p = field(body, "prompt");
  if (!p) return bad_request("'prompt' is required", "prompt", "missing_required_parameter");
  auto token_list = [&](const Json& a, const std::string& where, PromptInput* out) -> ApiError {
    out->is_tokens = true;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].is_number_integer()) return type_error(where + "[" + std::to_string(i) + "]", "a token id", a[i]);
      int64_t id = a[i].get<int64_t>();
      if (id < 0 || (limits.vocab_size > 0 && id >= limits.vocab_size)) {
        return range_error(where + "[" + std::to_string(i) + "]",
                           "a token id in [0, " + std::to_string(limits.vocab_size) + ")", std::to_string(id));
      }
      out->tokens.push_back(static_cast<int32_t>(id));
    }
    if (out->tokens.empty()) return bad_request("'" + where + "' must not be empty", where, "invalid_value");
    return no_error();
  };
  if (p->is_string()) {
    r->prompts.push_back({p->get<std::string>(), {}, false});
  } else if (p->is_array()) {
    if (p->empty()) return bad_request("'prompt' must not be empty", "prompt", "invalid_value");
    const Json& first = (*p)[0];
    if (first.is_number_integer()) {
      PromptInput in;
      MS_API_CHECK(token_list(*p, "prompt", &in));
      r->prompts.push_back(std::move(in));
    } else {
      for (size_t i = 0; i < p->size(); ++i) {
        const Json& e = (*p)[i];
        std::string where = "prompt[" + std::to_string(i) + "]";
        if (e.is_string() && first.is_string()) {
          r->prompts.push_back({e.get<std::string>(), {}, false});
        } else if (e.is_array() && first.is_array()) {
          PromptInput in;
          MS_API_CHECK(token_list(e, where, &in));
          r->prompts.push_back(std::move(in));
        } else {
          return type_error(where, first.is_array() ? "an array of token ids" : "a string", e);
        }
      }
    }
  } else {
    return type_error("prompt", "a string, an array of strings, or token ids", *p);
  }
  if (static_cast<int>(r->prompts.size()) * r->n > 64) {
    return range_error("prompt", "at most 64 prompts x n", std::to_string(r->prompts.size() * r->n));
  }
  return no_error();
}

ApiError fit_context(int prompt_tokens, std::optional<int> requested, int fallback, int max_model_len, bool strict,
                     const std::string& prompt_param, const std::string& max_tokens_param, int* max_tokens) {
  const int wanted = requested.value_or(fallback);
  auto too_long = [&](const std::string& param) {
    std::string msg = "This model's maximum context length is " + std::to_string(max_model_len) +
                      " tokens. However, you requested " + std::to_string(int64_t(prompt_tokens) + wanted) +
                      " tokens (" + std::to_string(prompt_tokens) + " in the messages, " + std::to_string(wanted) +
                      " in the completion). Please reduce the length of the messages or completion.";
    return bad_request(msg, param, "context_length_exceeded");
  };
  if (prompt_tokens >= max_model_len) return too_long(prompt_param);
  const int room = max_model_len - prompt_tokens;
  if (wanted > room && requested && strict) return too_long(max_tokens_param);
  *max_tokens = std::min(wanted, room);
  return no_error();
}

}  // namespace ms::server
