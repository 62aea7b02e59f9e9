#include "server/responses.h"

#include <cmath>

namespace ms::server {
namespace {

Json bytes_of(const Tokenizer& tok, int32_t id) {
  Json b = Json::array();
  for (unsigned char c : tok.token_bytes(id)) b.push_back(static_cast<int>(c));
  return b;
}

std::string token_text(const Tokenizer& tok, int32_t id) {
  int32_t ids[1] = {id};
  return tok.decode(ids, false);
}

// JSON has no -inf: clamp to the most negative float, as vLLM does.
double finite(float lp) { return std::isfinite(lp) ? lp : -9999.0; }

Json base(const ResponseMeta& m, const char* object) {
  Json j = Json::object();
  j["id"] = m.id;
  j["object"] = object;
  j["created"] = m.created;
  j["model"] = m.model;
  return j;
}

Json tool_call_delta_json(const ToolCallDelta& d) {
  Json j = Json::object();
  j["index"] = d.index;
  if (d.is_header()) {
    j["id"] = d.id;
    j["type"] = "function";
    j["function"] = Json{{"name", d.name}, {"arguments", d.arguments}};
  } else {
    j["function"] = Json{{"arguments", d.arguments}};
  }
  return j;
}

}  // namespace

std::string sse_event(const Json& j) { return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n"; }
std::string sse_done() { return "data: [DONE]\n\n"; }

Json usage_json(int prompt_tokens, int completion_tokens, int cached_tokens) {
  Json u = Json::object();
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  u["prompt_tokens_details"] = Json{{"cached_tokens", cached_tokens}};
  return u;
}

Json chat_logprobs_entries(const Tokenizer& tok, const std::vector<TokenEvent>& tokens) {
  Json content = Json::array();
  for (const auto& t : tokens) {
    Json e = Json::object();
    e["token"] = token_text(tok, t.token);
    e["logprob"] = finite(t.logprob);
    e["bytes"] = bytes_of(tok, t.token);
    Json top = Json::array();
    for (const auto& a : t.top) {
      top.push_back(Json{{"token", token_text(tok, a.token)}, {"logprob", finite(a.logprob)},
                         {"bytes", bytes_of(tok, a.token)}});
    }
    e["top_logprobs"] = top;
    content.push_back(e);
  }
  return Json{{"content", content}};
}

Json completion_logprobs(const Tokenizer& tok, const std::vector<TokenEvent>& tokens, int* offset) {
  Json toks = Json::array(), lps = Json::array(), tops = Json::array(), offs = Json::array();
  for (const auto& t : tokens) {
    std::string s = token_text(tok, t.token);
    toks.push_back(s);
    lps.push_back(finite(t.logprob));
    Json top = Json::object();
    for (const auto& a : t.top) top[token_text(tok, a.token)] = finite(a.logprob);
    tops.push_back(top);
    offs.push_back(*offset);
    *offset += static_cast<int>(s.size());
  }
  Json j = Json::object();
  j["tokens"] = toks;
  j["token_logprobs"] = lps;
  j["top_logprobs"] = tops;
  j["text_offset"] = offs;
  return j;
}

Json chat_role_chunk(const ResponseMeta& m, int index) {
  Json j = base(m, "chat.completion.chunk");
  Json c = Json::object();
  c["index"] = index;
  c["delta"] = Json{{"role", "assistant"}, {"content", ""}};
  c["logprobs"] = nullptr;
  c["finish_reason"] = nullptr;
  j["choices"] = Json::array({c});
  if (m.usage_null) j["usage"] = nullptr;
  return j;
}

Json chat_delta_chunk(const ResponseMeta& m, int index, const ChoiceDelta& d, const Json& logprobs) {
  Json j = base(m, "chat.completion.chunk");
  Json delta = Json::object();
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.tool_calls.empty()) {
    Json tcs = Json::array();
    for (const auto& tc : d.tool_calls) tcs.push_back(tool_call_delta_json(tc));
    delta["tool_calls"] = tcs;
  }
  Json c = Json::object();
  c["index"] = index;
  c["delta"] = delta;
  c["logprobs"] = logprobs;
  c["finish_reason"] = d.finish_reason ? Json(*d.finish_reason) : Json(nullptr);
  j["choices"] = Json::array({c});
  if (m.usage_null) j["usage"] = nullptr;
  return j;
}

Json completion_chunk(const ResponseMeta& m, int index, const std::string& text, const Json& logprobs,
                      const Json& finish_reason) {
  Json j = base(m, "text_completion");
  Json c = Json::object();
  c["index"] = index;
  c["text"] = text;
  c["logprobs"] = logprobs;
  c["finish_reason"] = finish_reason;
  j["choices"] = Json::array({c});
  if (m.usage_null) j["usage"] = nullptr;
  return j;
}

Json usage_chunk(const ResponseMeta& m, const char* object, const Json& usage) {
  Json j = base(m, object);
  j["choices"] = Json::array();
  j["usage"] = usage;
  return j;
}

void ChoiceAccumulator::add(const ChoiceDelta& d) {
  content += d.content;
  reasoning += d.reasoning;
  for (const auto& tc : d.tool_calls) {
    if (tc.is_header()) {
      tool_calls.push_back(ToolCall{tc.id, tc.name, tc.arguments});
    } else if (!tool_calls.empty()) {
      tool_calls.back().arguments += tc.arguments;
    }
  }
  tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
  if (d.finish_reason) finish_reason = *d.finish_reason;
}

Json chat_choice_json(const Tokenizer& tok, int index, const ChoiceAccumulator& a, bool logprobs) {
  Json msg = Json::object();
  msg["role"] = "assistant";
  msg["content"] = (a.content.empty() && !a.tool_calls.empty()) ? Json(nullptr) : Json(a.content);
  if (!a.reasoning.empty()) msg["reasoning_content"] = a.reasoning;
  if (!a.tool_calls.empty()) {
    Json tcs = Json::array();
    for (const auto& tc : a.tool_calls) {
      tcs.push_back(Json{{"id", tc.id}, {"type", "function"},
                         {"function", Json{{"name", tc.name}, {"arguments", tc.arguments}}}});
    }
    msg["tool_calls"] = tcs;
  }
  Json c = Json::object();
  c["index"] = index;
  c["message"] = msg;
  c["logprobs"] = logprobs ? chat_logprobs_entries(tok, a.tokens) : Json(nullptr);
  c["finish_reason"] = a.finish_reason;
  return c;
}

Json completion_choice_json(const Tokenizer& tok, int index, const std::string& echo_prefix,
                            const ChoiceAccumulator& a, bool logprobs) {
  Json c = Json::object();
  c["index"] = index;
  c["text"] = echo_prefix + a.content;
  int offset = static_cast<int>(echo_prefix.size());
  c["logprobs"] = logprobs ? completion_logprobs(tok, a.tokens, &offset) : Json(nullptr);
  c["finish_reason"] = a.finish_reason;
  return c;
}

Json chat_response(const ResponseMeta& m, Json choices, const Json& usage) {
  Json j = base(m, "chat.completion");
  j["choices"] = std::move(choices);
  j["usage"] = usage;
  return j;
}

Json completion_response(const ResponseMeta& m, Json choices, const Json& usage) {
  Json j = base(m, "text_completion");
  j["choices"] = std::move(choices);
  j["usage"] = usage;
  return j;
}

}  // namespace ms::server
