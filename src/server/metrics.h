// Server-side metrics in Prometheus text format: latency histograms measured
// by the HTTP layer (TTFT, TPOT, ITL, end-to-end), request counters by
// endpoint and status, and the engine's gauges and counters (EngineStats).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace ms::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Appends `name_bucket{le=..}`, `name_sum`, `name_count` lines.
  void render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last: +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void observe_tpot(double seconds);
  void observe_e2e(double seconds);
  void count_request(const std::string& endpoint, int status);
  void add_tokens(uint64_t prompt, uint64_t completion);
  std::string render(const EngineStats& engine) const;

 private:
  mutable std::mutex mu_;  // guards everything below
  Histogram ttft_, itl_, tpot_, e2e_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, completion_tokens_ = 0;
};

}  // namespace ms::server
