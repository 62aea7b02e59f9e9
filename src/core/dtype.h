// Scalar dtypes of checkpoints and device buffers, with bit-exact CPU
// conversions (round-to-nearest-even, as torch does).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace ms {

enum class DType { kF32, kF16, kBF16, kI32, kI64, kU8 };

const char* dtype_name(DType t);       // "F32", "BF16", ... (safetensors spelling)
size_t dtype_size(DType t);

inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Rounds an fp32 value through bf16 (what storing to a bf16 tensor does).
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

}  // namespace ms
