// Progress of long byte transfers (reading a checkpoint and uploading it to
// the GPU: tens of GB, tens of seconds): byte sizes in words, a throttled
// meter that turns "bytes done so far" into one line with the rate and the
// time left, and the closing line with the average rate. Sizes of transfers
// are decimal (GB, GB/s: how disks and PCIe are rated); memory sizes are
// binary (GiB: how cudaMemGetInfo and vLLM count them).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace ms {

std::string format_gb(uint64_t bytes);   // "61.04 GB" (two decimals; "0.52 GB")
std::string format_gib(uint64_t bytes);  // "139.80 GiB"

// "loading weights: 12.40 / 61.04 GB (20%), 5.12 GB/s, 10 s left"; the rate
// and time left are left out until `seconds` > 0 and bytes have moved.
std::string format_transfer_progress(const std::string& what, uint64_t done, uint64_t total, double seconds);
// "loading weights: 61.04 GB in 11.9 s (5.13 GB/s)".
std::string format_transfer_done(const std::string& what, uint64_t bytes, double seconds);

// Calls `emit` with a progress line at most every `interval_s` seconds of
// update() calls (and never for transfers below `min_total` bytes: a small
// model loads in a blink), and with the closing line from finish().
// Single-threaded: the thread doing the transfer owns it.
class ByteProgress {
 public:
  using Clock = std::chrono::steady_clock;
  ByteProgress(std::string what, uint64_t total, std::function<void(const std::string&)> emit,
               double interval_s = 1.0, uint64_t min_total = uint64_t(1) << 30);
  // `done`: bytes transferred so far (monotonic).
  void update(uint64_t done) { update_at(done, Clock::now()); }
  void finish() { finish_at(Clock::now()); }
  // The same with the time given (tests); start_at() resets the start.
  void start_at(Clock::time_point t) { start_ = last_emit_ = t; }
  void update_at(uint64_t done, Clock::time_point now);
  void finish_at(Clock::time_point now);
  double elapsed_s(Clock::time_point now) const { return std::chrono::duration<double>(now - start_).count(); }

 private:
  std::string what_;
  uint64_t total_ = 0, done_ = 0;
  std::function<void(const std::string&)> emit_;
  double interval_s_ = 1.0;
  bool quiet_ = false;
  Clock::time_point start_, last_emit_;
};

}  // namespace ms
