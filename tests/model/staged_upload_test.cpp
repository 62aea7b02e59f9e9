// The host half of the pinned double-buffered upload, against a sink whose
// copies run only when the buffer is waited on (as a copy engine finishes
// later): a pipeline that refilled a buffer before waiting for it would copy
// the wrong bytes. Every output must equal the old path bit for bit
// (MatView::to_f32, then f32_to_bf16; bf16 copied as is), for bf16 / f16 /
// f32 sources, tensors smaller than a piece and larger than both buffers,
// conversions split over threads, and a real mmapped checkpoint.
#include "model/staged_upload.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include <fcntl.h>
#include <unistd.h>

#include "core/dtype.h"
#include "model/init_random.h"
#include "model/model_loader.h"

namespace ms {
namespace {

// `aligned`: 4 KiB-aligned buffers, as pinned memory is (O_DIRECT reads need
// them); otherwise 16 bytes off a page, so the direct path stays off.
class DeferredSink final : public StagingSink {
 public:
  explicit DeferredSink(size_t bytes, bool aligned = false) : bytes_(bytes) {
    for (auto& b : bufs_) {
      b.assign(bytes + 4096 + 16, 0xEE);
      uint8_t* page = b.data() + (4096 - reinterpret_cast<uintptr_t>(b.data()) % 4096) % 4096;
      data_.push_back(aligned ? page : page + 16);
    }
  }
  size_t buffer_bytes() const override { return bytes_; }
  uint8_t* buffer(int b) override {
    if (sealed_[b]) ++violations;  // writing into a buffer whose copies may still be running
    return data_[b];
  }
  Status wait(int b) override {
    flush(b);
    ++waits;
    return Status::ok();
  }
  Status copy(int b, size_t offset, void* dst, size_t bytes) override {
    if (sealed_[b] || offset + bytes > bytes_) ++violations;
    pending_[b].push_back({offset, dst, bytes});
    return Status::ok();
  }
  Status seal(int b) override {
    sealed_[b] = true;
    ++seals;
    return Status::ok();
  }
  Status finish() override {
    flush(0);
    flush(1);
    return Status::ok();
  }
  int violations = 0, waits = 0, seals = 0;

 private:
  struct Copy {
    size_t offset;
    void* dst;
    size_t bytes;
  };
  void flush(int b) {
    for (const Copy& c : pending_[b]) std::memcpy(c.dst, data_[b] + c.offset, c.bytes);
    pending_[b].clear();
    sealed_[b] = false;
  }
  size_t bytes_;
  std::vector<uint8_t> bufs_[2];
  std::vector<uint8_t*> data_;
  std::vector<Copy> pending_[2];
  bool sealed_[2] = {false, false};
};

// A source tensor of random values (and the awkward ones: NaN, inf, denormals, -0).
struct Source {
  std::vector<uint8_t> bytes;
  MatView view;
};

Source make_source(DType t, int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  Source s;
  s.bytes.resize(size_t(n) * dtype_size(t));
  for (int64_t i = 0; i < n; ++i) {
    float v = d(g);
    if (i % 97 == 3) v = std::numeric_limits<float>::quiet_NaN();
    if (i % 89 == 5) v = -std::numeric_limits<float>::infinity();
    if (i % 83 == 7) v = 1e-40f;
    if (i % 79 == 9) v = -0.0f;
    if (t == DType::kF32) std::memcpy(&s.bytes[4 * i], &v, 4);
    uint16_t h = t == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
    if (t != DType::kF32) std::memcpy(&s.bytes[2 * i], &h, 2);
  }
  s.view.name = "t" + std::to_string(seed);
  s.view.dtype = t;
  s.view.rows = 1;
  s.view.cols = n;
  s.view.data = s.bytes.data();
  return s;
}

uint64_t src_bytes_of(const MatView& m) { return uint64_t(m.numel()) * dtype_size(m.dtype); }

// What the upload used to copy: to_bf16 (bf16: memcpy; else to_f32 then round) or to_f32.
std::vector<uint8_t> old_path(const MatView& m, StageFormat f) {
  std::vector<float> v = m.to_f32();
  std::vector<uint8_t> out(v.size() * (f == StageFormat::kBF16 ? 2 : 4));
  if (f == StageFormat::kF32) {
    std::memcpy(out.data(), v.data(), out.size());
  } else if (m.dtype == DType::kBF16) {
    std::memcpy(out.data(), m.data, out.size());
  } else {
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t b = f32_to_bf16(v[i]);
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}

struct Case {
  size_t buffer_bytes;
  int threads;
};

class StagedUploadTest : public ::testing::TestWithParam<Case> {};

TEST_P(StagedUploadTest, MatchesTheOldPathBitForBit) {
  const Case c = GetParam();
  std::vector<Source> srcs;
  std::vector<StageFormat> fmts;
  uint32_t seed = 1;
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(3 * 4096 + 5), int64_t(2) << 20, int64_t(129)})
    for (DType t : {DType::kBF16, DType::kF16, DType::kF32})
      for (StageFormat f : {StageFormat::kBF16, StageFormat::kF32}) {
        srcs.push_back(make_source(t, n, seed++));
        fmts.push_back(f);
      }
  std::vector<std::vector<uint8_t>> dsts(srcs.size());
  std::vector<UploadJob> jobs;
  for (size_t i = 0; i < srcs.size(); ++i) {
    dsts[i].assign(size_t(srcs[i].view.numel()) * (fmts[i] == StageFormat::kBF16 ? 2 : 4), 0xAB);
    jobs.push_back({srcs[i].view, fmts[i], dsts[i].data()});
  }
  DeferredSink sink(c.buffer_bytes);
  ThreadPool pool(c.threads);
  StagedUploadOptions opt;
  opt.pool = &pool;
  uint64_t last = 0, calls = 0, total = 0;
  opt.progress = [&](uint64_t done, uint64_t t) {
    EXPECT_GE(done, last);
    last = done;
    total = t;
    ++calls;
  };
  auto st = staged_upload(jobs, sink, opt);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  EXPECT_EQ(sink.violations, 0);
  if (c.buffer_bytes <= (size_t(1) << 20)) {
    EXPECT_GT(sink.waits, 2);  // the buffers went round
  }
  uint64_t src_bytes = 0, dst_bytes = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    src_bytes += srcs[i].bytes.size();
    dst_bytes += dsts[i].size();
    EXPECT_EQ(dsts[i], old_path(srcs[i].view, fmts[i])) << "tensor " << i << " of " << srcs[i].view.numel()
                                                          << " elements, dtype " << dtype_name(srcs[i].view.dtype);
  }
  EXPECT_EQ(st->src_bytes, src_bytes);
  EXPECT_EQ(st->dst_bytes, dst_bytes);
  EXPECT_EQ(last, src_bytes);
  EXPECT_EQ(total, src_bytes);
  EXPECT_EQ(calls, st->pieces);
}

INSTANTIATE_TEST_SUITE_P(Buffers, StagedUploadTest,
                         ::testing::Values(Case{4096, 1}, Case{1000, 1}, Case{size_t(1) << 20, 3},
                                           Case{size_t(64) << 20, 2}));

TEST(StagedUpload, RangedConversionsMatchWholeTensor) {
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    Source s = make_source(t, 333, 9);
    std::vector<float> whole = s.view.to_f32();
    std::vector<float> part(100);
    s.view.to_f32(200, 100, part.data());
    EXPECT_EQ(0, std::memcmp(part.data(), whole.data() + 200, 400));
    std::vector<uint16_t> b(100);
    s.view.to_bf16(200, 100, b.data());
    std::vector<uint8_t> ref = old_path(s.view, StageFormat::kBF16);
    EXPECT_EQ(0, std::memcmp(b.data(), ref.data() + 400, 200)) << dtype_name(t);
  }
}

TEST(StagedUpload, RealCheckpointThroughTheMmap) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ms_staged_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  InitRandomOptions o;
  o.seed = 3;
  o.shard_bytes = 200 << 10;  // several shards
  auto cfg = preset_config(Arch::kCohere2Moe, "tiny");
  ASSERT_TRUE(cfg.is_ok());
  ASSERT_TRUE(write_random_checkpoint(*cfg, dir.string(), o).is_ok());
  auto m = load_model(dir.string());
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  std::vector<const MatView*> views = {&(*m)->weights.embed, &(*m)->weights.final_norm};
  for (const auto& l : (*m)->weights.layers) {
    for (const MatView* v : {&l.q, &l.k, &l.v, &l.o, &l.attn_norm, &l.gate, &l.up, &l.down, &l.router})
      if (!v->empty()) views.push_back(v);
    for (const auto& e : l.experts) views.insert(views.end(), {&e.gate, &e.up, &e.down});
  }
  std::vector<std::vector<uint8_t>> dsts(views.size());
  std::vector<UploadJob> jobs;
  for (size_t i = 0; i < views.size(); ++i) {
    dsts[i].resize(size_t(views[i]->numel()) * 2);
    jobs.push_back({*views[i], StageFormat::kBF16, dsts[i].data()});
  }
  DeferredSink sink(8192);
  StagedUploadOptions opt;
  opt.prefetch_bytes = 16 << 10;
  auto st = staged_upload(jobs, sink, opt);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  EXPECT_EQ(sink.violations, 0);
  for (size_t i = 0; i < views.size(); ++i) EXPECT_EQ(dsts[i], old_path(*views[i], StageFormat::kBF16)) << views[i]->name;
  fs::remove_all(dir);
}

// A shard on disk, out of the page cache, read with O_DIRECT: bf16 tensors of
// odd sizes (windows that start and end inside 4 KiB blocks, pieces cut
// across 64 KiB buffers) next to an f32 one (through the mapping); then the
// same file in the page cache (mincore) goes through the mapping. Both must
// give the old path's bytes.
TEST(StagedUpload, DirectReadsOfAShardOnDisk) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path("/var/tmp") / ("ms_direct_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<SafetensorsWriter::Decl> decls;
  std::vector<Source> srcs;
  uint32_t seed = 40;
  for (int64_t n : {int64_t(1), int64_t(4097), int64_t(300001), int64_t(3), int64_t(65536), int64_t(77777)}) {
    const DType t = n == 3 ? DType::kF32 : DType::kBF16;
    srcs.push_back(make_source(t, n, seed++));
    decls.push_back({"t" + std::to_string(decls.size()), t, {n}});
  }
  const std::string path = (dir / "model.safetensors").string();
  ASSERT_TRUE(SafetensorsWriter::write(path, decls, [&](size_t k, uint8_t* out, size_t bytes) {
                std::memcpy(out, srcs[k].bytes.data(), bytes);
              }).is_ok());
  auto ck = Checkpoint::open(dir.string());
  ASSERT_TRUE(ck.is_ok()) << ck.status().message();
  std::vector<MatView> views;
  for (const auto& d : decls) {
    const TensorInfo* t = (*ck)->find(d.name);
    ASSERT_NE(t, nullptr);
    MatView v;
    v.name = d.name;
    v.dtype = t->dtype;
    v.rows = 1;
    v.cols = t->numel();
    v.data = t->data;
    v.file = &t->file;
    v.file_offset = t->file_offset;
    views.push_back(v);
  }
  auto run = [&](uint64_t* direct_bytes) {
    std::vector<std::vector<uint8_t>> dsts(views.size());
    std::vector<UploadJob> jobs;
    for (size_t i = 0; i < views.size(); ++i) {
      dsts[i].assign(size_t(views[i].numel()) * 2, 0xAB);
      jobs.push_back({views[i], StageFormat::kBF16, dsts[i].data()});
    }
    DeferredSink sink(64 << 10, /*aligned=*/true);
    ThreadPool pool(3);
    StagedUploadOptions opt;
    opt.pool = &pool;
    auto st = staged_upload(jobs, sink, opt);
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    EXPECT_EQ(sink.violations, 0);
    for (size_t i = 0; i < views.size(); ++i)
      EXPECT_EQ(dsts[i], old_path(views[i], StageFormat::kBF16)) << views[i].name;
    *direct_bytes = st->direct_bytes;
  };
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fdatasync(fd), 0);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  uint64_t direct = 0;
  run(&direct);
  const int dfd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (dfd >= 0) {
    ::close(dfd);
    // The large bf16 tensors; the first small ones share pages with the
    // header, which opening the checkpoint read into the page cache.
    EXPECT_GE(direct, uint64_t(300001 + 65536 + 77777) * 2);
    EXPECT_LE(direct, uint64_t(1 + 4097 + 300001 + 65536 + 77777) * 2);
  } else {
    EXPECT_EQ(direct, 0u);  // no O_DIRECT on this file system: all through the mapping
  }
  // In the page cache now (the test owns the file, so mincore sees it): the mapping.
  for (const MatView& v : views) {
    volatile uint8_t sum = 0;
    for (int64_t i = 0; i < int64_t(src_bytes_of(v)); i += 4096) sum = sum + v.data[i];
  }
  run(&direct);
  EXPECT_EQ(direct, 0u);
  fs::remove_all(dir);
}

TEST(StagedUpload, BadJobsAreErrors) {
  DeferredSink sink(4096);
  Source s = make_source(DType::kBF16, 10, 1);
  std::vector<uint16_t> dst(10);
  UploadJob no_dst{s.view, StageFormat::kBF16, nullptr};
  EXPECT_FALSE(staged_upload({no_dst}, sink).is_ok());
  UploadJob ints{s.view, StageFormat::kBF16, dst.data()};
  ints.src.dtype = DType::kI32;
  auto st = staged_upload({ints}, sink);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("not a float type"), std::string::npos);
  DeferredSink tiny(100);
  EXPECT_FALSE(staged_upload({UploadJob{s.view, StageFormat::kBF16, dst.data()}}, tiny).is_ok());
  // Nothing to do is fine.
  EXPECT_TRUE(staged_upload({}, sink).is_ok());
}

}  // namespace
}  // namespace ms
