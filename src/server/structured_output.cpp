// response_format / strict tools -> grammar; see structured_output.h.
#include "server/structured_output.h"

#include "sampling/vocab_from_tokenizer.h"
#include "server/request_fields.h"

namespace ms::server {
namespace {

ApiError unknown_key(const std::string& param, const std::string& key) {
  return bad_request("Unsupported parameter: '" + param + "." + key + "' is not supported by this server",
                     param + "." + key, "unsupported_parameter");
}

// The text that closes a call of `format` after its arguments object.
const char* call_closing(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kCohere:
      return "}]";
    case ToolCallFormat::kHermes:
      return "}\n</tool_call>";
    case ToolCallFormat::kLlama3Json:
      return "}";
    case ToolCallFormat::kNone:
      break;
  }
  return "";
}

// The prompt text that opens a plain answer, when the model wraps answers in markers.
const char* answer_opening(ToolCallFormat format) { return format == ToolCallFormat::kCohere ? "<|START_RESPONSE|>" : ""; }

struct ToolInfo {
  std::string name;
  const Json* parameters = nullptr;  // null: none declared
  bool strict = false;
};

std::vector<ToolInfo> tool_infos(const Json* tools) {
  std::vector<ToolInfo> out;
  if (!tools || !tools->is_array()) return out;
  for (const Json& t : *tools) {  // shapes were validated by resolve_tool_choice
    const Json& fn = t.at("function");
    ToolInfo info;
    info.name = fn.at("name").get<std::string>();
    if (auto p = fn.find("parameters"); p != fn.end() && p->is_object()) info.parameters = &*p;
    if (auto s = fn.find("strict"); s != fn.end() && s->is_boolean()) info.strict = s->get<bool>();
    out.push_back(info);
  }
  return out;
}

}  // namespace

ApiError parse_response_format(const Json& rf, ResponseFormat* out) {
  const std::string p = "response_format";
  if (!rf.is_object()) return type_error(p, "an object", rf);
  for (auto it = rf.begin(); it != rf.end(); ++it)
    if (it.key() != "type" && it.key() != "json_schema") return unknown_key(p, it.key());
  auto type = rf.find("type");
  if (type == rf.end()) return bad_request("'response_format.type' is required", p + ".type", "missing_required_parameter");
  if (!type->is_string()) return type_error(p + ".type", "a string", *type);
  const std::string t = type->get<std::string>();
  *out = ResponseFormat{};
  if (t == "text") return no_error();
  if (t == "json_object") {
    out->kind = ResponseFormat::Kind::kJsonObject;
    return no_error();
  }
  if (t != "json_schema")
    return bad_request("'response_format.type' must be 'text', 'json_object' or 'json_schema', got '" + t + "'",
                       p + ".type", "invalid_value");
  out->kind = ResponseFormat::Kind::kJsonSchema;
  const std::string q = p + ".json_schema";
  auto js = rf.find("json_schema");
  if (js == rf.end() || js->is_null())
    return bad_request("'" + q + "' is required for type 'json_schema'", q, "missing_required_parameter");
  if (!js->is_object()) return type_error(q, "an object", *js);
  for (auto it = js->begin(); it != js->end(); ++it) {
    const std::string& k = it.key();
    if (k == "name") {
      if (!it->is_string()) return type_error(q + ".name", "a string", *it);
      out->name = it->get<std::string>();
    } else if (k == "schema") {
      if (!it->is_object() && !it->is_boolean()) return type_error(q + ".schema", "an object", *it);
      out->schema = *it;
    } else if (k == "strict") {
      if (!it->is_boolean() && !it->is_null()) return type_error(q + ".strict", "a boolean", *it);
      out->strict = it->is_boolean() && it->get<bool>();
    } else if (k == "description") {
      if (!it->is_string()) return type_error(q + ".description", "a string", *it);
    } else {
      return unknown_key(q, k);
    }
  }
  if (out->schema.is_null())
    return bad_request("'" + q + ".schema' is required", q + ".schema", "missing_required_parameter");
  return no_error();
}

std::shared_ptr<const TokenVocab> StructuredOutputCache::vocab_for(const Tokenizer& tok) {
  if (vocab_tokenizer_ != &tok) {
    vocab_ = vocab_from_tokenizer(tok);
    vocab_tokenizer_ = &tok;
    lru_.clear();
    map_.clear();
  }
  return vocab_;
}

size_t StructuredOutputCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

Result<std::shared_ptr<CompiledGrammar>> StructuredOutputCache::get(const Tokenizer& tok,
                                                                    const std::vector<JsonAlternative>& alts) {
  std::string key;
  for (const JsonAlternative& a : alts) {
    key += a.prefix;
    key += '\0';
    key += a.schema ? a.schema->dump() : std::string("*");
    key += '\0';
    key += a.ws_before_value ? "w" : "";
    key += '\0';
    key += a.suffix;
    key += '\x01';
  }
  std::shared_ptr<const TokenVocab> vocab;
  {
    std::lock_guard<std::mutex> lock(mu_);
    vocab = vocab_for(tok);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
  }
  // Compile and fill the mask cache outside the lock (first use of a schema
  // pays it here, in the request's thread, not in the engine's step).
  vocab->string_scan();
  MS_ASSIGN_OR_RETURN(Grammar g, compile_json_alternatives(alts));
  std::shared_ptr<CompiledGrammar> cg = CompiledGrammar::create(std::move(g), vocab);
  cg->precompute();
  std::lock_guard<std::mutex> lock(mu_);
  if (vocab_ != vocab) return cg;  // the tokenizer changed meanwhile: do not cache
  auto it = map_.find(key);
  if (it != map_.end()) return it->second.first;  // another thread compiled it too
  lru_.push_front(key);
  map_.emplace(key, std::make_pair(cg, lru_.begin()));
  while (map_.size() > capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
  return cg;
}

ApiError plan_structured_output(StructuredOutputCache& cache, const Tokenizer& tok, const StructuredRequest& req,
                                StructuredOutput* out) {
  *out = StructuredOutput{};
  std::vector<JsonAlternative> alts;
  std::string param = "response_format";
  const ResponseFormat* rf = req.response_format;
  const bool want_format = rf && rf->kind != ResponseFormat::Kind::kText;
  const ToolChoice* choice = req.tool_choice;
  if (want_format) {
    if (req.tools_parsed)
      return bad_request("'response_format' together with 'tools' is supported only with tool_choice 'none'",
                         "response_format", "unsupported_parameter");
    JsonAlternative a;
    a.schema = rf->kind == ResponseFormat::Kind::kJsonSchema ? &rf->schema : nullptr;
    alts.push_back(a);
    if (req.chat) out->prompt_suffix = answer_opening(req.model_format);
  } else if (req.tools_parsed && choice && choice->required() && req.model_format != ToolCallFormat::kNone) {
    param = "tools";
    const std::vector<ToolInfo> tools = tool_infos(req.tools);
    static const Json kNoParameters = Json::parse(R"({"type":"object","properties":{},"additionalProperties":false})");
    auto args_of = [&](const ToolInfo& t) { return t.parameters ? t.parameters : &kNoParameters; };
    if (choice->mode == ToolChoice::Mode::kNamed) {
      for (const ToolInfo& t : tools)
        if (t.name == choice->name && t.strict) {
          JsonAlternative a;
          a.schema = args_of(t);
          a.ws_before_value = true;
          a.suffix = call_closing(req.model_format);
          alts.push_back(a);
        }
    } else if (std::any_of(tools.begin(), tools.end(), [](const ToolInfo& t) { return t.strict; })) {
      const std::string opened = forced_call_prefix(req.model_format, *choice);
      for (const ToolInfo& t : tools) {
        ToolChoice named = *choice;
        named.mode = ToolChoice::Mode::kNamed;
        named.name = t.name;
        const std::string full = forced_call_prefix(req.model_format, named);
        if (full.compare(0, opened.size(), opened) != 0) return internal_api_error("tool call prefixes disagree");
        JsonAlternative a;
        a.prefix = full.substr(opened.size());
        a.schema = t.strict ? args_of(t) : nullptr;
        a.ws_before_value = true;
        a.suffix = call_closing(req.model_format);
        alts.push_back(a);
      }
    }
  }
  if (alts.empty()) return no_error();
  auto g = cache.get(tok, alts);
  if (!g.is_ok()) {
    std::string where = param == "tools" ? "tools: a strict function's parameters" : "response_format.json_schema.schema";
    return bad_request(where + ": " + g.status().message(), param, "invalid_value");
  }
  out->grammar = *g;
  return no_error();
}

}  // namespace ms::server
