// megaserve's HTTP API on top of the HttpServer: the OpenAI endpoints
// (/v1/chat/completions, /v1/completions, /v1/models), /tokenize,
// /detokenize, /version, /health (loading / ready / unhealthy / draining,
// with the reason) and Prometheus /metrics; OpenAI error bodies for every
// failure. Generation and tokenization run on handler threads and only wait
// on their request channels; the engine thread alone touches the model.
#pragma once

#include <mutex>
#include <string>

#include "server/generation.h"
#include "server/http_server.h"

namespace ms::server {

// What /health says while the model loads (the last progress line).
class LoadProgress {
 public:
  void set(std::string detail);
  std::string get() const;

 private:
  mutable std::mutex mu_;  // guards detail_
  std::string detail_ = "starting";
};

// Registers every route on `server`. ctx's fields are read by handlers only
// once the server state is ready (routes that need the model answer 503
// before); ctx, progress and server must outlive the serving.
void install_api_routes(HttpServer& server, ServerContext& ctx, const LoadProgress& progress);

}  // namespace ms::server
