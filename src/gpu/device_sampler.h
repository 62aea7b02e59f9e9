// DeviceSampler: the full sampler (gpu/ops/sampling.h) on logits rows that
// lie on the device, so a step copies back tokens and logprobs (176 bytes a
// row) instead of vocab_size floats. Shared by the executors: each leaves its
// logits in its own buffer and hands the rows over. Grammar-constrained rows
// upload their allowed-token masks (V/32 words each, only those rows) with
// the row parameters.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "engine/backend.h"
#include "gpu/common/device_buffer.h"
#include "gpu/ops/sampling.h"

namespace ms::gpu {

class DeviceSampler {
 public:
  explicit DeviceSampler(int vocab) : vocab_(vocab) {}
  // Whether the device sampler takes this vocabulary.
  bool supported() const { return vocab_ <= kMaxSampleVocab; }
  // Samples logits row r (of the (rows, vocab) fp32 device matrix `logits`)
  // for batch entry batch_of_row[r] where specs[that entry] is set (-1: skip);
  // results into (*out)[entry]. Synchronises `stream`.
  Status sample(const float* logits, const std::vector<int>& batch_of_row, const std::vector<const SampleSpec*>& specs,
                cudaStream_t stream, std::vector<SampleResult>* out);

 private:
  int vocab_ = 0;
  DeviceBuffer<float> scratch_;               // (rows, V) penalised, scaled rows
  DeviceBuffer<SampleRowParams> rows_;        // (rows)
  DeviceBuffer<SamplePenalty> penalties_;     // (entries)
  DeviceBuffer<SampleRowOut> out_;            // (rows)
  PinnedBuffer<SampleRowParams> rows_host_;   // (rows)
  PinnedBuffer<SampleRowOut> out_host_;       // (rows)
  std::vector<SamplePenalty> penalties_host_;
  DeviceBuffer<uint32_t> masks_;              // (constrained rows, V/32) allowed-token bitmaps
  PinnedBuffer<uint32_t> masks_host_;         // (constrained rows, V/32)
};

// Checks a step_sample() call's arguments (one spec per entry, specs only
// where logits are wanted).
Status check_sample_specs(const std::vector<SeqWork>& batch, const std::vector<const SampleSpec*>& specs);

}  // namespace ms::gpu
