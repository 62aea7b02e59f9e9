// `megaserve bench serve`: a load generator for any OpenAI-compatible server,
// in the spirit of `vllm bench serve`. Requests arrive as a Poisson process
// (--request-rate, or all at once) with at most --max-concurrency in flight;
// each streams its output, and the client timestamps every content chunk to
// measure TTFT (first chunk), ITL (gaps between chunks), TPOT ((latency -
// TTFT) / (output tokens - 1)) and end-to-end latency. Prompts are random:
// words (default; valid for any vocabulary) or random token ids (completions,
// --prompt-kind tokens: exact prompt lengths) of --input-len +- --range-ratio.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "core/flags.h"
#include "server/api_error.h"
#include "server/serve_command.h"

namespace ms::server {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string prefix;  // path prefix of the base URL (e.g. "/v1" is added by us)
  std::string model, endpoint = "completions", api_key, result_json, prompt_kind;
  int num_prompts = 100, max_concurrency = 0, input_len = 128, output_len = 64, vocab_lo = 1000, vocab_hi = 20000;
  double request_rate = INFINITY, range_ratio = 0.0;
  uint64_t seed = 0;
  bool ignore_eos = true;
  int timeout_s = 600;
};

struct Prompt {
  Json prompt;  // string or token ids
  int input_len = 0, output_len = 0;
};

struct Outcome {
  bool ok = false;
  std::string error;
  int input_len = 0, output_tokens = 0;
  double ttft = 0, latency = 0;
  std::vector<double> itl;
};

const char* kWords[] = {"time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world",
                        "school", "state", "family", "student", "group", "country", "problem", "hand", "part",
                        "place", "case", "week", "company", "system", "program", "question", "work", "number",
                        "night", "point", "home", "water", "room", "mother", "area", "money", "story", "fact",
                        "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue", "side"};

Status parse_base_url(const std::string& url, BenchConfig* c) {
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  } else if (rest.find("://") != std::string::npos) {
    return invalid_argument("--base-url: only http:// is supported, got '" + url + "'");
  }
  auto slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  c->prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!c->prefix.empty() && c->prefix.back() == '/') c->prefix.pop_back();
  if (c->prefix.size() >= 3 && c->prefix.compare(c->prefix.size() - 3, 3, "/v1") == 0) c->prefix.resize(c->prefix.size() - 3);
  auto colon = hostport.rfind(':');
  if (colon == std::string::npos) {
    c->host = hostport;
    c->port = 80;
  } else {
    c->host = hostport.substr(0, colon);
    char* end = nullptr;
    long p = std::strtol(hostport.c_str() + colon + 1, &end, 10);
    if (*end || p <= 0 || p > 65535) return invalid_argument("--base-url: bad port in '" + url + "'");
    c->port = static_cast<int>(p);
  }
  if (c->host.empty()) return invalid_argument("--base-url: no host in '" + url + "'");
  return Status::ok();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = p / 100.0 * double(v.size() - 1);
  size_t i = static_cast<size_t>(pos);
  double f = pos - double(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

std::vector<Prompt> make_prompts(const BenchConfig& c) {
  std::mt19937_64 rng(c.seed);
  auto len = [&](int base) {
    int lo = std::max(1, static_cast<int>(std::floor(base * (1 - c.range_ratio))));
    int hi = std::max(lo, static_cast<int>(std::ceil(base * (1 + c.range_ratio))));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::vector<Prompt> out;
  for (int i = 0; i < c.num_prompts; ++i) {
    Prompt p;
    p.input_len = len(c.input_len);
    p.output_len = len(c.output_len);
    if (c.prompt_kind == "tokens") {
      std::uniform_int_distribution<int> tok(c.vocab_lo, c.vocab_hi - 1);
      Json ids = Json::array();
      for (int k = 0; k < p.input_len; ++k) ids.push_back(tok(rng));
      p.prompt = ids;
    } else {
      std::uniform_int_distribution<size_t> w(0, std::size(kWords) - 1);
      std::string s;
      for (int k = 0; k < p.input_len; ++k) s += (k ? " " : "") + std::string(kWords[w(rng)]);
      p.prompt = s;
    }
    out.push_back(std::move(p));
  }
  return out;
}

Outcome run_one(const BenchConfig& c, const Prompt& p) {
  Outcome o;
  o.input_len = p.input_len;
  Json body = Json::object();
  body["model"] = c.model;
  if (c.endpoint == "chat") {
    body["messages"] = Json::array({Json{{"role", "user"}, {"content", p.prompt}}});
    body["max_completion_tokens"] = p.output_len;
  } else {
    body["prompt"] = p.prompt;
    body["max_tokens"] = p.output_len;
  }
  body["temperature"] = 0.0;
  body["stream"] = true;
  body["stream_options"] = Json{{"include_usage", true}};
  if (c.ignore_eos) body["ignore_eos"] = true;

  httplib::Client cli(c.host, c.port);
  cli.set_read_timeout(c.timeout_s, 0);
  cli.set_connection_timeout(10, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = c.prefix + (c.endpoint == "chat" ? "/v1/chat/completions" : "/v1/completions");
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  if (!c.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + c.api_key);
  req.body = body.dump();

  auto t0 = Clock::now();
  Clock::time_point last;
  bool first = true;
  int chunks = 0, usage_tokens = -1;
  std::string buf, err_body;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      std::string payload = ev.substr(6);
      if (payload == "[DONE]") continue;
      Json j = Json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        err_body = payload;
        continue;
      }
      if (j.contains("usage") && j["usage"].is_object()) usage_tokens = j["usage"].value("completion_tokens", -1);
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const Json& ch = j["choices"][0];
      bool has_text = false;
      if (ch.contains("text") && ch["text"].is_string() && !ch["text"].get<std::string>().empty()) has_text = true;
      if (ch.contains("delta")) {
        const Json& d = ch["delta"];
        if ((d.contains("content") && d["content"].is_string() && !d["content"].get<std::string>().empty()) ||
            d.contains("tool_calls") || d.contains("reasoning_content")) {
          has_text = true;
        }
      }
      if (!has_text) continue;
      auto now = Clock::now();
      if (first) {
        o.ttft = std::chrono::duration<double>(now - t0).count();
        first = false;
      } else {
        o.itl.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
      ++chunks;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  bool sent = cli.send(req, res, error);
  o.latency = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!sent) {
    o.error = "connection error: " + httplib::to_string(error);
    return o;
  }
  if (res.status != 200) {
    o.error = "HTTP " + std::to_string(res.status) + ": " + buf.substr(0, 300);
    return o;
  }
  if (!err_body.empty()) {
    o.error = "stream error: " + err_body.substr(0, 300);
    return o;
  }
  o.output_tokens = usage_tokens >= 0 ? usage_tokens : chunks;
  o.ok = !first;
  if (!o.ok) o.error = "no output";
  return o;
}

Result<std::string> first_model(const BenchConfig& c) {
  httplib::Client cli(c.host, c.port);
  cli.set_connection_timeout(10, 0);
  httplib::Headers h;
  if (!c.api_key.empty()) h.emplace("Authorization", "Bearer " + c.api_key);
  auto res = cli.Get((c.prefix + "/v1/models").c_str(), h);
  if (!res) return unavailable("cannot reach " + c.host + ":" + std::to_string(c.port) + ": " + httplib::to_string(res.error()));
  if (res->status != 200) return unavailable("GET /v1/models answered " + std::to_string(res->status));
  Json j = Json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty()) return unavailable("no model in /v1/models");
  return j["data"][0].value("id", std::string());
}

}  // namespace

int run_bench_serve(const std::vector<std::string>& args) {
  Flags f;
  f.add("base-url", "server URL", "http://127.0.0.1:8000")
      .add("model", "model id (default: the first of /v1/models)")
      .add("endpoint", "completions or chat", "completions")
      .add("num-prompts", "requests to send", "100")
      .add("request-rate", "Poisson arrival rate in requests/s, or inf (all at once)", "inf")
      .add("max-concurrency", "requests in flight at most (0: no limit)", "0")
      .add("input-len", "prompt length (words, or token ids with --prompt-kind tokens)", "128")
      .add("output-len", "max tokens per request", "64")
      .add("range-ratio", "lengths drawn uniformly from len * [1 - r, 1 + r]", "0")
      .add("prompt-kind", "words (any model) or tokens (random ids in --vocab-range, completions only: exact lengths)",
           "words")
      .add("vocab-range", "token ids drawn from [lo, hi) for token prompts, as lo:hi", "1000:20000")
      .add("seed", "random seed of the prompts and arrivals", "0")
      .add("api-key", "bearer token (env OPENAI_API_KEY or MEGASERVE_API_KEY)")
      .add("no-ignore-eos", "do not send ignore_eos (for servers that reject it)", "", true)
      .add("timeout", "per-request timeout in seconds", "600")
      .add("result-json", "write the results here as JSON");
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "megaserve bench serve: %s\n", s.message().c_str());
    return 2;
  };
  if (Status s = f.parse(args); !s.is_ok()) return fail(s);
  if (f.help_requested()) {
    std::printf("%s", f.usage("bench serve").c_str());
    return 0;
  }
  BenchConfig c;
  if (Status s = parse_base_url(f.str("base-url"), &c); !s.is_ok()) return fail(s);
  c.endpoint = f.str("endpoint");
  if (c.endpoint != "chat" && c.endpoint != "completions") {
    return fail(invalid_argument("--endpoint must be chat or completions, got '" + c.endpoint + "'"));
  }
  c.prompt_kind = f.str("prompt-kind");
  if (c.prompt_kind != "tokens" && c.prompt_kind != "words") return fail(invalid_argument("--prompt-kind must be tokens or words"));
  if (c.prompt_kind == "tokens" && c.endpoint == "chat") return fail(invalid_argument("--prompt-kind tokens needs --endpoint completions"));
  auto geti = [&](const char* name, int64_t lo, int64_t hi, int* out) -> Status {
    auto v = f.integer(name, lo, hi);
    if (!v.is_ok()) return v.status();
    *out = static_cast<int>(*v);
    return Status::ok();
  };
  for (auto [name, lo, hi, out] : {std::tuple{"num-prompts", 1, 1000000, &c.num_prompts},
                                   std::tuple{"max-concurrency", 0, 100000, &c.max_concurrency},
                                   std::tuple{"input-len", 1, 10000000, &c.input_len},
                                   std::tuple{"output-len", 1, 10000000, &c.output_len},
                                   std::tuple{"timeout", 1, 86400, &c.timeout_s}}) {
    if (Status s = geti(name, lo, hi, out); !s.is_ok()) return fail(s);
  }
  std::string rate = f.str("request-rate");
  if (rate != "inf") {
    auto r = f.number("request-rate", 1e-6, 1e9);
    if (!r.is_ok()) return fail(r.status());
    c.request_rate = *r;
  }
  auto rr = f.number("range-ratio", 0, 0.999);
  if (!rr.is_ok()) return fail(rr.status());
  c.range_ratio = *rr;
  auto seed = f.integer("seed", 0, INT64_MAX);
  if (!seed.is_ok()) return fail(seed.status());
  c.seed = static_cast<uint64_t>(*seed);
  std::string vr = f.str("vocab-range");
  if (std::sscanf(vr.c_str(), "%d:%d", &c.vocab_lo, &c.vocab_hi) != 2 || c.vocab_lo < 0 || c.vocab_hi <= c.vocab_lo) {
    return fail(invalid_argument("--vocab-range must be LO:HI with 0 <= LO < HI, got '" + vr + "'"));
  }
  c.ignore_eos = !f.boolean("no-ignore-eos");
  c.api_key = f.str("api-key");
  if (c.api_key.empty()) {
    if (const char* e = std::getenv("OPENAI_API_KEY")) c.api_key = e;
    else if (const char* e2 = std::getenv("MEGASERVE_API_KEY")) c.api_key = e2;
  }
  c.result_json = f.str("result-json");
  c.model = f.str("model");
  if (c.model.empty()) {
    auto m = first_model(c);
    if (!m.is_ok()) return fail(m.status());
    c.model = m.value();
  }

  std::vector<Prompt> prompts = make_prompts(c);
  // Arrival offsets (seconds from the start): Poisson process, or all at 0.
  std::vector<double> arrivals(c.num_prompts, 0.0);
  if (std::isfinite(c.request_rate)) {
    std::mt19937_64 rng(c.seed ^ 0x9e3779b97f4a7c15ull);
    std::exponential_distribution<double> gap(c.request_rate);
    double t = 0;
    for (auto& a : arrivals) {
      a = t;
      t += gap(rng);
    }
  }
  int workers = c.max_concurrency > 0 ? std::min(c.max_concurrency, c.num_prompts) : std::min(c.num_prompts, 1024);
  std::printf("bench serve: %s:%d model=%s endpoint=%s prompts=%d rate=%s concurrency=%s input=%d output=%d\n",
              c.host.c_str(), c.port, c.model.c_str(), c.endpoint.c_str(), c.num_prompts, rate.c_str(),
              c.max_concurrency ? std::to_string(c.max_concurrency).c_str() : "unlimited", c.input_len, c.output_len);
  std::fflush(stdout);

  std::vector<Outcome> outcomes(c.num_prompts);
  std::atomic<int> next{0};
  auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (;;) {
        int i = next.fetch_add(1);
        if (i >= c.num_prompts) return;
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(arrivals[i])));
        outcomes[i] = run_one(c, prompts[i]);
      }
    });
  }
  for (auto& t : pool) t.join();
  double duration = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, tpot, itl, e2e;
  int ok = 0;
  long long in_tokens = 0, out_tokens = 0;
  std::string first_error;
  for (const auto& o : outcomes) {
    if (!o.ok) {
      if (first_error.empty()) first_error = o.error;
      continue;
    }
    ++ok;
    in_tokens += o.input_len;
    out_tokens += o.output_tokens;
    ttft.push_back(o.ttft);
    e2e.push_back(o.latency);
    if (o.output_tokens > 1) tpot.push_back((o.latency - o.ttft) / (o.output_tokens - 1));
    itl.insert(itl.end(), o.itl.begin(), o.itl.end());
  }
  Json result = Json::object();
  result["base_url"] = f.str("base-url");
  result["model"] = c.model;
  result["endpoint"] = c.endpoint;
  result["num_prompts"] = c.num_prompts;
  result["request_rate"] = rate;
  result["max_concurrency"] = c.max_concurrency;
  result["input_len"] = c.input_len;
  result["output_len"] = c.output_len;
  result["completed"] = ok;
  result["failed"] = c.num_prompts - ok;
  result["duration_s"] = duration;
  result["total_input_tokens"] = in_tokens;
  result["total_output_tokens"] = out_tokens;
  result["request_throughput"] = ok / duration;
  result["output_throughput"] = double(out_tokens) / duration;
  result["total_token_throughput"] = double(in_tokens + out_tokens) / duration;

  std::printf("============ Serving Benchmark Result ============\n");
  std::printf("%-40s %10d\n", "Successful requests:", ok);
  std::printf("%-40s %10d\n", "Failed requests:", c.num_prompts - ok);
  std::printf("%-40s %10.2f\n", "Benchmark duration (s):", duration);
  std::printf("%-40s %10lld\n", "Total input tokens:", in_tokens);
  std::printf("%-40s %10lld\n", "Total generated tokens:", out_tokens);
  std::printf("%-40s %10.2f\n", "Request throughput (req/s):", ok / duration);
  std::printf("%-40s %10.2f\n", "Output token throughput (tok/s):", out_tokens / duration);
  std::printf("%-40s %10.2f\n", "Total token throughput (tok/s):", (in_tokens + out_tokens) / duration);
  auto section = [&](const char* title, const char* key, const std::vector<double>& v) {
    std::printf("---------------%s---------------\n", title);
    double m = mean(v) * 1e3, p50 = percentile(v, 50) * 1e3, p99 = percentile(v, 99) * 1e3;
    std::printf("%-40s %10.2f\n", (std::string("Mean ") + key + " (ms):").c_str(), m);
    std::printf("%-40s %10.2f\n", (std::string("Median ") + key + " (ms):").c_str(), p50);
    std::printf("%-40s %10.2f\n", (std::string("P99 ") + key + " (ms):").c_str(), p99);
    std::string k = key;
    std::transform(k.begin(), k.end(), k.begin(), ::tolower);
    result["mean_" + k + "_ms"] = m;
    result["median_" + k + "_ms"] = p50;
    result["p99_" + k + "_ms"] = p99;
  };
  section("Time to First Token", "TTFT", ttft);
  section("Time per Output Token (excl. 1st token)", "TPOT", tpot);
  section("Inter-token Latency", "ITL", itl);
  section("End-to-end Latency", "E2EL", e2e);
  std::printf("==================================================\n");
  if (!first_error.empty()) {
    std::printf("first error: %s\n", first_error.c_str());
    result["first_error"] = first_error;
  }
  if (!c.result_json.empty()) {
    std::ofstream out(c.result_json);
    out << result.dump(2) << "\n";
    if (!out) return fail(unavailable("cannot write " + c.result_json));
  }
  return ok == c.num_prompts ? 0 : 1;
}

}  // namespace ms::server
