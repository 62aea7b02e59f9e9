// The device side of a staged weight upload (src/model/staged_upload.h): two
// pinned host buffers, one non-blocking stream that copies out of them with
// cudaMemcpyAsync (pinned memory: the copy engine DMAs at PCIe speed, and the
// call returns at once, so the CPU converts the next buffer meanwhile), and
// one event per buffer recorded at each seal. The buffers start on a 4 KiB
// boundary, so O_DIRECT reads can fill them.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "gpu/common/device_buffer.h"
#include "model/staged_upload.h"

namespace ms::gpu {

class PinnedStagingSink final : public StagingSink {
 public:
  // Two buffers of `buffer_bytes` each, on the current device.
  static Result<std::unique_ptr<PinnedStagingSink>> create(size_t buffer_bytes);
  ~PinnedStagingSink() override;

  size_t buffer_bytes() const override { return bytes_; }
  uint8_t* buffer(int b) override { return base_[b]; }
  Status wait(int b) override;
  Status copy(int b, size_t offset, void* dst, size_t bytes) override;
  Status seal(int b) override;
  Status finish() override;

 private:
  PinnedStagingSink() = default;
  size_t bytes_ = 0;
  PinnedBuffer<uint8_t> bufs_[2];
  uint8_t* base_[2] = {nullptr, nullptr};  // 4 KiB aligned within bufs_ (O_DIRECT reads land there)
  cudaStream_t stream_ = nullptr;
  cudaEvent_t sealed_[2] = {nullptr, nullptr};
};

}  // namespace ms::gpu
