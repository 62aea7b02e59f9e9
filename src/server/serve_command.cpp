// `megaserve serve`: flags -> ServeConfig -> HTTP server bound and serving
// (/health says "loading") -> load model, tokenizer and chat template ->
// backend -> engine -> ready. SIGINT / SIGTERM drain: new requests get 503,
// in-flight ones finish within --shutdown-timeout (a second signal cuts the
// wait short), the rest end with a 503, then the engine stops and the
// process exits 0.
#include "server/serve_command.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <mutex>
#include <thread>

#include "chat/chat_prompt.h"
#include "core/flags.h"
#include "core/json_parse.h"
#include "core/log.h"
#include "core/secret_compare.h"
#include "model/model_loader.h"
#include "ref/ref_backend.h"
#include "server/generation_defaults.h"
#include "scheduler/engine_impl.h"
#include "server/api_routes.h"
#include "server/backend_factory.h"
#include "tokenizer/dummy_tokenizer.h"

namespace ms::server {
namespace {

Flags serve_flags() {
  Flags f;
  f.add("model", "checkpoint directory (config.json, *.safetensors, tokenizer.json)")
      .add("host", "address to bind (default loopback only)", "127.0.0.1")
      .add("port", "TCP port (0: any free port, printed at start)", "8000")
      .add("api-key", "require 'Authorization: Bearer KEY' on all endpoints but /health; visible in ps: "
                      "prefer --api-key-file or the environment variable MEGASERVE_API_KEY")
      .add("api-key-file", "read the API key from this file (trailing newline stripped)")
      .add("served-model-name", "model id in the API (default: the model directory's name)");
  add_backend_flags(f);
  f.add("decode-backend",
        "cuda: decode steps on the megakernel, the layered kernels, or auto (per batch size and context, whichever "
        "measured faster here)",
        "auto")
      .add("max-batch", "decode rows per step, 1..8", "8")
      .add("prefill-chunk", "prompt tokens prefilled per step", "512")
      .add("gpu-memory-utilization",
           "cuda: fraction of the GPU's total memory the server may use; the KV cache gets what the weights and "
           "buffers leave of it",
           "0.9")
      .add("kv-cache-mb", "KV-cache memory in MiB, overriding --gpu-memory-utilization (default: ref 512)")
      .add("block-size", "tokens per KV block", "64")
      .add("max-model-len", "context length limit (0: the model's)", "0")
      .add("max-waiting", "queued requests before 429", "256")
      .add("no-prefix-caching", "disable prefix caching", "", true)
      .add("tool-call-parser", "auto, none, hermes, cohere or llama3_json", "auto")
      .add("chat-template", "a Jinja chat template file overriding the tokenizer's")
      .add("special-tokens-in-content", "tokenize control-token text in message content as control tokens "
                                        "(the old behaviour; lets a client inject roles)", "", true)
      .add("generation-config",
           "auto: sampling defaults (temperature, top_p, top_k, min_p, repetition_penalty) for fields a request "
           "leaves out come from the model's generation_config.json, as in vLLM; none: OpenAI's defaults",
           "auto")
      .add("override-generation-config",
           "JSON object of sampling defaults applied on top, e.g. '{\"temperature\": 0}'")
      .add("threads", "CPU threads of the ref backend (0: all)", "0")
      .add("http-threads", "requests computed at once (generation, tokenize; streams included); more get 503",
           "256")
      .add("max-connections", "open client connections; more get a fast 503", "4096")
      .add("max-body-kb", "largest request body in KiB, as sent and as decompressed (413 beyond)", "4096")
      .add("max-header-kb", "largest request line + headers in KiB (431 beyond)", "32")
      .add("max-headers", "most header fields in a request (431 beyond)", "128")
      .add("header-timeout", "seconds for a client to send the request line and headers (408 beyond)", "10")
      .add("timeout", "seconds for a client to send a whole request, and the longest a response write may stall",
           "30")
      .add("keep-alive-timeout", "seconds an idle connection is kept open between requests", "5")
      .add("shutdown-timeout", "seconds a SIGTERM drain waits for in-flight requests before ending them with 503",
           "25")
      .add("allowed-origins",
           "CORS: browser origins that may call the API: local (pages on localhost), *, none, or a comma list",
           "local")
      .add("log-level", "debug, info, warn or error", "info");
  return f;
}

Status flag_error(const std::string& flag, const Status& s) {
  if (s.message().find(flag) != std::string::npos) return s;
  return invalid_argument("--" + flag + ": " + s.message());
}

Result<LogLevel> parse_log_level(const std::string& s) {
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warn") return LogLevel::kWarn;
  if (s == "error") return LogLevel::kError;
  return invalid_argument("--log-level must be debug, info, warn or error, got '" + s + "'");
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<std::unique_ptr<Backend>> create_backend(const ServeConfig& c, const BackendDecision& d, const LoadedModel& m,
                                                LoadProgress& progress) {
  BackendChoice choice;
  choice.name = d.name;
  choice.device = d.device;
  choice.block_size = c.block_size;
  choice.kv_bytes = size_t(c.kv_cache_mb) << 20;
  choice.gpu_memory_utilization = c.gpu_memory_utilization;
  choice.threads = c.cpu_threads;
  choice.max_context = c.max_model_len;
  choice.decode = c.decode_backend;
  choice.random_weights = c.load_format == "dummy" && d.name == "cuda";
  choice.seed = c.seed;
  choice.progress = [&progress](const std::string& line) { progress.set(line); };
  return make_backend(m, choice);
}

// The tokenizer.json of the model directory, or, for dummy weights on a
// directory without one, the byte-level stand-in of the model's vocabulary.
Result<Tokenizer> load_tokenizer(const ServeConfig& c, const ModelConfig& model) {
  if (c.load_format == "dummy" && !std::filesystem::exists(c.model_dir + "/tokenizer.json")) {
    MS_LOG(Info) << "tokenizer: " << c.model_dir << " has no tokenizer.json: a dummy byte-level tokenizer of the "
                 << model.vocab_size << " ids (256 bytes, <|bos|> / <|eos|>, other ids decode to \"<ID>\")";
    return make_dummy_tokenizer(model.vocab_size, model.bos_id, model.eos_ids);
  }
  return Tokenizer::load(c.model_dir);
}

// The KV cache's size in the log, and what it means for the context length.
void log_kv_capacity(const ServeConfig& c, const std::string& backend, const Engine& engine, ServerContext* ctx) {
  const KvCapacity cap = engine.stats().kv_capacity;
  MS_LOG(Info) << "kv cache: " << describe(cap);
  MS_LOG(Info) << "kv cache: " << cap.context_tokens << " tokens of context in the full-attention group (all "
               << "requests together); largest request " << cap.max_request_tokens << " tokens";
  if (cap.bounds_context) {
    MS_LOG(Warn) << "max_model_len lowered to " << engine.max_model_len() << " tokens (the model's is "
                 << engine.config().max_position << "): what the KV cache holds for one sequence; "
                 << (c.kv_cache_mb > 0 || backend != "cuda" ? "raise --kv-cache-mb"
                                                            : "raise --gpu-memory-utilization or --kv-cache-mb")
                 << " for more";
    ctx->context_note = "(This server's KV cache holds " + std::to_string(engine.max_model_len()) +
                        " tokens for one request.)";
  }
}

// Blocks SIGINT / SIGTERM in every thread started after this; one thread sigwait()s.
sigset_t block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return set;
}

// The SIGTERM drain: refuse new work, give in-flight requests until the
// deadline (a second signal ends the wait), then end the rest with a 503.
void drain(HttpServer& http, ServerContext& ctx, const sigset_t& sigs, int timeout_s) {
  ctx.shutting_down = true;
  http.begin_drain();
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::seconds(timeout_s);
  MS_LOG(Info) << "draining: " << http.stats().requests_in_flight << " requests in flight, waiting up to "
               << timeout_s << " s (--shutdown-timeout)";
  while (!http.wait_idle(std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)))) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    timespec zero{0, 0};
    if (sigtimedwait(&sigs, nullptr, &zero) > 0) {
      MS_LOG(Info) << "second signal: ending the drain now";
      break;
    }
  }
  int left = http.stats().requests_in_flight;
  if (left > 0) {
    MS_LOG(Info) << "drain: ending " << left << " requests still in flight with 503";
    http.abort_in_flight();
    http.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }
  MS_LOG(Info) << "drained in "
               << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s";
}

}  // namespace

std::string ServeConfig::summary() const {
  std::ostringstream o;
  o << "model=" << model_dir << " served_model_name=" << served_model_name << " backend=" << backend
    << " device=" << device << " decode_backend=" << decode_backend << " load_format=" << load_format
    << " seed=" << seed << " gpu_memory_utilization=" << gpu_memory_utilization
    << " host=" << http.host << " port=" << http.port << " api_key=" << (http.api_key.empty() ? "off" : "on")
    << " max_batch=" << max_batch << " prefill_chunk=" << prefill_chunk
    << " kv_cache_mb=" << (kv_cache_mb > 0 ? std::to_string(kv_cache_mb) : "auto")
    << " block_size=" << block_size << " max_model_len=" << max_model_len << " max_waiting=" << max_waiting
    << " prefix_caching=" << (prefix_caching ? "on" : "off") << " tool_call_parser=" << tool_call_parser
    << " http_threads=" << http.threads << " max_connections=" << http.max_connections
    << " max_body_bytes=" << http.max_body_bytes << " max_header_bytes=" << http.max_header_bytes
    << " max_headers=" << http.max_headers << " header_timeout_s=" << http.header_timeout_s
    << " timeout_s=" << http.request_timeout_s << " keep_alive_timeout_s=" << http.keep_alive_timeout_s
    << " shutdown_timeout_s=" << shutdown_timeout_s << " allowed_origins=" << http.cors.describe()
    << " log_level=" << log_level << " special_tokens_in_content=" << (special_tokens_in_content ? "on" : "off")
    << " generation_config=" << generation_config
    << (override_generation_config.empty() ? "" : " override_generation_config=" + override_generation_config);
  return o.str();
}

Result<ServeConfig> parse_serve_args(const std::vector<std::string>& args, bool* help) {
  *help = false;
  Flags f = serve_flags();
  MS_RETURN_IF_ERROR(f.parse(args));
  if (f.help_requested()) {
    *help = true;
    return invalid_argument(f.usage("serve"));
  }
  ServeConfig c;
  c.model_dir = f.str("model");
  if (c.model_dir.empty()) return invalid_argument("--model is required (a checkpoint directory)");
  if (!std::filesystem::is_directory(c.model_dir)) {
    return invalid_argument("--model: '" + c.model_dir + "' is not a directory");
  }
  c.served_model_name = f.str("served-model-name");
  if (c.served_model_name.empty()) {
    c.served_model_name = std::filesystem::path(c.model_dir).lexically_normal().filename().string();
    if (c.served_model_name.empty()) {
      c.served_model_name = std::filesystem::path(c.model_dir).lexically_normal().parent_path().filename().string();
    }
  }
  c.http.host = f.str("host");
  if (c.http.host.empty()) return invalid_argument("--host must not be empty");
  auto geti = [&](const char* name, int64_t lo, int64_t hi, int* out) -> Status {
    auto v = f.integer(name, lo, hi);
    if (!v.is_ok()) return flag_error(name, v.status());
    *out = static_cast<int>(*v);
    return Status::ok();
  };
  MS_RETURN_IF_ERROR(geti("port", 0, 65535, &c.http.port));
  MS_RETURN_IF_ERROR(geti("max-batch", 1, 8, &c.max_batch));
  MS_RETURN_IF_ERROR(geti("prefill-chunk", 1, 1 << 20, &c.prefill_chunk));
  if (f.has("kv-cache-mb")) MS_RETURN_IF_ERROR(geti("kv-cache-mb", 1, 1 << 24, &c.kv_cache_mb));
  if (f.has("device")) MS_RETURN_IF_ERROR(geti("device", 0, 1023, &c.device));
  auto util = f.number("gpu-memory-utilization", 0.01, 1.0);
  if (!util.is_ok()) return flag_error("gpu-memory-utilization", util.status());
  c.gpu_memory_utilization = *util;
  auto seed = f.integer("seed", 0, INT64_MAX);
  if (!seed.is_ok()) return flag_error("seed", seed.status());
  c.seed = static_cast<uint64_t>(*seed);
  c.load_format = f.str("load-format");
  MS_RETURN_IF_ERROR(parse_load_format(c.load_format).status());
  MS_RETURN_IF_ERROR(geti("block-size", 1, 4096, &c.block_size));
  MS_RETURN_IF_ERROR(geti("max-model-len", 0, 1 << 24, &c.max_model_len));
  MS_RETURN_IF_ERROR(geti("max-waiting", 1, 1 << 20, &c.max_waiting));
  MS_RETURN_IF_ERROR(geti("threads", 0, 1024, &c.cpu_threads));
  MS_RETURN_IF_ERROR(geti("http-threads", 1, 4096, &c.http.threads));
  MS_RETURN_IF_ERROR(geti("max-connections", 1, 1 << 20, &c.http.max_connections));
  int body_kb = 0, header_kb = 0, timeout = 0;
  MS_RETURN_IF_ERROR(geti("max-body-kb", 1, 1 << 20, &body_kb));
  c.http.max_body_bytes = size_t(body_kb) << 10;
  MS_RETURN_IF_ERROR(geti("max-header-kb", 1, 1 << 16, &header_kb));
  c.http.max_header_bytes = size_t(header_kb) << 10;
  MS_RETURN_IF_ERROR(geti("max-headers", 1, 1 << 16, &c.http.max_headers));
  MS_RETURN_IF_ERROR(geti("header-timeout", 1, 3600, &c.http.header_timeout_s));
  MS_RETURN_IF_ERROR(geti("timeout", 1, 3600, &timeout));
  c.http.request_timeout_s = c.http.write_timeout_s = timeout;
  MS_RETURN_IF_ERROR(geti("keep-alive-timeout", 1, 3600, &c.http.keep_alive_timeout_s));
  MS_RETURN_IF_ERROR(geti("shutdown-timeout", 0, 3600, &c.shutdown_timeout_s));
  auto cors = CorsPolicy::parse(f.str("allowed-origins"));
  if (!cors.is_ok()) return cors.status();
  c.http.cors = cors.value();
  c.prefix_caching = !f.boolean("no-prefix-caching");
  c.backend = f.str("backend");
  c.decode_backend = f.str("decode-backend");
  if (c.decode_backend != "layered" && c.decode_backend != "megakernel" && c.decode_backend != "auto")
    return invalid_argument("--decode-backend must be megakernel, layered or auto, got '" + c.decode_backend + "'");
  if (c.backend == "layered") c.backend = "cuda";
  if (c.backend != "auto" && c.backend != "ref" && c.backend != "cuda")
    return invalid_argument("--backend must be auto, ref or cuda, got '" + c.backend + "'");
  c.tool_call_parser = f.str("tool-call-parser");
  if (c.tool_call_parser != "auto") {
    auto fmt = parse_tool_call_format(c.tool_call_parser);
    if (!fmt.is_ok()) return flag_error("tool-call-parser", fmt.status());
  }
  c.chat_template_file = f.str("chat-template");
  c.log_level = f.str("log-level");
  MS_RETURN_IF_ERROR(parse_log_level(c.log_level).status());
  c.special_tokens_in_content = f.boolean("special-tokens-in-content");
  c.generation_config = f.str("generation-config");
  if (c.generation_config != "auto" && c.generation_config != "none")
    return invalid_argument("--generation-config must be auto or none, got '" + c.generation_config + "'");
  c.override_generation_config = f.str("override-generation-config");
  if (!c.override_generation_config.empty()) {
    // Checked now, so a typo fails at start with the flag's name, not after the model load.
    MS_RETURN_IF_ERROR(load_generation_defaults("", "none", c.override_generation_config).status());
  }
  const char* env_key = std::getenv("MEGASERVE_API_KEY");
  if (f.has("api-key") && f.has("api-key-file")) return invalid_argument("give one of --api-key and --api-key-file");
  if (f.has("api-key-file")) {
    auto text = read_text(f.str("api-key-file"));
    if (!text.is_ok()) return flag_error("api-key-file", text.status());
    std::string key = std::move(text.value());
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
    if (key.empty()) return invalid_argument("--api-key-file: " + f.str("api-key-file") + " is empty");
    c.http.api_key = std::move(key);
  } else if (f.has("api-key")) {
    c.http.api_key = f.str("api-key");
    if (c.http.api_key.empty()) return invalid_argument("--api-key must not be empty");
  } else if (env_key && *env_key) {
    c.http.api_key = env_key;
  }
  if (!c.http.api_key.empty()) {
    if (auto k = Secret::create(c.http.api_key); !k.is_ok()) return flag_error("api-key", k.status());
  }
  return c;
}

int run_serve(const std::vector<std::string>& args) {
  bool help = false;
  auto parsed = parse_serve_args(args, &help);
  if (help) {
    std::fprintf(stdout, "%s", parsed.status().message().c_str());
    return 0;
  }
  if (!parsed.is_ok()) {
    std::fprintf(stderr, "megaserve serve: %s\n", parsed.status().message().c_str());
    return 2;
  }
  const ServeConfig& cfg = parsed.value();
  set_log_level(parse_log_level(cfg.log_level).value());
  MS_LOG(Info) << "serve: " << cfg.summary();
  if (std::find(args.begin(), args.end(), "--api-key") != args.end() ||
      std::any_of(args.begin(), args.end(), [](const std::string& a) { return a.rfind("--api-key=", 0) == 0; })) {
    MS_LOG(Warn) << "--api-key on the command line is visible to every user of this machine (ps); "
                    "use --api-key-file or MEGASERVE_API_KEY";
  }
  auto decision = resolve_backend(cfg.backend, cfg.device, probe_gpus());
  if (!decision.is_ok()) {
    std::fprintf(stderr, "megaserve serve: %s\n", decision.status().message().c_str());
    return 2;
  }
  MS_LOG(Info) << decision->log_line;
  auto fail = [](const Status& s) {
    MS_LOG(Error) << "serve: " << s.message();
    return 1;
  };
  sigset_t sigs = block_shutdown_signals();

  // The port is taken and served before the model loads (minutes for a large
  // checkpoint): a port in use fails at once, and /health answers "loading"
  // (routes that need the model answer 503) until the state turns ready.
  // Handlers read ctx only from then on.
  Metrics metrics;
  ServerContext ctx;
  LoadProgress progress;
  HttpServer http(cfg.http);
  install_api_routes(http, ctx, progress);
  if (Status s = http.bind(); !s.is_ok()) return fail(s);
  http.start();
  MS_LOG(Info) << "listening on http://" << cfg.http.host << ":" << http.port() << " (loading the model)";
  std::fprintf(stdout, "megaserve: listening on http://%s:%d\n", cfg.http.host.c_str(), http.port());
  std::fflush(stdout);

  // The signal thread: during the load there is nothing to drain, so a
  // signal ends the process at once; afterwards it drains.
  std::mutex drain_mu;
  std::condition_variable drained_cv;
  bool drained = false;
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (http.state() == ServerState::kLoading) {
      MS_LOG(Info) << "signal " << sig << " while loading the model: exiting";
      std::fflush(stderr);
      std::_Exit(0);
    }
    drain(http, ctx, sigs, cfg.shutdown_timeout_s);
    std::lock_guard<std::mutex> l(drain_mu);
    drained = true;
    drained_cv.notify_all();
  });
  waiter.detach();
  auto wait_drained = [&] {
    std::unique_lock<std::mutex> l(drain_mu);
    drained_cv.wait(l, [&] { return drained; });
  };

  auto model = load_for_backend(cfg.model_dir, parse_load_format(cfg.load_format).value(), decision->name, cfg.seed,
                                [&progress](const std::string& m) {
                                  MS_LOG(Info) << "load: " << m;
                                  progress.set("loading: " + m);
                                });
  if (!model.is_ok()) return fail(model.status());
  MS_LOG(Info) << "model: " << (*model)->config.summary();
  progress.set("loading the tokenizer");
  auto tok = load_tokenizer(cfg, (*model)->config);
  if (!tok.is_ok()) return fail(tok.status().with_context("loading the tokenizer"));
  if (Status s = tok->check_fits_vocab((*model)->config.vocab_size, cfg.model_dir + "/config.json"); !s.is_ok()) {
    return fail(s);
  }
  std::string template_text = tok->chat_template();
  ChatTemplateOptions template_options;
  // Errors name the template by file name (clients see them; the full path
  // is logged here once).
  template_options.name = std::filesystem::path(tok->chat_template_source()).filename().string();
  if (!cfg.chat_template_file.empty()) {
    auto t = read_text(cfg.chat_template_file);
    if (!t.is_ok()) return fail(t.status().with_context("--chat-template"));
    template_text = t.value();
    template_options.name = std::filesystem::path(cfg.chat_template_file).filename().string();
  }
  if (!template_text.empty()) {
    MS_LOG(Info) << "chat template: "
                 << (cfg.chat_template_file.empty() ? tok->chat_template_source() : cfg.chat_template_file);
  }
  std::optional<ChatTemplate> chat_template;
  if (!template_text.empty()) {
    auto t = ChatTemplate::create(template_text, template_options);
    if (!t.is_ok()) return fail(t.status().with_context("parsing the chat template"));
    // A template that runs into the render limits on "Hello" would fail
    // every request: refuse it now (inspect reports the same).
    if (auto sample = render_sample_chat(*t, *tok); !sample.is_ok()) {
      if (sample.status().code() == StatusCode::kResourceExhausted) return fail(sample.status());
      MS_LOG(Warn) << "a one-message chat does not render: " << sample.status().message();
    }
    chat_template = std::move(t.value());
  } else {
    MS_LOG(Warn) << "the tokenizer has no chat template: /v1/chat/completions will answer 400";
  }
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  if (cfg.tool_call_parser == "auto") {
    nlohmann::json tcfg = nlohmann::json::object();
    if (auto text = read_text(cfg.model_dir + "/tokenizer_config.json"); text.is_ok()) {
      auto parsed = parse_json(text.value());
      if (parsed.is_ok()) tcfg = std::move(parsed.value());
    }
    tool_format = detect_tool_call_format(template_text, tcfg);
  } else {
    tool_format = parse_tool_call_format(cfg.tool_call_parser).value();
  }
  MS_LOG(Info) << "tool-call parser: " << tool_call_format_name(tool_format);

  progress.set("creating the " + decision->name + " backend");
  auto backend = create_backend(cfg, *decision, **model, progress);
  if (!backend.is_ok()) return fail(backend.status());
  EngineOptions eo;
  eo.max_batch = cfg.max_batch;
  eo.prefill_chunk = cfg.prefill_chunk;
  eo.max_waiting = cfg.max_waiting;
  eo.max_model_len = cfg.max_model_len;
  eo.prefix_caching = cfg.prefix_caching;
  auto engine = make_engine(std::move(backend.value()), eo, std::filesystem::absolute(cfg.model_dir).string());
  if (!engine.is_ok()) return fail(engine.status());
  log_kv_capacity(cfg, decision->name, **engine, &ctx);

  ctx.engine = engine->get();
  ctx.tokenizer = &tok.value();
  ctx.chat_template = chat_template ? &*chat_template : nullptr;
  ctx.model_name = cfg.served_model_name;
  ctx.tool_format = tool_format;
  ctx.metrics = &metrics;
  ctx.limits.vocab_size = std::min<int>(tok->vocab_size(), (*model)->config.vocab_size);
  ctx.limits.max_n = kMaxChoices;
  ctx.special_tokens_in_content = cfg.special_tokens_in_content;
  auto gen_defaults = load_generation_defaults(cfg.model_dir, cfg.generation_config, cfg.override_generation_config);
  if (!gen_defaults.is_ok()) return fail(gen_defaults.status());
  ctx.limits.sampling_defaults = *gen_defaults;
  MS_LOG(Info) << "sampling defaults for fields a request leaves out: "
               << (gen_defaults->empty() ? "OpenAI's (temperature 1, top_p 1)" : gen_defaults->describe())
               << " (--generation-config " << cfg.generation_config
               << (cfg.override_generation_config.empty() ? "" : ", --override-generation-config") << ")";
  http.set_state(ServerState::kReady);
  MS_LOG(Info) << "ready: model '" << ctx.model_name << "', max_model_len " << ctx.engine->max_model_len();

  wait_drained();
  http.stop();
  ctx.engine->shutdown();
  MS_LOG(Info) << "server stopped";
  return 0;
}

}  // namespace ms::server
