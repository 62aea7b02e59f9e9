// Responses API output items and typed events; see responses_stream.h.
#include "server/responses_stream.h"

#include <chrono>
#include <random>

#include "server/responses.h"

namespace ms::server {

std::string random_item_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^
                                          uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  static const char kHex[] = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 32; ++i) s += kHex[rng() % 16];
  return s;
}

std::string sse_typed_event(const Json& event) {
  return "event: " + event["type"].get<std::string>() + "\ndata: " +
         event.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

ResponseBuilder::ResponseBuilder(std::string id, int64_t created_at, std::string model, const ResponsesRequest& rq,
                                 const Tokenizer& tok, Sink sink)
    : id_(std::move(id)), created_at_(created_at), model_(std::move(model)), rq_(rq), tok_(tok), sink_(std::move(sink)) {}

void ResponseBuilder::emit(Json event) {
  if (!sink_) return;
  Json e = Json::object();
  e["type"] = event["type"];
  e["sequence_number"] = seq_++;
  for (auto it = event.begin(); it != event.end(); ++it) {
    if (it.key() != "type") e[it.key()] = it.value();
  }
  sink_(e);
}

void ResponseBuilder::start() {
  Json r = response_object(id_, created_at_, model_, rq_, "in_progress", Json::array(), nullptr, nullptr, nullptr);
  emit(Json{{"type", "response.created"}, {"response", r}});
  emit(Json{{"type", "response.in_progress"}, {"response", r}});
}

Json ResponseBuilder::part_json() const {
  if (kind_ == Kind::kReasoning) return Json{{"type", "reasoning_text"}, {"text", text_}};
  Json p = Json::object();
  p["type"] = "output_text";
  p["annotations"] = Json::array();
  p["logprobs"] = logprobs_;
  p["text"] = text_;
  return p;
}

Json ResponseBuilder::item_json(const char* status) const {
  Json it = Json::object();
  it["id"] = item_id_;
  const bool done = std::string(status) != "in_progress";
  switch (kind_) {
    case Kind::kReasoning:
      it["type"] = "reasoning";
      it["summary"] = Json::array();
      it["content"] = done ? Json::array({part_json()}) : Json::array();
      it["encrypted_content"] = nullptr;
      it["status"] = status;
      break;
    case Kind::kMessage:
      it["type"] = "message";
      it["status"] = status;
      it["content"] = done ? Json::array({part_json()}) : Json::array();
      it["role"] = "assistant";
      break;
    case Kind::kCall:
      it["type"] = "function_call";
      it["status"] = status;
      it["arguments"] = done ? text_ : "";
      it["call_id"] = call_id_;
      it["name"] = name_;
      break;
    case Kind::kNone:
      break;
  }
  return it;
}

void ResponseBuilder::open(Kind kind, const ToolCallDelta* header) {
  close("completed");
  kind_ = kind;
  text_.clear();
  logprobs_ = Json::array();
  const int index = static_cast<int>(output_.size());
  item_id_ = random_item_id(kind == Kind::kReasoning ? "rs_" : kind == Kind::kMessage ? "msg_" : "fc_");
  if (header) {
    call_id_ = header->id;
    name_ = header->name;
    call_index_ = header->index;
  }
  emit(Json{{"type", "response.output_item.added"}, {"output_index", index}, {"item", item_json("in_progress")}});
  if (kind != Kind::kCall) {
    Json part = part_json();
    emit(Json{{"type", "response.content_part.added"}, {"item_id", item_id_}, {"output_index", index},
              {"content_index", 0}, {"part", part}});
  }
}

void ResponseBuilder::close(const char* status) {
  if (kind_ == Kind::kNone) return;
  const int index = static_cast<int>(output_.size());
  if (kind_ == Kind::kCall) {
    emit(Json{{"type", "response.function_call_arguments.done"}, {"item_id", item_id_}, {"output_index", index},
              {"arguments", text_}});
  } else {
    Json done = {{"type", kind_ == Kind::kMessage ? "response.output_text.done" : "response.reasoning_text.done"},
                 {"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", text_}};
    if (kind_ == Kind::kMessage) done["logprobs"] = logprobs_;
    emit(done);
    emit(Json{{"type", "response.content_part.done"}, {"item_id", item_id_}, {"output_index", index},
              {"content_index", 0}, {"part", part_json()}});
  }
  Json item = item_json(status);
  emit(Json{{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  kind_ = Kind::kNone;
}

void ResponseBuilder::add(const ChoiceDelta& d) {
  if (!d.reasoning.empty()) {
    if (kind_ != Kind::kReasoning) open(Kind::kReasoning, nullptr);
    text_ += d.reasoning;
    if (d.content.empty() && d.tool_calls.empty()) reasoning_tokens_ += static_cast<int>(d.tokens.size());
    emit(Json{{"type", "response.reasoning_text.delta"}, {"item_id", item_id_},
              {"output_index", static_cast<int>(output_.size())}, {"content_index", 0}, {"delta", d.reasoning}});
  }
  if (!d.content.empty()) {
    if (kind_ != Kind::kMessage) open(Kind::kMessage, nullptr);
    text_ += d.content;
    Json lp = Json::array();
    if (rq_.logprobs) lp = chat_logprobs_entries(tok_, d.tokens)["content"];
    for (const Json& e : lp) logprobs_.push_back(e);
    emit(Json{{"type", "response.output_text.delta"}, {"item_id", item_id_},
              {"output_index", static_cast<int>(output_.size())}, {"content_index", 0}, {"delta", d.content},
              {"logprobs", lp}});
  }
  for (const ToolCallDelta& tc : d.tool_calls) {
    if (tc.is_header()) {
      open(Kind::kCall, &tc);
    } else if (kind_ != Kind::kCall || tc.index != call_index_) {
      continue;  // a fragment of a call that is no longer open cannot happen; ignore it
    }
    if (tc.arguments.empty()) continue;
    text_ += tc.arguments;
    emit(Json{{"type", "response.function_call_arguments.delta"}, {"item_id", item_id_},
              {"output_index", static_cast<int>(output_.size())}, {"delta", tc.arguments}});
  }
}

Json ResponseBuilder::finish(const std::string& finish_reason, const Json& usage, const std::string& error) {
  const bool failed = !error.empty();
  const bool incomplete = !failed && finish_reason == "length";
  close(failed ? "incomplete" : incomplete ? "incomplete" : "completed");
  const char* status = failed ? "failed" : incomplete ? "incomplete" : "completed";
  Json err = failed ? Json{{"code", "server_error"}, {"message", error}} : Json(nullptr);
  Json details = incomplete ? Json{{"reason", "max_output_tokens"}} : Json(nullptr);
  Json r = response_object(id_, created_at_, model_, rq_, status, output_, usage, err, details);
  if (!failed && !incomplete) {
    r["completed_at"] = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  }
  emit(Json{{"type", failed ? "response.failed" : incomplete ? "response.incomplete" : "response.completed"},
            {"response", r}});
  return r;
}

}  // namespace ms::server
