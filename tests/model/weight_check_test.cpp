// NaN / Inf weights fail at load naming the file, tensor and element; the
// word-at-a-time exponent test agrees with std::isfinite on every bf16 and
// fp16 bit pattern and on f32 edge values.
#include "model/weight_check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/init_random.h"
#include "model/model_loader.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

float bf16_to_f32(uint16_t v) {
  uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool f16_finite(uint16_t v) { return (v & 0x7C00) != 0x7C00; }  // IEEE half: exponent all ones = Inf/NaN

// Every 16-bit pattern, at every position of a buffer whose length is not a
// multiple of the 8-byte word and whose start is not aligned.
TEST(WeightCheck, ExhaustiveSixteenBitPatterns) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> buf(2 + 2 * 13);
    for (uint32_t v = 0; v < 65536; ++v) {
      const bool finite = t == DType::kBF16 ? std::isfinite(bf16_to_f32(uint16_t(v))) : f16_finite(uint16_t(v));
      const int pos = static_cast<int>(v % 13);
      std::fill(buf.begin(), buf.end(), 0);
      const uint16_t x = uint16_t(v);
      std::memcpy(buf.data() + 2 + 2 * pos, &x, 2);
      EXPECT_EQ(first_non_finite(buf.data() + 2, 13, t), finite ? -1 : pos) << dtype_name(t) << " 0x" << std::hex << v;
    }
  }
}

TEST(WeightCheck, Float32EdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float vals[] = {0.f, -0.f, std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
                        std::numeric_limits<float>::denorm_min(), 1.f, inf, -inf,
                        std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN()};
  for (float v : vals) {
    for (int n : {1, 2, 3, 17}) {
      std::vector<float> a(n, 0.5f);
      a[n - 1] = v;
      EXPECT_EQ(first_non_finite(reinterpret_cast<const uint8_t*>(a.data()), n, DType::kF32),
                std::isfinite(v) ? -1 : n - 1)
          << v << " n=" << n;
    }
  }
  std::mt19937 rng(5);
  std::vector<uint32_t> bits(4099);
  for (auto& b : bits) b = rng() & 0xBF7FFFFFu;  // exponent never all ones
  EXPECT_EQ(first_non_finite(reinterpret_cast<const uint8_t*>(bits.data()), 4099, DType::kF32), -1);
  int32_t ints[3] = {-1, -1, -1};  // integer tensors are not checked
  EXPECT_EQ(first_non_finite(reinterpret_cast<const uint8_t*>(ints), 3, DType::kI32), -1);
}

class WeightCheckLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ms_nan_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    InitRandomOptions o;
    o.seed = 3;
    ASSERT_TRUE(write_random_checkpoint(*preset_config(Arch::kQwen3Moe, "tiny"), dir_.string(), o).is_ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Overwrites element `index` of tensor `name` with the 16-bit `value`.
  void poke(const std::string& name, int64_t index, uint16_t value) {
    const std::string path = (dir_ / "model.safetensors").string();
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string bytes = ss.str();
    auto infos = parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
    ASSERT_TRUE(infos.is_ok());
    for (const TensorInfo& t : *infos) {
      if (t.name != name) continue;
      ASSERT_EQ(t.dtype, DType::kBF16);
      const size_t off = static_cast<size_t>(t.data - reinterpret_cast<const uint8_t*>(bytes.data())) + 2 * index;
      std::memcpy(bytes.data() + off, &value, 2);
      std::ofstream(path, std::ios::binary) << bytes;
      return;
    }
    FAIL() << "no tensor " << name;
  }

  fs::path dir_;
};

TEST_F(WeightCheckLoad, NanAndInfFailNamingFileTensorAndElement) {
  ASSERT_TRUE(load_model(dir_.string()).is_ok());
  const std::string tensor = "model.layers.1.mlp.experts.3.down_proj.weight";
  poke(tensor, 77, 0x7FC1);
  auto m = load_model(dir_.string());
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find((dir_ / "model.safetensors").string() + ": tensor '" + tensor + "'"),
            std::string::npos)
      << m.status().message();
  EXPECT_NE(m.status().message().find("element 77 is NaN (BF16 0x7fc1)"), std::string::npos) << m.status().message();
  poke(tensor, 77, 0x3F80);
  poke("model.norm.weight", 0, 0xFF80);
  m = load_model(dir_.string());
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("'model.norm.weight' [64]: element 0 is -Inf (BF16 0xff80)"), std::string::npos)
      << m.status().message();
}

// The scan is the pass that reads a checkpoint from disk: it reports its
// bytes and rate while it runs (a meter thread; here every poll, and it
// ends at 100%).
TEST_F(WeightCheckLoad, ProgressLinesEndAtEveryByte) {
  auto ck = Checkpoint::open(dir_.string());
  ASSERT_TRUE(ck.is_ok());
  std::vector<std::string> lines;
  std::mutex mu;
  FiniteCheckProgress meter;
  meter.emit = [&](const std::string& l) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(l);
  };
  meter.interval_s = 0;
  meter.min_total = 0;
  ASSERT_TRUE(check_finite(**ck, 2, nullptr, meter).is_ok());
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("reading the weights (finite check): ", 0), 0u) << lines.back();
  EXPECT_NE(lines.back().find("(100%)"), std::string::npos) << lines.back();
  // Below min_total (the default 1 GiB): quiet.
  lines.clear();
  meter.min_total = (*ck)->total_bytes() + 1;
  ASSERT_TRUE(check_finite(**ck, 2, nullptr, meter).is_ok());
  EXPECT_TRUE(lines.empty());
}

TEST_F(WeightCheckLoad, StatsCountEveryFloatByte) {
  auto ck = Checkpoint::open(dir_.string());
  ASSERT_TRUE(ck.is_ok());
  FiniteCheckStats st;
  ASSERT_TRUE(check_finite(**ck, 2, &st).is_ok());
  EXPECT_EQ(st.bytes, (*ck)->total_bytes());
  EXPECT_EQ(st.threads, 2);
}

}  // namespace
}  // namespace ms
