#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include "chat/chat_prompt.h"
#include "core/json_parse.h"
#include "core/log.h"
#include "server/peer_socket.h"

namespace ms::server {
namespace {

const char* kJson = "application/json";

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(e.to_json().dump(), kJson);
}

void send_json(httplib::Response& res, const Json& j, int status = 200) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, Json::error_handler_t::replace), kJson);
}

// Parses the body as JSON; a body over the limit is a 413, a malformed one a 400.
bool parse_body(const httplib::Request& req, httplib::Response& res, size_t max_bytes, Json* out) {
  if (req.body.size() > max_bytes) {
    ApiError e;
    e.status = 413;
    e.message = "Request body of " + std::to_string(req.body.size()) + " bytes is over the limit of " +
                std::to_string(max_bytes) + " bytes";
    e.code = "payload_too_large";
    send_error(res, e);
    return false;
  }
  // Bounded parse: nesting past kMaxJsonDepth is a 400 here, so no later walk
  // over the body (copies, dumps, the chat template) can recurse deeper.
  auto parsed = parse_ordered_json(req.body);
  if (!parsed.is_ok()) {
    const bool deep = is_json_too_deep(parsed.status());
    send_error(res, bad_request((deep ? "Request body rejected: " : "Malformed JSON in the request body: ") +
                                    parsed.status().message(),
                                "", deep ? "json_too_deep" : "invalid_json"));
    return false;
  }
  *out = std::move(parsed.value());
  return true;
}

// Runs a handler with no exception escaping: anything thrown is a 500.
template <typename F>
void guarded(httplib::Response& res, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    MS_LOG(Error) << "handler exception: " << e.what();
    send_error(res, internal_api_error(std::string("internal error: ") + e.what()));
  } catch (...) {
    send_error(res, internal_api_error("internal error"));
  }
}

// Known routes and their methods, for 405 vs 404.
const std::map<std::string, std::string>& routes() {
  static const std::map<std::string, std::string> k = {
      {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/v1/models", "GET"},
      {"/health", "GET"},               {"/metrics", "GET"},         {"/tokenize", "POST"},
      {"/detokenize", "POST"},          {"/version", "GET"}};
  return k;
}

std::string endpoint_label(const std::string& path) {
  if (routes().count(path)) return path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

}  // namespace

bool check_bearer(const std::string& header, const Secret& key) {
  static constexpr std::string_view kPrefix = "Bearer ";
  if (header.compare(0, kPrefix.size(), kPrefix) != 0) return false;  // the client's own bytes only
  return key.matches(std::string_view(header).substr(kPrefix.size()));
}

HttpServer::HttpServer(ServerContext& ctx, HttpOptions options)
    : ctx_(ctx), options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  install_routes();
}

HttpServer::~HttpServer() {
  stop();
  // httplib closes the listening socket only when it has listened on it.
  if (!ran_ && listen_fd_ >= 0) ::close(listen_fd_);
}

void HttpServer::install_routes() {
  httplib::Server& s = *server_;
  const int threads = options_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // httplib answers bodies over its limit with 413 and closes while the client
  // may still be sending, so the client can see a reset instead of the
  // answer. Bodies up to 1 MiB over our limit are therefore read in full and
  // rejected by parse_body with a clean 413; only larger ones hit httplib's.
  s.set_payload_max_length(options_.max_body_bytes + (size_t(1) << 20));
  s.set_read_timeout(options_.read_timeout_s, 0);
  s.set_write_timeout(options_.write_timeout_s, 0);
  s.set_keep_alive_timeout(options_.keep_alive_timeout_s);
  s.set_keep_alive_max_count(options_.keep_alive_max);
  s.set_tcp_nodelay(true);
  // httplib's default socket options set SO_REUSEPORT, which lets a second
  // server bind a port that one already listens on (the two then split the
  // connections); SO_REUSEADDR only allows rebinding over TIME_WAIT. The
  // callback also records the listening fd so bind() can raise its backlog.
  s.set_socket_options([this](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd_ = fd;
  });

  // The key, zero-padded once here: comparing it never depends on its length.
  auto key = std::make_shared<Secret>();
  if (!options_.api_key.empty()) {
    auto k = Secret::create(options_.api_key);
    if (k.is_ok()) *key = std::move(k.value());
    else MS_LOG(Error) << "--api-key: " << k.status().message() << "; every request will be refused";
  }
  s.set_pre_routing_handler([this, key](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (check_bearer(req.get_header_value("Authorization"), *key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    ApiError e;
    e.status = 401;
    e.type = "authentication_error";
    e.code = "invalid_api_key";
    e.message = "Missing or invalid API key (expected 'Authorization: Bearer <key>')";
    send_error(res, e);
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });

  // Fills in OpenAI error bodies for failures httplib produced itself (no
  // route, payload too large, bad request line); our own errors have a body.
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      auto it = routes().find(req.path);
      if (it != routes().end() && it->second != req.method) {
        e.status = 405;
        e.message = "Method " + req.method + " is not allowed on " + req.path + " (use " + it->second + ")";
        e.code = "method_not_allowed";
        res.set_header("Allow", it->second);
      } else {
        e.type = "not_found_error";
        e.message = "Not found: " + req.method + " " + req.path;
        e.code = "not_found";
      }
    } else if (res.status == 413) {
      e.message = "Request body too large";
      e.code = "payload_too_large";
    } else if (res.status == 400) {
      e.message = "Bad request";
    } else {
      e.type = res.status >= 500 ? "internal_server_error" : "invalid_request_error";
      e.message = "HTTP error " + std::to_string(res.status);
    }
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));

  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, internal_api_error(what));
  });

  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (ctx_.metrics) ctx_.metrics->count_request(endpoint_label(req.path), res.status);
    MS_LOG(Debug) << req.method << " " << req.path << " -> " << res.status;
  });

  auto generation = [this](Endpoint ep) {
    return [this, ep](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        Json body;
        if (!parse_body(req, res, options_.max_body_bytes, &body)) return;
        std::shared_ptr<Generation> gen;
        ApiError err = Generation::start(ctx_, ep, body, &gen);
        if (!err.ok()) return send_error(res, err);
        if (!gen->stream()) {
          Json out;
          // Non-streaming handlers write nothing until the end: probe the
          // connection between waits so a vanished client frees its KV now.
          int fd = find_peer_socket(req.remote_addr, req.remote_port, req.local_port);
          err = gen->run_to_completion(&out, [fd] { return peer_closed(fd); });
          if (!err.ok()) return send_error(res, err);
          return send_json(res, out);
        }
        res.status = 200;
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        res.set_chunked_content_provider(
            "text/event-stream",
            [gen](size_t, httplib::DataSink& sink) {
              bool ok = true;
              try {
                gen->run_streaming([&](const std::string& s) {
                  ok = ok && sink.write(s.data(), s.size());
                  return ok;
                });
              } catch (const std::exception& e) {
                MS_LOG(Error) << "stream exception: " << e.what();
                gen->cancel();
                ok = false;
              }
              if (ok) sink.done();
              return ok;
            },
            [gen](bool) { gen->cancel(); });
      });
    };
  };
  s.Post("/v1/chat/completions", generation(Endpoint::kChat));
  s.Post("/v1/completions", generation(Endpoint::kCompletions));

  auto model_card = [this] {
    Json m = Json::object();
    m["id"] = ctx_.model_name;
    m["object"] = "model";
    m["created"] = 0;
    m["owned_by"] = "megaserve";
    m["max_model_len"] = ctx_.engine->max_model_len();
    return m;
  };
  s.Get("/v1/models", [model_card](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] { send_json(res, Json{{"object", "list"}, {"data", Json::array({model_card()})}}); });
  });
  s.Get(R"(/v1/models/(.+))", [this, model_card](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      if (req.matches[1] != ctx_.model_name) {
        return send_error(res, not_found_error("The model `" + std::string(req.matches[1]) + "` does not exist.",
                                               "model_not_found"));
      }
      send_json(res, model_card());
    });
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      EngineStats st = ctx_.engine->stats();
      if (ctx_.shutting_down) {
        ApiError e = api_error_from_status(unavailable("shutting down"));
        return send_error(res, e);
      }
      if (!st.healthy) return send_error(res, api_error_from_status(unavailable("unhealthy: " + st.unhealthy_reason)));
      send_json(res, Json{{"status", "ok"}});
    });
  });
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, Json{{"version", "megaserve 0.1"}});
  });

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      res.set_content(ctx_.metrics->render(ctx_.engine->stats()), "text/plain; version=0.0.4");
    });
  });

  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      Json body;
      if (!parse_body(req, res, options_.max_body_bytes, &body)) return;
      if (!body.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
      for (auto it = body.begin(); it != body.end(); ++it) {
        static const std::set<std::string> kKnown = {"model", "prompt", "messages", "add_special_tokens",
                                                     "add_generation_prompt"};
        if (!kKnown.count(it.key())) {
          return send_error(res, bad_request("Unsupported parameter: '" + it.key() + "'", it.key(), "unsupported_parameter"));
        }
      }
      if (auto m = body.find("model"); m != body.end() && m->is_string() && *m != ctx_.model_name) {
        return send_error(res, not_found_error("The model `" + m->get<std::string>() + "` does not exist.", "model_not_found"));
      }
      std::vector<int32_t> ids;
      auto p = body.find("prompt");
      auto msgs = body.find("messages");
      if (p != body.end()) {
        if (!p->is_string()) return send_error(res, bad_request("'prompt' must be a string", "prompt", "invalid_type"));
        bool add = true;
        if (auto a = body.find("add_special_tokens"); a != body.end()) {
          if (!a->is_boolean()) return send_error(res, bad_request("'add_special_tokens' must be a boolean", "add_special_tokens", "invalid_type"));
          add = a->get<bool>();
        }
        ids = ctx_.tokenizer->encode(p->get<std::string>(), add);
      } else if (msgs != body.end()) {
        Json chat = Json::object();
        chat["messages"] = *msgs;
        if (auto a = body.find("add_generation_prompt"); a != body.end()) chat["add_generation_prompt"] = *a;
        GenRequest gr;
        ApiError e = parse_chat_request(chat, ctx_.limits, &gr);
        if (!e.ok()) return send_error(res, e);
        if (!ctx_.chat_template) return send_error(res, bad_request("this model has no chat template", "messages"));
        Json context = Json::object();
        context["messages"] = gr.messages;
        context["add_generation_prompt"] = gr.add_generation_prompt;
        context["bos_token"] = ctx_.tokenizer->bos_token();
        context["eos_token"] = ctx_.tokenizer->eos_token();
        ChatPromptOptions po;
        po.special_tokens_in_content = ctx_.special_tokens_in_content;
        auto prompt = render_chat_prompt(*ctx_.chat_template, *ctx_.tokenizer, std::move(context), po);
        if (!prompt.is_ok()) {
          return send_error(res, bad_request("chat template error: " + prompt.status().message(), "messages"));
        }
        ids = std::move(prompt->ids);
      } else {
        return send_error(res, bad_request("'prompt' or 'messages' is required", "prompt", "missing_required_parameter"));
      }
      send_json(res, Json{{"count", ids.size()}, {"max_model_len", ctx_.engine->max_model_len()}, {"tokens", ids}});
    });
  });

  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      Json body;
      if (!parse_body(req, res, options_.max_body_bytes, &body)) return;
      if (!body.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
      auto t = body.find("tokens");
      if (t == body.end() || !t->is_array()) {
        return send_error(res, bad_request("'tokens' must be an array of token ids", "tokens", "invalid_type"));
      }
      std::vector<int32_t> ids;
      const int64_t vocab = ctx_.tokenizer->vocab_size();
      for (size_t i = 0; i < t->size(); ++i) {
        const Json& v = (*t)[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab) {
          return send_error(res, bad_request("'tokens[" + std::to_string(i) + "]' must be a token id in [0, " +
                                                 std::to_string(vocab) + ")",
                                             "tokens", "invalid_value"));
        }
        ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
      }
      send_json(res, Json{{"prompt", ctx_.tokenizer->decode(ids, false)}});
    });
  });
}

Status HttpServer::bind() {
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ <= 0) {
      listen_fd_ = -1;  // httplib closed it
      return unavailable("cannot bind " + options_.host + " to any port");
    }
  } else {
    if (!server_->bind_to_port(options_.host, options_.port)) {
      listen_fd_ = -1;  // httplib closed it
      return unavailable("cannot bind " + options_.host + ":" + std::to_string(options_.port) +
                         " (in use, or no permission)");
    }
    port_ = options_.port;
  }
  // httplib 0.11 listens with a backlog of 5: a burst of new connections
  // (64 clients opening at once) overflows the accept queue and the kernel
  // drops SYNs and handshake ACKs, so clients stall for retransmits. Calling
  // listen() again on the bound socket resizes the queue.
  if (listen_fd_ < 0 || ::listen(listen_fd_, options_.listen_backlog) != 0) {
    return unavailable("cannot set the listen backlog of " + options_.host + ":" + std::to_string(port_) + ": " +
                       std::strerror(errno));
  }
  return Status::ok();
}

void HttpServer::run() {
  ran_ = true;
  server_->listen_after_bind();
}

void HttpServer::stop() {
  if (server_ && server_->is_running()) server_->stop();
}

}  // namespace ms::server
