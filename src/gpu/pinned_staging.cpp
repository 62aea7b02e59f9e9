#include "gpu/pinned_staging.h"

#include "gpu/common/cuda_check.h"

namespace ms::gpu {

Result<std::unique_ptr<PinnedStagingSink>> PinnedStagingSink::create(size_t buffer_bytes) {
  auto s = std::unique_ptr<PinnedStagingSink>(new PinnedStagingSink());
  s->bytes_ = buffer_bytes;
  for (int b = 0; b < 2; ++b) {
    MS_RETURN_IF_ERROR(s->bufs_[b].alloc(buffer_bytes + 4096));
    const uintptr_t p = reinterpret_cast<uintptr_t>(s->bufs_[b].get());
    s->base_[b] = s->bufs_[b].get() + (4096 - p % 4096) % 4096;
  }
  MS_CUDA_RETURN(cudaStreamCreateWithFlags(&s->stream_, cudaStreamNonBlocking));
  for (auto& e : s->sealed_) MS_CUDA_RETURN(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return s;
}

PinnedStagingSink::~PinnedStagingSink() {
  // The buffers must outlive every copy out of them.
  if (stream_) (void)cudaStreamSynchronize(stream_);
  for (auto& e : sealed_)
    if (e) (void)cudaEventDestroy(e);
  if (stream_) (void)cudaStreamDestroy(stream_);
}

// An event never recorded counts as complete: the first round of each buffer waits for nothing.
Status PinnedStagingSink::wait(int b) {
  MS_CUDA_RETURN(cudaEventSynchronize(sealed_[b]));
  return Status::ok();
}

Status PinnedStagingSink::copy(int b, size_t offset, void* dst, size_t bytes) {
  MS_CUDA_RETURN(cudaMemcpyAsync(dst, base_[b] + offset, bytes, cudaMemcpyHostToDevice, stream_));
  return Status::ok();
}

Status PinnedStagingSink::seal(int b) {
  MS_CUDA_RETURN(cudaEventRecord(sealed_[b], stream_));
  return Status::ok();
}

Status PinnedStagingSink::finish() {
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  return Status::ok();
}

}  // namespace ms::gpu
