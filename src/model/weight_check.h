// A checkpoint with a NaN or Inf weight loads, serves, and answers garbage;
// check_finite() refuses it at load, naming the file, the tensor and the
// element. It reads every floating-point byte of the checkpoint once, in
// parallel chunks, with a branch-free exponent test on 8 bytes at a time (an
// element is NaN or Inf exactly when its exponent bits are all ones), so its
// cost is one pass at memory (or disk) bandwidth; the pages it faults in are
// the ones the backend's conversion or upload reads next.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "model/safetensors.h"

namespace ms {

struct FiniteCheckStats {
  uint64_t bytes = 0;   // floating-point bytes scanned
  double seconds = 0;
  int threads = 0;
};

// Progress lines while the scan runs (it is the pass that reads a
// checkpoint from disk: ~30 s for 61 GB at 2 GB/s): a ByteProgress meter
// over the bytes scanned, polled by a thread of its own.
struct FiniteCheckProgress {
  std::function<void(const std::string&)> emit;  // null: no lines
  double interval_s = 1.0;
  uint64_t min_total = uint64_t(1) << 30;  // smaller checkpoints: no lines
};

// DataLoss naming the file, tensor, element index and value kind (NaN, +Inf,
// -Inf) of the first non-finite element in checkpoint order. threads <= 0:
// one per hardware thread.
Status check_finite(const Checkpoint& checkpoint, int threads = 0, FiniteCheckStats* stats = nullptr,
                    const FiniteCheckProgress& progress = {});

// The same test over one buffer of `count` elements: the index of the first
// non-finite element, or -1. Integer dtypes are always finite.
int64_t first_non_finite(const uint8_t* data, int64_t count, DType dtype);

}  // namespace ms
