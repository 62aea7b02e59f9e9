// Integer helpers shared by the host code of several modules (the device
// code's tile arithmetic has its own in mk/dims.h, callable on both sides).
#pragma once

#include <cstdint>

namespace ms {

// ceil(a / b) for a >= 0, b > 0.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace ms
