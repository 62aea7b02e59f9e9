// The host half of the GPU weight upload on a real checkpoint: the staged
// pipeline of src/model/staged_upload.h (mmap read with madvise prefetch,
// conversion into two staging buffers) with the copy engine replaced by a
// sink that drops the copies, i.e. how fast this machine's CPU can feed the
// GPU, which bounds the upload wherever PCIe is faster (an H200's host link:
// ~50 GB/s pinned). Tensors are walked in DeviceModel::upload_jobs' order
// (embedding, head, norm, then per layer attention, norms, FFN / router /
// experts). --old-path measures the previous upload's host half instead (a
// fresh std::vector per tensor, then a copy the old code handed to a
// pageable cudaMemcpy), for comparison.
//
//   build-cpu/bench_weight_read --model DIR [--threads N] [--cold] [--old-path] [--buffer-mb 64]
//
// --cold: posix_fadvise(POSIX_FADV_DONTNEED) on every shard first, so a
// checkpoint just written is read from the disk rather than the page cache
// (tmpfs keeps its pages: a tmpfs run measures memory-to-memory). bf16
// tensors of shards not in the page cache are read with O_DIRECT, as the
// upload does; --no-direct reads everything through the mapping.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/byte_progress.h"
#include "core/flags.h"
#include "core/thread_pool.h"
#include "model/model_loader.h"
#include "model/staged_upload.h"

namespace {

using namespace ms;

// A copy engine of infinite speed: copies are dropped, buffers are always
// free. The buffers are page aligned and touched once, as pinned memory is.
class DropSink final : public StagingSink {
 public:
  explicit DropSink(size_t bytes) : bytes_(bytes) {
    for (auto& b : bufs_) {
      b = static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
      std::memset(b, 0, bytes);
    }
  }
  ~DropSink() override {
    for (auto* b : bufs_) std::free(b);
  }
  size_t buffer_bytes() const override { return bytes_; }
  uint8_t* buffer(int b) override { return bufs_[b]; }
  Status wait(int) override { return Status::ok(); }
  Status copy(int, size_t, void*, size_t) override { return Status::ok(); }
  Status seal(int) override { return Status::ok(); }
  Status finish() override { return Status::ok(); }

 private:
  size_t bytes_;
  uint8_t* bufs_[2] = {nullptr, nullptr};
};

std::vector<MatView> upload_order(const ModelConfig& cfg, const ModelWeights& w) {
  std::vector<MatView> v = {w.embed};
  if (!cfg.tie_embeddings) v.push_back(w.lm_head);
  v.push_back(w.final_norm);
  for (const LayerWeights& l : w.layers) {
    for (const MatView* m : {&l.q, &l.k, &l.v, &l.o, &l.q_bias, &l.k_bias, &l.v_bias, &l.o_bias, &l.attn_norm,
                             &l.ffn_norm, &l.q_norm, &l.k_norm, &l.gate, &l.up, &l.down, &l.router})
      if (!m->empty()) v.push_back(*m);
    for (const ExpertWeights& e : l.experts) v.insert(v.end(), {e.gate, e.up, e.down});
    for (const MatView* m : {&l.shared.gate, &l.shared.up, &l.shared.down})
      if (!m->empty()) v.push_back(*m);
  }
  return v;
}

int fail(const Status& s) {
  std::fprintf(stderr, "bench_weight_read: %s\n", s.message().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  f.add("model", "checkpoint directory")
      .add("threads", "conversion threads (the pool of the GPU upload)", "1")
      .add("cold", "evict the shards from the page cache first (read from the disk)", "", true)
      .add("old-path", "time the previous upload's host half (a std::vector per tensor)", "", true)
      .add("buffer-mb", "each staging buffer, MiB", "64")
      .add("no-direct", "read through the mapping only (no O_DIRECT)", "", true)
      .add("prefetch-mb", "madvise(WILLNEED) this far ahead of the conversion through the mapping", "256");
  if (Status s = f.parse(std::vector<std::string>(argv + 1, argv + argc)); !s.is_ok()) return fail(s);
  if (f.help_requested()) {
    std::printf("%s", f.usage("bench_weight_read").c_str());
    return 0;
  }
  auto threads = f.integer("threads", 1, 256);
  auto buffer_mb = f.integer("buffer-mb", 1, 4096);
  auto prefetch_mb = f.integer("prefetch-mb", 0, 1 << 20);
  if (!prefetch_mb.is_ok()) return fail(prefetch_mb.status());
  if (!threads.is_ok()) return fail(threads.status());
  if (!buffer_mb.is_ok()) return fail(buffer_mb.status());
  auto m = load_model(f.str("model"));
  if (!m.is_ok()) return fail(m.status());
  if (f.boolean("cold")) {
    std::set<std::string> files;
    for (const auto& [name, t] : (*m)->checkpoint->tensors()) files.insert(t.file);
    for (const std::string& path : files) {
      int fd = ::open(path.c_str(), O_RDONLY);
      if (fd < 0) return fail(not_found(path + ": cannot open"));
      (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
  std::vector<MatView> views = upload_order((*m)->config, (*m)->weights);
  uint64_t total = 0;
  for (const MatView& v : views) total += uint64_t(v.numel()) * dtype_size(v.dtype);
  const auto t0 = std::chrono::steady_clock::now();
  if (f.boolean("old-path")) {
    uint64_t sink = 0;
    for (const MatView& v : views) {
      std::vector<uint16_t> out(size_t(v.numel()));
      v.to_bf16(0, v.numel(), out.data());
      sink += out.empty() ? 0 : out[out.size() / 2];
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("old path (vector per tensor): %s  [%llu]\n", format_transfer_done("read + convert", total, s).c_str(),
                static_cast<unsigned long long>(sink & 1));
    return 0;
  }
  // Jobs point nowhere: the sink never writes.
  std::vector<uint8_t> nowhere(1);
  std::vector<UploadJob> jobs;
  for (const MatView& v : views) jobs.push_back({v, v.rows == 1 ? StageFormat::kF32 : StageFormat::kBF16, nowhere.data()});
  DropSink sinkb(size_t(*buffer_mb) << 20);
  ThreadPool pool(static_cast<int>(*threads));
  StagedUploadOptions so;
  so.pool = &pool;
  so.direct_io = !f.boolean("no-direct");
  so.prefetch_bytes = size_t(*prefetch_mb) << 20;
  ByteProgress meter("read + convert", total, [](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); },
                     5.0);
  so.progress = [&](uint64_t done, uint64_t) { meter.update(done); };
  auto st = staged_upload(jobs, sinkb, so);
  if (!st.is_ok()) return fail(st.status());
  std::printf("staged (%lld threads, %lld MiB buffers): %s, %llu pieces, %s with O_DIRECT\n",
              static_cast<long long>(*threads), static_cast<long long>(*buffer_mb),
              format_transfer_done("read + convert", st->src_bytes, st->seconds).c_str(),
              static_cast<unsigned long long>(st->pieces), format_gb(st->direct_bytes).c_str());
  return 0;
}
