// RAII device memory: DeviceBuffer<T> owns a cudaMalloc'ed array of T and
// frees it on destruction. Allocation failures come back as Status.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "gpu/common/cuda_check.h"

namespace ms::gpu {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  // Allocates n elements (contents undefined); frees any previous array.
  Status alloc(size_t n) {
    release();
    if (n == 0) return Status::ok();
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, n * sizeof(T));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // clear the non-sticky allocation error
      return resource_exhausted("cudaMalloc of " + std::to_string(n * sizeof(T)) + " bytes failed: " +
                                cudaGetErrorString(e));
    }
    ptr_ = static_cast<T*>(p);
    n_ = n;
    return Status::ok();
  }
  Status upload(const T* host, size_t n, size_t offset = 0) {
    if (offset + n > n_) return internal_error("DeviceBuffer::upload out of bounds");
    MS_CUDA_RETURN(cudaMemcpy(ptr_ + offset, host, n * sizeof(T), cudaMemcpyHostToDevice));
    return Status::ok();
  }
  Status upload(const std::vector<T>& host) {
    if (n_ != host.size()) MS_RETURN_IF_ERROR(alloc(host.size()));
    return upload(host.data(), host.size());
  }
  Status download(std::vector<T>* host) const {
    host->resize(n_);
    MS_CUDA_RETURN(cudaMemcpy(host->data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return Status::ok();
  }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

 private:
  void release() {
    if (ptr_) (void)cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = 0;
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// Host memory pinned for asynchronous copies (metadata staging).
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) (void)cudaFreeHost(ptr_);
  }
  Status alloc(size_t n) {
    if (ptr_) (void)cudaFreeHost(ptr_);
    ptr_ = nullptr;
    n_ = 0;
    void* p = nullptr;
    MS_CUDA_RETURN(cudaMallocHost(&p, n * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    n_ = n;
    return Status::ok();
  }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace ms::gpu
