// Backend choice and creation without a GPU: --backend auto on every kind of
// machine (made-up probes: no CUDA build, no GPU, a pre-Hopper GPU, Hopper,
// several GPUs), --device validation, the real probe of this machine (no
// GPU here: it must pick ref and say why), --load-format dummy on the ref
// backend (random weights on the CPU, the same as init-random's), and the ref
// backend's memory check.
#include "server/backend_factory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/init_random.h"

namespace ms {
namespace {

namespace fs = std::filesystem;
constexpr size_t kGiB = size_t(1) << 30;

GpuProbe probe(std::vector<GpuProbe::Device> devices, std::string error = "") {
  GpuProbe p;
  p.built_with_cuda = true;
  p.devices = std::move(devices);
  p.error = std::move(error);
  return p;
}
const GpuProbe::Device kH200{"NVIDIA H200", 9, 0, 150'117'318'656ull};
const GpuProbe::Device kA100{"NVIDIA A100-SXM4-80GB", 8, 0, 80 * kGiB};

TEST(ResolveBackend, AutoWithoutCudaPicksRefAndSaysWhy) {
  GpuProbe none;  // a build without CUDA
  auto d = resolve_backend("auto", -1, none);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->name, "ref");
  EXPECT_EQ(d->log_line, "backend auto: ref (this build has no CUDA)");
  auto nogpu = resolve_backend("auto", -1, probe({}, "cudaErrorNoDevice: no CUDA-capable device is detected"));
  ASSERT_TRUE(nogpu.is_ok());
  EXPECT_EQ(nogpu->name, "ref");
  EXPECT_EQ(nogpu->log_line,
            "backend auto: ref (the CUDA runtime sees no GPU: cudaErrorNoDevice: no CUDA-capable device is detected)");
  auto old = resolve_backend("auto", -1, probe({kA100}));
  ASSERT_TRUE(old.is_ok());
  EXPECT_EQ(old->name, "ref");
  EXPECT_EQ(old->log_line,
            "backend auto: ref (no CUDA GPU of compute capability >= 9.0: GPU 0 is NVIDIA A100-SXM4-80GB, 8.0)");
}

TEST(ResolveBackend, AutoTakesTheFirstHopperGpu) {
  auto d = resolve_backend("auto", -1, probe({kH200}));
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->name, "cuda");
  EXPECT_EQ(d->device, 0);
  EXPECT_EQ(d->log_line, "backend auto: cuda on NVIDIA H200 (GPU 0, 139.81 GiB)");
  auto second = resolve_backend("auto", -1, probe({kA100, kH200}));
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ(second->device, 1);
  EXPECT_EQ(second->log_line, "backend auto: cuda on NVIDIA H200 (GPU 1, 139.81 GiB)");
}

TEST(ResolveBackend, DeviceIsValidated) {
  auto d = resolve_backend("auto", 1, probe({kH200, kH200}));
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->device, 1);
  auto out = resolve_backend("auto", 2, probe({kH200, kH200}));
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().message(), "--device 2: this machine has 2 CUDA GPUs (0..1)");
  auto one = resolve_backend("cuda", 1, probe({kH200}));
  ASSERT_FALSE(one.is_ok());
  EXPECT_EQ(one.status().message(), "--device 1: this machine has 1 CUDA GPU (0..0)");
  // A --device is a request for that GPU: auto does not fall back to the CPU from it.
  auto none = resolve_backend("auto", 0, probe({}, "cudaErrorNoDevice: no CUDA-capable device is detected"));
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("--device 0: the CUDA runtime sees no GPU"), std::string::npos);
  EXPECT_FALSE(resolve_backend("auto", 0, GpuProbe{}).is_ok());
  EXPECT_NE(resolve_backend("auto", 0, GpuProbe{}).status().message().find("no CUDA support"), std::string::npos);
  auto old = resolve_backend("auto", 0, probe({kA100}));
  ASSERT_FALSE(old.is_ok());
  EXPECT_NE(old.status().message().find("compute capability 8.0"), std::string::npos) << old.status().message();
  auto ref = resolve_backend("ref", 0, probe({kH200}));
  ASSERT_FALSE(ref.is_ok());
  EXPECT_NE(ref.status().message().find("--backend ref runs on the CPU"), std::string::npos);
}

TEST(ResolveBackend, ExplicitChoices) {
  auto ref = resolve_backend("ref", -1, probe({kH200}));
  ASSERT_TRUE(ref.is_ok());
  EXPECT_EQ(ref->name, "ref");  // ref even with a GPU present
  auto cuda = resolve_backend("layered", -1, probe({kH200}));  // the old name
  ASSERT_TRUE(cuda.is_ok());
  EXPECT_EQ(cuda->name, "cuda");
  EXPECT_EQ(cuda->log_line, "backend cuda on NVIDIA H200 (GPU 0, 139.81 GiB)");
  EXPECT_EQ(resolve_backend("cuda", -1, GpuProbe{}).status().code(), StatusCode::kUnavailable);
  EXPECT_NE(resolve_backend("cuda", -1, GpuProbe{}).status().message().find("no CUDA support"), std::string::npos);
  EXPECT_EQ(resolve_backend("cuda", -1, probe({})).status().code(), StatusCode::kUnavailable);
  auto old = resolve_backend("cuda", -1, probe({kA100}));
  ASSERT_FALSE(old.is_ok());
  EXPECT_NE(old.status().message().find("need 9.0"), std::string::npos);
  auto second = resolve_backend("cuda", -1, probe({kA100, kH200}));
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ(second->device, 1);
  EXPECT_FALSE(resolve_backend("cuda", 0, probe({kA100, kH200})).is_ok());  // the GPU asked for is too old
  auto bad = resolve_backend("tpu", -1, probe({kH200}));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "--backend must be auto, ref or cuda, got 'tpu'");
}

// This machine has no GPU (CI and the build machine): auto must pick ref,
// saying why in the words of whichever build this is.
TEST(ResolveBackend, ThisMachinePicksRef) {
  GpuProbe p = probe_gpus();
  if (!p.devices.empty()) GTEST_SKIP() << "this machine has a GPU";
  auto d = resolve_backend("auto", -1, p);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->name, "ref");
  if (p.built_with_cuda)
    EXPECT_NE(d->log_line.find("backend auto: ref (the CUDA runtime sees no GPU"), std::string::npos) << d->log_line;
  else
    EXPECT_EQ(d->log_line, "backend auto: ref (this build has no CUDA)");
  EXPECT_FALSE(resolve_backend("auto", 0, p).is_ok());
  EXPECT_FALSE(resolve_backend("cuda", -1, p).is_ok());
}

TEST(LoadFormat, Names) {
  EXPECT_EQ(*parse_load_format("auto"), LoadFormat::kAuto);
  EXPECT_EQ(*parse_load_format("dummy"), LoadFormat::kDummy);
  auto bad = parse_load_format("safetensors");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--load-format must be auto"), std::string::npos);
}

TEST(RefMemory, CheckNamesTheNumbers) {
  auto cfg = preset_config(Arch::kCohere2Moe, "full");
  ASSERT_TRUE(cfg.is_ok());
  EXPECT_EQ(ref_weight_bytes(*cfg), uint64_t(cfg->param_count()) * 4);
  Status s = check_ref_memory(*cfg, 0, uint64_t(24) << 30);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("121.94 GB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("25.77 GB is available"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--backend cuda"), std::string::npos);
  EXPECT_TRUE(check_ref_memory(*cfg, 0, uint64_t(200) << 30).is_ok());
  EXPECT_TRUE(check_ref_memory(*cfg, 0, 0).is_ok());  // unknown: not checked
  EXPECT_GT(available_host_memory(), 0u);              // Linux
}

class DummyLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ms_dummy_load_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    cfg_ = *preset_config(Arch::kCohere2Moe, "tiny");
    std::ofstream(dir_ / "config.json") << cfg_.to_json().dump(2);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  ModelConfig cfg_;
};

TEST_F(DummyLoad, RefGeneratesInitRandomWeightsOnTheCpu) {
  auto m = load_for_backend(dir_.string(), LoadFormat::kDummy, "ref", 11, {});
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  ASSERT_NE((*m)->checkpoint, nullptr);
  InitRandomOptions o;
  o.seed = 11;
  ASSERT_TRUE(write_random_checkpoint(cfg_, (dir_ / "ckpt").string(), o).is_ok());
  auto disk = load_model((dir_ / "ckpt").string());
  ASSERT_TRUE(disk.is_ok());
  const MatView& a = (*m)->weights.layers[1].experts[3].down;
  const MatView& b = (*disk)->weights.layers[1].experts[3].down;
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_EQ(0, std::memcmp(a.data, b.data, size_t(a.numel()) * 2));
  BackendChoice c;
  auto backend = make_backend(**m, c);
  ASSERT_TRUE(backend.is_ok()) << backend.status().message();
  EXPECT_STREQ((*backend)->name(), "ref");
  // The ref backend's default KV budget: 512 MiB of fp32 K and V.
  size_t bytes = 0;
  for (const auto& g : (*backend)->kv_spec().groups) bytes += size_t(g.num_blocks) * g.bytes_per_block;
  EXPECT_LE(bytes, kRefKvDefaultBytes);
  EXPECT_GT(bytes, kRefKvDefaultBytes / 10 * 9);
}

TEST_F(DummyLoad, CudaGetsOnlyTheConfig) {
  auto m = load_for_backend(dir_.string(), LoadFormat::kDummy, "cuda", 0, {});
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ((*m)->checkpoint, nullptr);
  EXPECT_EQ((*m)->config.n_layers, cfg_.n_layers);
  EXPECT_TRUE((*m)->weights.layers.empty());
  // ... and no backend reads weights that are not there.
  BackendChoice c;
  auto none = make_backend(**m, c);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no weights"), std::string::npos);
  c.random_weights = true;
  EXPECT_FALSE(make_backend(**m, c).is_ok());
}

TEST_F(DummyLoad, AutoNeedsTheCheckpoint) {
  auto m = load_for_backend(dir_.string(), LoadFormat::kAuto, "ref", 0, {});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("no model.safetensors"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace ms
