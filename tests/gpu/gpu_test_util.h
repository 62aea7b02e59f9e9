// Helpers of the GPU op tests: random host data (fixed seeds, never zeros),
// bf16 rounding, device upload/download, normalized error.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "gpu/common/device_buffer.h"
#include "gpu/common/device_info.h"

namespace ms::gpu::test {

#define MS_GPU_TEST_GUARD() \
  if (!::ms::gpu::has_gpu()) GTEST_SKIP() << "no CUDA GPU"

#define ASSERT_OK(expr)                                  \
  do {                                                   \
    ::ms::Status s_ = (expr);                            \
    ASSERT_TRUE(s_.is_ok()) << #expr << ": " << s_.to_string(); \
  } while (0)

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f, float offset = 0.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = offset + scale * d(g);
  return v;
}

// Rounds in place through bf16 and returns the bf16 bits.
inline std::vector<uint16_t> to_bf16_rounding(std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    b[i] = f32_to_bf16(v[i]);
    v[i] = bf16_to_f32(b[i]);
  }
  return b;
}

template <typename T>
DeviceBuffer<T> dev(const std::vector<T>& h) {
  DeviceBuffer<T> d;
  EXPECT_TRUE(d.upload(h).is_ok());
  return d;
}

template <typename T>
std::vector<T> host(const DeviceBuffer<T>& d) {
  std::vector<T> h;
  EXPECT_TRUE(d.download(&h).is_ok());
  return h;
}

inline std::vector<float> bf16_to_f32v(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
  return f;
}

// ||got - want|| / ||want||; NaN never passes.
inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1e-30));
}

}  // namespace ms::gpu::test
