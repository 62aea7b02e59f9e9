// weight_check.cpp: see weight_check.h.
#include "model/weight_check.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/byte_progress.h"
#include "core/thread_pool.h"

namespace ms {
namespace {

// Exponent masks replicated over a 64-bit word, and the lane layout.
struct Lanes {
  uint64_t exponent;  // exponent bits of every lane
  uint64_t ones;      // 1 in the lowest bit of every lane
  uint64_t highs;     // the top bit of every lane
};

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

Lanes lanes_of(DType t) {
  switch (t) {
    case DType::kBF16: return {0x7F807F807F807F80ull, 0x0001000100010001ull, 0x8000800080008000ull};
    case DType::kF16: return {0x7C007C007C007C00ull, 0x0001000100010001ull, 0x8000800080008000ull};
    default: return {0x7F8000007F800000ull, 0x0000000100000001ull, 0x8000000080000000ull};
  }
}

// Whether any of the 8-byte words in [p, p + words * 8) has an element with
// all exponent bits set. t = (w & exp) ^ exp has a zero lane exactly there;
// (t - ones) & ~t & highs is non-zero iff some lane of t is zero (t's lanes
// never have their top bit set, so the classic zero-lane test is exact).
bool any_all_ones_exponent(const uint8_t* p, size_t words, const Lanes& l) {
  uint64_t acc = 0;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + i * 8, 8);  // checkpoint offsets need not be aligned
    const uint64_t t = (w & l.exponent) ^ l.exponent;
    acc |= (t - l.ones) & ~t & l.highs;
  }
  return acc != 0;
}

// Scalar test of element i.
bool non_finite_at(const uint8_t* data, int64_t i, DType t) {
  if (t == DType::kF32) {
    uint32_t v;
    std::memcpy(&v, data + i * 4, 4);
    return (v & 0x7F800000u) == 0x7F800000u;
  }
  uint16_t v;
  std::memcpy(&v, data + i * 2, 2);
  const uint16_t e = t == DType::kBF16 ? 0x7F80 : 0x7C00;
  return (v & e) == e;
}

std::string describe(const uint8_t* data, int64_t i, DType t) {
  uint64_t bits = 0;
  bool mantissa = false, negative = false;
  if (t == DType::kF32) {
    uint32_t v;
    std::memcpy(&v, data + i * 4, 4);
    bits = v;
    mantissa = (v & 0x007FFFFFu) != 0;
    negative = v >> 31;
  } else {
    uint16_t v;
    std::memcpy(&v, data + i * 2, 2);
    bits = v;
    mantissa = (v & (t == DType::kBF16 ? 0x007F : 0x03FF)) != 0;
    negative = v >> 15;
  }
  char hex[32];
  std::snprintf(hex, sizeof(hex), "0x%0*llx", t == DType::kF32 ? 8 : 4, static_cast<unsigned long long>(bits));
  return std::string(mantissa ? "NaN" : negative ? "-Inf" : "+Inf") + " (" + dtype_name(t) + " " + hex + ")";
}

struct Chunk {
  const TensorInfo* tensor;
  int64_t first, count;  // elements
};

}  // namespace

int64_t first_non_finite(const uint8_t* data, int64_t count, DType dtype) {
  if (!is_float(dtype) || count <= 0) return -1;
  const size_t esize = dtype_size(dtype);
  const size_t words = static_cast<size_t>(count) * esize / 8;
  if (any_all_ones_exponent(data, words, lanes_of(dtype))) {
    for (int64_t i = 0; i < count; ++i)
      if (non_finite_at(data, i, dtype)) return i;
  }
  for (int64_t i = static_cast<int64_t>(words * 8 / esize); i < count; ++i)  // the tail past the last word
    if (non_finite_at(data, i, dtype)) return i;
  return -1;
}

Status check_finite(const Checkpoint& ck, int threads, FiniteCheckStats* stats, const FiniteCheckProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int64_t kChunkBytes = int64_t(8) << 20;
  std::vector<Chunk> chunks;
  uint64_t bytes = 0;
  for (const auto& [name, t] : ck.tensors()) {
    if (!is_float(t.dtype)) continue;
    const int64_t n = t.numel(), per = kChunkBytes / static_cast<int64_t>(dtype_size(t.dtype));
    for (int64_t b = 0; b < n; b += per) chunks.push_back({&t, b, std::min(per, n - b)});
    bytes += t.nbytes;
  }
  // First bad element of each chunk, or -1; chunks are in checkpoint order.
  std::vector<int64_t> bad(chunks.size(), -1);
  std::atomic<bool> any{false};
  // The meter: its own thread polls the bytes done (ByteProgress is
  // single-threaded) every 100 ms until the scan ends (its last poll is
  // throttled like the others). A guard stops and joins it on every way out
  // of this scope, also when building the pool throws.
  std::atomic<uint64_t> done{0};
  struct Meter {
    std::mutex mu;
    std::condition_variable cv;
    bool scanned = false;
    std::thread thread;
    void stop() {
      if (!thread.joinable()) return;
      {
        std::lock_guard<std::mutex> lock(mu);
        scanned = true;
      }
      cv.notify_all();
      thread.join();
    }
    ~Meter() { stop(); }
  } meter;
  if (progress.emit) {
    meter.thread = std::thread([&] {
      ByteProgress bp("reading the weights (finite check)", bytes, progress.emit, progress.interval_s,
                      progress.min_total);
      std::unique_lock<std::mutex> lock(meter.mu);
      while (!meter.cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return meter.scanned; }))
        bp.update(done.load());
      bp.update(done.load());
    });
  }
  ThreadPool pool(threads);
  pool.parallel_for(static_cast<int64_t>(chunks.size()), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const Chunk& k = chunks[c];
      const int64_t esize = static_cast<int64_t>(dtype_size(k.tensor->dtype));
      const uint8_t* p = k.tensor->data + k.first * esize;
      bad[c] = first_non_finite(p, k.count, k.tensor->dtype);
      if (bad[c] >= 0) any = true;
      done.fetch_add(static_cast<uint64_t>(k.count * esize), std::memory_order_relaxed);
    }
  });
  meter.stop();
  if (stats) {
    stats->bytes = bytes;
    stats->threads = pool.size();
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (!any) return Status::ok();
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (bad[c] < 0) continue;
    const TensorInfo& t = *chunks[c].tensor;
    const int64_t i = chunks[c].first + bad[c];
    return data_loss(t.file + ": tensor '" + t.name + "' " + t.shape_str() + ": element " + std::to_string(i) +
                     " is " + describe(t.data, i, t.dtype) + "; weights must be finite");
  }
  return Status::ok();
}

}  // namespace ms
