#include "server/api_routes.h"

#include <set>

#include "chat/chat_prompt.h"
#include "core/json_parse.h"
#include "core/log.h"
#include "server/responses.h"

namespace ms::server {
namespace {

const char* kJson = "application/json";

void send_error(Exchange& ex, const ApiError& e) {
  HttpResponse res;
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.body = e.to_json().dump(-1, ' ', false, Json::error_handler_t::replace);
  ex.respond(std::move(res));
}

void send_json(Exchange& ex, const Json& j, int status = 200) {
  HttpResponse res;
  res.status = status;
  res.content_type = kJson;
  res.body = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  ex.respond(std::move(res));
}

ApiError shutdown_error() {
  ApiError e;
  e.status = 503;
  e.type = "service_unavailable";
  e.code = "shutting_down";
  e.message = "The server shut down before this request finished (--shutdown-timeout)";
  return e;
}

// Parses the body as JSON (its size was bounded as it was read); a malformed
// one is a 400. Bounded parse: nesting past kMaxJsonDepth is a 400 here, so
// no later walk over the body (copies, dumps, the chat template) can recurse
// deeper.
bool parse_body(const HttpRequest& req, Exchange& ex, Json* out) {
  auto parsed = parse_ordered_json(req.body);
  if (!parsed.is_ok()) {
    const bool deep = is_json_too_deep(parsed.status());
    send_error(ex, bad_request((deep ? "Request body rejected: " : "Malformed JSON in the request body: ") +
                                   parsed.status().message(),
                               "", deep ? "json_too_deep" : "invalid_json"));
    return false;
  }
  *out = std::move(parsed.value());
  return true;
}

// Label of a path for the request counter (bounded: unknown paths are "other").
std::string endpoint_label(const std::string& path) {
  static const std::set<std::string> kKnown = {"/v1/chat/completions", "/v1/completions", "/v1/responses",
                                               "/v1/models",  "/health", "/metrics", "/tokenize", "/detokenize",
                                               "/version"};
  if (kKnown.count(path)) return path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (path.rfind("/v1/responses/", 0) == 0) return "/v1/responses/{id}";
  return "other";
}

void generate(ServerContext& ctx, Endpoint ep, const HttpRequest& req, Exchange& ex) {
  Json body;
  if (!parse_body(req, ex, &body)) return;
  std::shared_ptr<Generation> gen;
  ApiError err = Generation::start(ctx, ep, body, &gen);
  if (!err.ok()) return send_error(ex, err);
  if (!gen->stream()) {
    Json out;
    // Nothing is written until the end: the connection is probed between
    // channel waits, so a vanished client frees its KV at once.
    bool stopped = false;
    err = gen->run_to_completion(&out, [&] { return stopped = stopped || ex.should_stop(); });
    if (stopped) {
      if (ex.aborted()) return send_error(ex, shutdown_error());
      return ex.abandon(499);
    }
    if (!err.ok()) return send_error(ex, err);
    return send_json(ex, out);
  }
  HttpResponse head;
  head.content_type = "text/event-stream";
  head.set_header("Cache-Control", "no-cache");
  head.set_header("X-Accel-Buffering", "no");
  if (!ex.begin_stream(std::move(head))) return gen->cancel();
  bool cut = false;
  gen->run_streaming([&](const std::string& s) { return !(cut = cut || !ex.write(s)); });
  if (cut && ex.aborted()) {
    // Cut by the drain timeout: the client is there, so the stream ends
    // with an error event and [DONE] instead of just stopping.
    return ex.end_stream(sse_event(shutdown_error().to_json()) + sse_done());
  }
  ex.end_stream();
}

void tokenize(ServerContext& ctx, const HttpRequest& req, Exchange& ex) {
  Json body;
  if (!parse_body(req, ex, &body)) return;
  if (!body.is_object()) return send_error(ex, bad_request("the request body must be a JSON object"));
  for (auto it = body.begin(); it != body.end(); ++it) {
    static const std::set<std::string> kKnown = {"model", "prompt", "messages", "add_special_tokens",
                                                 "add_generation_prompt"};
    if (!kKnown.count(it.key())) {
      return send_error(ex, bad_request("Unsupported parameter: '" + it.key() + "'", it.key(), "unsupported_parameter"));
    }
  }
  if (auto m = body.find("model"); m != body.end() && m->is_string() && *m != ctx.model_name) {
    return send_error(ex, not_found_error("The model `" + m->get<std::string>() + "` does not exist.", "model_not_found"));
  }
  std::vector<int32_t> ids;
  auto p = body.find("prompt");
  auto msgs = body.find("messages");
  if (p != body.end()) {
    if (!p->is_string()) return send_error(ex, bad_request("'prompt' must be a string", "prompt", "invalid_type"));
    bool add = true;
    if (auto a = body.find("add_special_tokens"); a != body.end()) {
      if (!a->is_boolean()) {
        return send_error(ex, bad_request("'add_special_tokens' must be a boolean", "add_special_tokens", "invalid_type"));
      }
      add = a->get<bool>();
    }
    ids = ctx.tokenizer->encode(p->get<std::string>(), add);
  } else if (msgs != body.end()) {
    Json chat = Json::object();
    chat["messages"] = *msgs;
    if (auto a = body.find("add_generation_prompt"); a != body.end()) chat["add_generation_prompt"] = *a;
    GenRequest gr;
    ApiError e = parse_chat_request(chat, ctx.limits, &gr);
    if (!e.ok()) return send_error(ex, e);
    if (!ctx.chat_template) return send_error(ex, bad_request("this model has no chat template", "messages"));
    Json context = Json::object();
    context["messages"] = gr.messages;
    context["add_generation_prompt"] = gr.add_generation_prompt;
    context["bos_token"] = ctx.tokenizer->bos_token();
    context["eos_token"] = ctx.tokenizer->eos_token();
    ChatPromptOptions po;
    po.special_tokens_in_content = ctx.special_tokens_in_content;
    auto prompt = render_chat_prompt(*ctx.chat_template, *ctx.tokenizer, std::move(context), po);
    if (!prompt.is_ok()) {
      return send_error(ex, bad_request("chat template error: " + prompt.status().message(), "messages"));
    }
    ids = std::move(prompt->ids);
  } else {
    return send_error(ex, bad_request("'prompt' or 'messages' is required", "prompt", "missing_required_parameter"));
  }
  send_json(ex, Json{{"count", ids.size()}, {"max_model_len", ctx.engine->max_model_len()}, {"tokens", ids}});
}

void detokenize(ServerContext& ctx, const HttpRequest& req, Exchange& ex) {
  Json body;
  if (!parse_body(req, ex, &body)) return;
  if (!body.is_object()) return send_error(ex, bad_request("the request body must be a JSON object"));
  auto t = body.find("tokens");
  if (t == body.end() || !t->is_array()) {
    return send_error(ex, bad_request("'tokens' must be an array of token ids", "tokens", "invalid_type"));
  }
  std::vector<int32_t> ids;
  const int64_t vocab = ctx.tokenizer->vocab_size();
  for (size_t i = 0; i < t->size(); ++i) {
    const Json& v = (*t)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab) {
      return send_error(ex, bad_request("'tokens[" + std::to_string(i) + "]' must be a token id in [0, " +
                                            std::to_string(vocab) + ")",
                                        "tokens", "invalid_value"));
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  send_json(ex, Json{{"prompt", ctx.tokenizer->decode(ids, false)}});
}

// /health: 200 only when ready, so an orchestrator can wait on it.
void health(const HttpServer& server, ServerContext& ctx, const LoadProgress& progress, Exchange& ex) {
  Json j = Json::object();
  ServerState st = server.state();
  if (st == ServerState::kLoading) {
    j["status"] = "loading";
    j["reason"] = progress.get();
  } else if (st == ServerState::kDraining) {
    j["status"] = "draining";
    j["reason"] = "shutting down: " + std::to_string(server.stats().requests_in_flight) +
                  " requests still in flight";
  } else if (EngineStats es = ctx.engine->stats(); !es.healthy) {
    j["status"] = "unhealthy";
    j["reason"] = es.unhealthy_reason;
  } else {
    j["status"] = "ready";
  }
  send_json(ex, j, j["status"] == "ready" ? 200 : 503);
}

std::string transport_metrics(const HttpServer& server) {
  HttpStats s = server.stats();
  std::string out;
  auto add = [&](const char* name, const char* help, const char* type, double v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           std::to_string(static_cast<long long>(v)) + "\n";
  };
  add("megaserve_http_connections_open", "Open client connections.", "gauge", s.connections_open);
  add("megaserve_http_requests_in_flight", "Requests on handler threads.", "gauge", s.requests_in_flight);
  add("megaserve_http_connections_rejected_total", "Connections over --max-connections.", "counter",
      double(s.connections_rejected));
  add("megaserve_http_requests_busy_total", "Requests refused with 503: every handler thread busy.", "counter",
      double(s.requests_busy_rejected));
  add("megaserve_http_requests_timed_out_total", "Requests whose head or body did not arrive in time (408).",
      "counter", double(s.requests_timed_out));
  out += "# HELP megaserve_server_state The server's lifecycle state.\n# TYPE megaserve_server_state gauge\n";
  for (ServerState st : {ServerState::kLoading, ServerState::kReady, ServerState::kDraining}) {
    out += std::string("megaserve_server_state{state=\"") + server_state_name(st) + "\"} " +
           (server.state() == st ? "1" : "0") + "\n";
  }
  return out;
}

}  // namespace

void LoadProgress::set(std::string detail) {
  std::lock_guard<std::mutex> l(mu_);
  detail_ = std::move(detail);
}

std::string LoadProgress::get() const {
  std::lock_guard<std::mutex> l(mu_);
  return detail_;
}

void install_api_routes(HttpServer& server, ServerContext& ctx, const LoadProgress& progress) {
  server.set_observer([&ctx](const HttpRequest& req, int status) {
    if (ctx.metrics) ctx.metrics->count_request(endpoint_label(req.path), status);
    MS_LOG(Debug) << req.method << " " << req.path << " -> " << status;
  });
  // Routes that compute run on a handler thread; GET routes answer on the I/O thread.
  auto add = [&server](const char* method, const char* path, RouteHandler h, bool worker = false) -> Route& {
    Route r;
    r.method = method;
    r.path = path;
    r.handler = std::move(h);
    r.on_worker = worker;
    server.add_route(std::move(r));
    return server.last_route();
  };
  add("POST", "/v1/chat/completions",
      [&ctx](const HttpRequest& req, Exchange& ex) { generate(ctx, Endpoint::kChat, req, ex); }, true);
  add("POST", "/v1/completions",
      [&ctx](const HttpRequest& req, Exchange& ex) { generate(ctx, Endpoint::kCompletions, req, ex); }, true);
  add("POST", "/v1/responses",
      [&ctx](const HttpRequest& req, Exchange& ex) { generate(ctx, Endpoint::kResponses, req, ex); }, true);
  // Stored responses (store: true): retrieve and delete, as OpenAI's API.
  add("GET", "/v1/responses/", [&ctx](const HttpRequest& req, Exchange& ex) {
    const std::string id = req.path.substr(std::string("/v1/responses/").size());
    auto r = ctx.response_store.get(id);
    if (!r) return send_error(ex, not_found_error("Response with id '" + id + "' not found.", "response_not_found"));
    send_json(ex, r->response);
  }).prefix = true;
  add("DELETE", "/v1/responses/", [&ctx](const HttpRequest& req, Exchange& ex) {
    const std::string id = req.path.substr(std::string("/v1/responses/").size());
    if (!ctx.response_store.erase(id))
      return send_error(ex, not_found_error("Response with id '" + id + "' not found.", "response_not_found"));
    send_json(ex, Json{{"id", id}, {"object", "response"}, {"deleted", true}});
  }).prefix = true;
  add("POST", "/tokenize", [&ctx](const HttpRequest& req, Exchange& ex) { tokenize(ctx, req, ex); }, true);
  add("POST", "/detokenize", [&ctx](const HttpRequest& req, Exchange& ex) { detokenize(ctx, req, ex); }, true);

  auto model_card = [&ctx] {
    Json m = Json::object();
    m["id"] = ctx.model_name;
    m["object"] = "model";
    m["created"] = ctx.started_at;
    m["owned_by"] = "megaserve";
    m["max_model_len"] = ctx.engine->max_model_len();
    return m;
  };
  add("GET", "/v1/models", [model_card](const HttpRequest&, Exchange& ex) {
    send_json(ex, Json{{"object", "list"}, {"data", Json::array({model_card()})}});
  });
  add("GET", "/v1/models/", [&ctx, model_card](const HttpRequest& req, Exchange& ex) {
    std::string id = req.path.substr(std::string("/v1/models/").size());
    if (id != ctx.model_name) {
      return send_error(ex, not_found_error("The model `" + id + "` does not exist.", "model_not_found"));
    }
    send_json(ex, model_card());
  }).prefix = true;
  add("GET", "/version", [](const HttpRequest&, Exchange& ex) {
    send_json(ex, Json{{"version", "megaserve 0.1"}});
  }).needs_model = false;

  Route& h = add("GET", "/health", [&server, &ctx, &progress](const HttpRequest&, Exchange& ex) {
    health(server, ctx, progress, ex);
  });
  h.needs_auth = false;
  h.needs_model = false;
  h.essential = true;

  Route& m = add("GET", "/metrics", [&server, &ctx](const HttpRequest&, Exchange& ex) {
    HttpResponse res;
    res.content_type = "text/plain; version=0.0.4";
    res.body = transport_metrics(server);
    // The engine's part exists once the model is loaded.
    if (server.state() != ServerState::kLoading && ctx.metrics) res.body += ctx.metrics->render(ctx.engine->stats());
    ex.respond(std::move(res));
  });
  m.needs_model = false;
  m.essential = true;
}

}  // namespace ms::server
