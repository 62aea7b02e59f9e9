// `megaserve serve` and `megaserve bench serve`: entry points for the CLI table.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "server/http_server.h"

namespace ms::server {

// Every serve flag, parsed and validated; logged at start.
struct ServeConfig {
  std::string model_dir;
  std::string served_model_name;  // default: the model directory's base name
  std::string backend = "auto";   // auto | ref | cuda (resolve_backend decides at start)
  int device = -1;                // --device (-1: not given)
  std::string decode_backend = "auto";  // cuda: megakernel | layered | auto
  std::string load_format = "auto";        // auto | dummy
  uint64_t seed = 0;                        // dummy weights
  int max_batch = 8;
  int prefill_chunk = 512;
  int kv_cache_mb = 0;            // 0: the backend sizes it (cuda: gpu_memory_utilization; ref: 512 MiB)
  double gpu_memory_utilization = 0.9;
  int block_size = 64;
  int max_model_len = 0;          // 0: the model's
  int max_waiting = 256;
  bool prefix_caching = true;
  std::string tool_call_parser = "auto";  // auto | none | hermes | cohere | llama3_json
  std::string chat_template_file;         // overrides the tokenizer's template
  std::string log_level = "info";
  int cpu_threads = 0;                    // ref backend threads (0: all)
  int shutdown_timeout_s = 25;            // SIGTERM: in-flight requests get this long to finish
  bool special_tokens_in_content = false; // control-token text in messages becomes control tokens
  std::string generation_config = "auto";  // auto: generation_config.json's sampling defaults; none
  std::string override_generation_config;  // JSON object of sampling defaults on top ("" none)
  HttpOptions http;
  std::string summary() const;  // one line, api key redacted
};

// Parses `serve` flags. The API key comes from --api-key-file or --api-key
// (not both; --api-key is visible in `ps`), else the environment variable
// MEGASERVE_API_KEY. Errors name the flag.
// *help is set for --help (the usage text is then in the Status message).
Result<ServeConfig> parse_serve_args(const std::vector<std::string>& args, bool* help);

// `megaserve serve ...`: returns the process exit code (2 for bad flags).
int run_serve(const std::vector<std::string>& args);
// `megaserve bench serve ...`.
int run_bench_serve(const std::vector<std::string>& args);

}  // namespace ms::server
