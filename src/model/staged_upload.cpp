#include "model/staged_upload.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

namespace ms {
namespace {

using Clock = std::chrono::steady_clock;

// Pieces start 256-byte aligned in a buffer (fp32 stores and DMA bursts).
constexpr size_t kPieceAlign = 256;
// O_DIRECT: file offsets, lengths and buffer addresses in multiples of 4 KiB
// (the largest logical block size of common devices).
constexpr uint64_t kDirectAlign = 4096;
// One pread per MiB, spread over the pool: the pool's size is the queue depth.
constexpr uint64_t kDirectChunk = uint64_t(1) << 20;
// A direct piece shorter than this waits for a fresh buffer instead (when the
// buffer holds pieces already; a fresh one always takes one).
constexpr uint64_t kDirectMinPiece = uint64_t(64) << 10;
// Conversions this large are split over the pool (smaller ones are not worth a wake-up).
constexpr int64_t kParallelElems = int64_t(1) << 20;

size_t out_size(StageFormat f) { return f == StageFormat::kBF16 ? 2 : 4; }
uint64_t src_bytes(const MatView& m) { return uint64_t(m.numel()) * dtype_size(m.dtype); }
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Keeps madvise(MADV_WILLNEED) a fixed number of source bytes ahead of the
// conversion, walking the jobs in upload order (jobs read with O_DIRECT
// skipped: they bypass the page cache). Errors are ignored: advice on memory
// that is not a file mapping, or past its end, changes nothing.
class Prefetcher {
 public:
  Prefetcher(const std::vector<UploadJob>& jobs, const std::vector<char>& direct, size_t ahead)
      : jobs_(jobs), direct_(direct), ahead_(ahead), page_(static_cast<uintptr_t>(sysconf(_SC_PAGESIZE))) {}

  void advance(uint64_t done) {
    const uint64_t horizon = done + ahead_;
    while (ahead_ > 0 && issued_ < horizon && job_ < jobs_.size()) {
      const MatView& m = jobs_[job_].src;
      const uint64_t bytes = src_bytes(m);
      const uint64_t len = std::min(bytes - offset_, horizon - issued_);
      if (len > 0 && !direct_[job_]) advise(m.data + offset_, len);
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
  const std::vector<char>& direct_;
  const uint64_t ahead_;
  const uintptr_t page_;
  size_t job_ = 0;
  uint64_t offset_ = 0;  // within jobs_[job_]
  uint64_t issued_ = 0;
};

// The shards read with O_DIRECT, one descriptor each, opened on first use;
// -1 where the file system refuses O_DIRECT (it then goes through the map).
class DirectFiles {
 public:
  DirectFiles() = default;
  DirectFiles(const DirectFiles&) = delete;
  DirectFiles& operator=(const DirectFiles&) = delete;
  ~DirectFiles() {
    for (auto& [path, fd] : fds_)
      if (fd >= 0) ::close(fd);
  }
  int fd(const std::string& path) {
    auto it = fds_.find(path);
    if (it != fds_.end()) return it->second;
    return fds_[path] = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  }

 private:
  std::map<std::string, int> fds_;
};

// At least half of the view's pages are in the page cache already (then a
// copy out of the mapping beats reading the disk again). mincore reports the
// page cache for files the process owns or may write, else only pages it has
// mapped: an unknown answer means "not resident", which is only slower.
bool mostly_resident(const MatView& m) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(m.data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(m.data) + src_bytes(m);
  std::vector<unsigned char> v((end - a + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(a), end - a, v.data()) != 0) return true;
  size_t resident = 0;
  for (unsigned char c : v) resident += c & 1;
  return 2 * resident >= v.size();
}

// Reads [a, b) of `fd` (4 KiB aligned) into dst in 1 MiB preads over the
// pool. Returns how many bytes from `a` on were read without a gap (short
// only at the end of the file), or the errno of a failed read.
Result<uint64_t> pread_direct(int fd, uint64_t a, uint64_t b, uint8_t* dst, ThreadPool* pool) {
  const int64_t chunks = static_cast<int64_t>((b - a + kDirectChunk - 1) / kDirectChunk);
  std::vector<uint64_t> got(chunks, 0);
  std::atomic<int> err{0};
  auto run = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const uint64_t off = a + uint64_t(c) * kDirectChunk, len = std::min(kDirectChunk, b - off);
      uint64_t done = 0;
      while (done < len) {
        const ssize_t r = ::pread(fd, dst + (off - a) + done, len - done, static_cast<off_t>(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) err = errno;
        if (r <= 0) break;
        done += uint64_t(r);
      }
      got[c] = done;
    }
  };
  if (pool && pool->size() > 1 && chunks > 1)
    pool->parallel_for(chunks, run, 1);
  else
    run(0, chunks);
  if (err) return internal_error(std::string("O_DIRECT read failed: ") + std::strerror(err.load()));
  uint64_t total = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    total += got[c];
    if (got[c] < std::min(kDirectChunk, b - (a + uint64_t(c) * kDirectChunk))) break;
  }
  return total;
}

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
  const uint64_t direct_cap = sink.buffer_bytes() / kDirectAlign * kDirectAlign;
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
  // bf16 tensors of a file not in the page cache go disk -> buffer with
  // O_DIRECT (the buffers must be 4 KiB aligned: pinned memory is): no page
  // cache to fill, no copy, and reads as deep as the pool.
  DirectFiles files;
  std::vector<char> direct(jobs.size(), 0);
  if (opt.direct_io && direct_cap >= 4 * kDirectAlign &&
      reinterpret_cast<uintptr_t>(sink.buffer(0)) % kDirectAlign == 0 &&
      reinterpret_cast<uintptr_t>(sink.buffer(1)) % kDirectAlign == 0) {
    for (size_t k = 0; k < jobs.size(); ++k) {
      const UploadJob& j = jobs[k];
      direct[k] = j.format == StageFormat::kBF16 && j.src.dtype == DType::kBF16 && j.src.file &&
                  j.src.numel() > 0 && files.fd(*j.src.file) >= 0 && !mostly_resident(j.src);
    }
  }
  Prefetcher prefetch(jobs, direct, opt.prefetch_bytes);
  prefetch.advance(0);
  int b = 0;          // the buffer being filled
  size_t fill = 0;    // bytes used in it
  bool open = false;  // it holds pieces not yet sealed
  auto next_buffer = [&]() -> Status {
    MS_RETURN_IF_ERROR(sink.seal(b));
    b ^= 1;
    const auto tw = Clock::now();
    MS_RETURN_IF_ERROR(sink.wait(b));
    st.wait_seconds += since(tw);
    fill = 0;
    open = false;
    return Status::ok();
  };
  auto piece_done = [&](int64_t k, size_t isz, size_t osz) {
    open = true;
    ++st.pieces;
    st.src_bytes += uint64_t(k) * isz;
    st.dst_bytes += uint64_t(k) * osz;
    prefetch.advance(st.src_bytes);
    if (opt.progress) opt.progress(st.src_bytes, total);
  };
  for (size_t jn = 0; jn < jobs.size(); ++jn) {
    const UploadJob& j = jobs[jn];
    const size_t osz = out_size(j.format), isz = dtype_size(j.src.dtype);
    const int64_t n = j.src.numel();
    int64_t i = 0;
    // Direct pieces: the 4 KiB-aligned file window around elements [i, i + k)
    // is read into the buffer, and the copy starts at the first element.
    while (direct[jn] && i < n) {
      const uint64_t start = align_up(fill, kDirectAlign);
      const uint64_t pos = j.src.file_offset + uint64_t(i) * 2, a = pos / kDirectAlign * kDirectAlign;
      const uint64_t avail = direct_cap > start ? direct_cap - start : 0;
      const uint64_t payload = avail > (pos - a) + kDirectAlign ? avail - (pos - a) - kDirectAlign : 0;
      const int64_t k = std::min<int64_t>(n - i, static_cast<int64_t>(payload / 2));
      if (k == 0 || (fill > 0 && k < n - i && payload < kDirectMinPiece)) {
        MS_RETURN_IF_ERROR(next_buffer());
        continue;
      }
      const uint64_t end = align_up(pos + uint64_t(k) * 2, kDirectAlign);
      const auto tc = Clock::now();
      auto got = pread_direct(files.fd(*j.src.file), a, end, sink.buffer(b) + start, opt.pool);
      st.convert_seconds += since(tc);
      if (!got.is_ok() || *got < pos + uint64_t(k) * 2 - a) {
        direct[jn] = 0;  // the rest of this tensor through the mapping
        break;
      }
      MS_RETURN_IF_ERROR(sink.copy(b, start + (pos - a), static_cast<uint8_t*>(j.dst) + size_t(i) * 2, size_t(k) * 2));
      fill = start + (end - a);
      i += k;
      st.direct_bytes += uint64_t(k) * 2;
      piece_done(k, isz, osz);
    }
    while (i < n) {
      const int64_t room = static_cast<int64_t>((cap - std::min(cap, fill)) / osz);
      if (room == 0) {
        MS_RETURN_IF_ERROR(next_buffer());
        continue;
      }
      const int64_t k = std::min(room, n - i);
      const auto tc = Clock::now();
      convert(j, i, k, sink.buffer(b) + fill, opt.pool);
      st.convert_seconds += since(tc);
      MS_RETURN_IF_ERROR(sink.copy(b, fill, static_cast<uint8_t*>(j.dst) + size_t(i) * osz, size_t(k) * osz));
      fill = std::min(cap, (fill + size_t(k) * osz + kPieceAlign - 1) / kPieceAlign * kPieceAlign);
      i += k;
      piece_done(k, isz, osz);
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
