#include "core/byte_progress.h"

#include <cmath>
#include <cstdio>
#include <utility>

namespace ms {

std::string format_gb(uint64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f GB", double(bytes) / 1e9);
  return buf;
}

std::string format_gib(uint64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(uint64_t(1) << 30));
  return buf;
}

std::string format_transfer_progress(const std::string& what, uint64_t done, uint64_t total, double seconds) {
  char buf[256];
  const double pct = total > 0 ? 100.0 * double(done) / double(total) : 100.0;
  int n = std::snprintf(buf, sizeof buf, "%s: %.2f / %.2f GB (%.0f%%)", what.c_str(), double(done) / 1e9,
                        double(total) / 1e9, std::floor(pct));
  std::string out(buf, n > 0 ? size_t(n) : 0);
  if (seconds > 0 && done > 0) {
    const double rate = double(done) / seconds;  // bytes/s
    const double left = done < total ? double(total - done) / rate : 0.0;
    std::snprintf(buf, sizeof buf, ", %.2f GB/s, %.0f s left", rate / 1e9, std::ceil(left));
    out += buf;
  }
  return out;
}

std::string format_transfer_done(const std::string& what, uint64_t bytes, double seconds) {
  char buf[256];
  if (seconds > 0)
    std::snprintf(buf, sizeof buf, "%s: %.2f GB in %.1f s (%.2f GB/s)", what.c_str(), double(bytes) / 1e9, seconds,
                  double(bytes) / seconds / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%s: %.2f GB", what.c_str(), double(bytes) / 1e9);
  return buf;
}

ByteProgress::ByteProgress(std::string what, uint64_t total, std::function<void(const std::string&)> emit,
                           double interval_s, uint64_t min_total)
    : what_(std::move(what)), total_(total), emit_(std::move(emit)), interval_s_(interval_s),
      quiet_(total < min_total || !emit_), start_(Clock::now()), last_emit_(start_) {}

void ByteProgress::update_at(uint64_t done, Clock::time_point now) {
  done_ = done;
  if (quiet_ || std::chrono::duration<double>(now - last_emit_).count() < interval_s_) return;
  last_emit_ = now;
  emit_(format_transfer_progress(what_, done_, total_, elapsed_s(now)));
}

void ByteProgress::finish_at(Clock::time_point now) {
  if (quiet_) return;
  emit_(format_transfer_done(what_, done_, elapsed_s(now)));
}

}  // namespace ms
