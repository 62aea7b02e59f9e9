#include "model/staged_upload.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace ms {
namespace {

using Clock = std::chrono::steady_clock;

// Pieces start 256-byte aligned in a buffer (fp32 stores and DMA bursts).
constexpr size_t kPieceAlign = 256;
// Conversions this large are split over the pool (smaller ones are not worth a wake-up).
constexpr int64_t kParallelElems = int64_t(1) << 20;

size_t out_size(StageFormat f) { return f == StageFormat::kBF16 ? 2 : 4; }
uint64_t src_bytes(const MatView& m) { return uint64_t(m.numel()) * dtype_size(m.dtype); }
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Keeps madvise(MADV_WILLNEED) a fixed number of source bytes ahead of the
// conversion, walking the jobs in upload order. Errors are ignored: advice
// on memory that is not a file mapping, or past its end, changes nothing.
class Prefetcher {
 public:
  Prefetcher(const std::vector<UploadJob>& jobs, size_t ahead)
      : jobs_(jobs), ahead_(ahead), page_(static_cast<uintptr_t>(sysconf(_SC_PAGESIZE))) {}

  void advance(uint64_t done) {
    const uint64_t horizon = done + ahead_;
    while (ahead_ > 0 && issued_ < horizon && job_ < jobs_.size()) {
      const MatView& m = jobs_[job_].src;
      const uint64_t bytes = src_bytes(m);
      const uint64_t len = std::min(bytes - offset_, horizon - issued_);
      if (len > 0) advise(m.data + offset_, len);
      offset_ += len;
      issued_ += len;
      if (offset_ == bytes) {
        ++job_;
        offset_ = 0;
      }
    }
  }

 private:
  void advise(const uint8_t* p, uint64_t len) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(page_ - 1);
    (void)madvise(reinterpret_cast<void*>(a), reinterpret_cast<uintptr_t>(p) + len - a, MADV_WILLNEED);
  }

  const std::vector<UploadJob>& jobs_;
  const uint64_t ahead_;
  const uintptr_t page_;
  size_t job_ = 0;
  uint64_t offset_ = 0;  // within jobs_[job_]
  uint64_t issued_ = 0;
};

void convert(const UploadJob& j, int64_t begin, int64_t n, uint8_t* out, ThreadPool* pool) {
  auto run = [&](int64_t a, int64_t b) {
    if (j.format == StageFormat::kBF16)
      j.src.to_bf16(begin + a, b - a, reinterpret_cast<uint16_t*>(out) + a);
    else
      j.src.to_f32(begin + a, b - a, reinterpret_cast<float*>(out) + a);
  };
  if (pool && pool->size() > 1 && n >= kParallelElems)
    pool->parallel_for(n, run, kParallelElems / 4);
  else
    run(0, n);
}

}  // namespace

Result<StagedUploadStats> staged_upload(const std::vector<UploadJob>& jobs, StagingSink& sink,
                                        const StagedUploadOptions& opt) {
  const size_t cap = sink.buffer_bytes() / kPieceAlign * kPieceAlign;
  if (cap < kPieceAlign) return invalid_argument("staging buffers of " + std::to_string(sink.buffer_bytes()) +
                                                 " bytes are too small");
  StagedUploadStats st;
  uint64_t total = 0;
  for (const UploadJob& j : jobs) {
    if (j.src.numel() > 0 && (j.src.empty() || j.dst == nullptr))
      return internal_error("upload of '" + j.src.name + "': no source or destination");
    if (j.src.dtype != DType::kBF16 && j.src.dtype != DType::kF16 && j.src.dtype != DType::kF32)
      return invalid_argument("upload of '" + j.src.name + "': dtype " + dtype_name(j.src.dtype) +
                              " is not a float type");
    total += src_bytes(j.src);
  }
  const auto t0 = Clock::now();
  Prefetcher prefetch(jobs, opt.prefetch_bytes);
  prefetch.advance(0);
  int b = 0;          // the buffer being filled
  size_t fill = 0;    // bytes used in it
  bool open = false;  // it holds pieces not yet sealed
  for (const UploadJob& j : jobs) {
    const size_t osz = out_size(j.format), isz = dtype_size(j.src.dtype);
    const int64_t n = j.src.numel();
    for (int64_t i = 0; i < n;) {
      const int64_t room = static_cast<int64_t>((cap - fill) / osz);
      if (room == 0) {
        MS_RETURN_IF_ERROR(sink.seal(b));
        b ^= 1;
        const auto tw = Clock::now();
        MS_RETURN_IF_ERROR(sink.wait(b));
        st.wait_seconds += since(tw);
        fill = 0;
        open = false;
        continue;
      }
      const int64_t k = std::min(room, n - i);
      const auto tc = Clock::now();
      convert(j, i, k, sink.buffer(b) + fill, opt.pool);
      st.convert_seconds += since(tc);
      MS_RETURN_IF_ERROR(sink.copy(b, fill, static_cast<uint8_t*>(j.dst) + size_t(i) * osz, size_t(k) * osz));
      open = true;
      ++st.pieces;
      fill = std::min(cap, (fill + size_t(k) * osz + kPieceAlign - 1) / kPieceAlign * kPieceAlign);
      i += k;
      st.src_bytes += uint64_t(k) * isz;
      st.dst_bytes += uint64_t(k) * osz;
      prefetch.advance(st.src_bytes);
      if (opt.progress) opt.progress(st.src_bytes, total);
    }
  }
  if (open) MS_RETURN_IF_ERROR(sink.seal(b));
  const auto tf = Clock::now();
  MS_RETURN_IF_ERROR(sink.finish());
  st.wait_seconds += since(tf);
  st.seconds = since(t0);
  return st;
}

}  // namespace ms
