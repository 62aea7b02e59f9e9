// The host half of uploading checkpoint tensors to a device through two
// staging buffers (pinned memory on the GPU path), so that the copy engine
// moves one buffer while the CPU reads the next tensors from the mmapped
// shards and converts them into the other:
//
//   read -> buffer b -> one async copy per piece out of buffer b -> next
//   piece; a full buffer is sealed (an event) and the other one is waited on
//   before it is refilled. The read is one of:
//   - bf16 tensors of a shard not in the page cache: O_DIRECT preads of the
//     4 KiB-aligned file window straight into the buffer, 1 MiB each, spread
//     over the pool (queue depth = threads): no page cache to fill with 61 GB
//     that is read once, and no copy. On the build machine's disk
//     (bench/results/2026-12-01-weight-read.md) these ran at the disk's rate
//     in every run (0.64-0.85 GB/s; dd O_DIRECT 0.5-1.2), reads through the
//     mapping at 0.09-0.87 GB/s, the slow end with the CPUs busy;
//   - everything else (fp16 / fp32 to convert, fp32 norms, a shard mostly in
//     the page cache already, a file system without O_DIRECT such as tmpfs):
//     conversion out of the mmapped shard (bf16: a plain copy; f16 / f32 ->
//     bf16 rounded to nearest even; 4-5.7 GB/s on one core from tmpfs), with
//     madvise(WILLNEED) kept `prefetch_bytes` ahead so the kernel reads while
//     the CPU converts (no effect measured on a sequential file, where the
//     kernel's readahead does it; meant for shards in another order than the
//     upload's, such as HF's name order: layer 10 between layers 1 and 2).
//
// Tensors are packed: a buffer holds pieces of many small tensors (norms,
// 3 MB experts) and a large tensor (a 1 GB embedding) is cut across buffers.
// The device side is a StagingSink (src/gpu/pinned_staging.h: cudaMemcpyAsync
// on its own stream, one event per buffer); the CPU tests drive the same code
// with a sink that copies into host memory and checks the protocol.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/weights.h"

namespace ms {

enum class StageFormat { kBF16, kF32 };  // element format on the device

struct UploadJob {
  MatView src;               // the checkpoint's elements (mmapped)
  StageFormat format = StageFormat::kBF16;
  void* dst = nullptr;       // device address of the first element
};

// Where staged bytes go. Two buffers, indices 0 and 1. The pipeline calls,
// per buffer round: wait(b), then pieces written into buffer(b) each followed
// by copy(b, ...), then seal(b); finish() at the end.
class StagingSink {
 public:
  virtual ~StagingSink() = default;
  virtual size_t buffer_bytes() const = 0;  // size of each buffer
  virtual uint8_t* buffer(int b) = 0;
  // Returns once every copy out of buffer b enqueued before its last seal is done.
  virtual Status wait(int b) = 0;
  // Enqueues a copy of `bytes` at `offset` in buffer b to `dst`.
  virtual Status copy(int b, size_t offset, void* dst, size_t bytes) = 0;
  // Marks the end of buffer b's round (the copies wait(b) will wait for).
  virtual Status seal(int b) = 0;
  // Returns once every copy is done.
  virtual Status finish() = 0;
};

struct StagedUploadOptions {
  // Read bf16 tensors of shards not in the page cache with O_DIRECT (needs
  // MatView::file and 4 KiB-aligned staging buffers; falls back per tensor).
  bool direct_io = true;
  // Source bytes kept ahead of the conversion with madvise(MADV_WILLNEED), so
  // the kernel reads the shards while the CPU converts (no effect on memory
  // that is not a file mapping).
  size_t prefetch_bytes = size_t(256) << 20;
  ThreadPool* pool = nullptr;  // splits each piece's conversion; null: this thread
  // Called after each piece with the source bytes done so far and in all.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct StagedUploadStats {
  uint64_t src_bytes = 0;    // read from the checkpoint
  uint64_t dst_bytes = 0;    // written to the device
  uint64_t pieces = 0;       // copies enqueued
  uint64_t direct_bytes = 0; // of src_bytes, read with O_DIRECT
  double seconds = 0;        // the whole upload
  double convert_seconds = 0;  // reading + converting into the buffers (the CPU's and disk's share)
  double wait_seconds = 0;     // waiting for the copy engine to free a buffer, and for the last copies
};

Result<StagedUploadStats> staged_upload(const std::vector<UploadJob>& jobs, StagingSink& sink,
                                        const StagedUploadOptions& opt = {});

}  // namespace ms
