#include "gpu/common/bandwidth_probe.h"

#include <algorithm>
#include <vector>

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"
#include "gpu/common/device_buffer.h"
#include "gpu/common/device_info.h"
#include "gpu/common/random_fill.h"

namespace ms::gpu {

// Each thread sums 4 independent 16-byte loads per iteration (several loads in
// flight); the sum is written only if it hits an impossible value, so the
// compiler cannot drop the loads.
__global__ void read_probe_kernel(const uint4* a, size_t n_vec, unsigned* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n_vec; i += 4 * stride) {
    uint4 v0 = ld_stream(a + i), v1 = ld_stream(a + i + stride), v2 = ld_stream(a + i + 2 * stride),
          v3 = ld_stream(a + i + 3 * stride);
    acc ^= v0.x ^ v1.y ^ v2.z ^ v3.w;
  }
  for (; i < n_vec; i += stride) acc ^= ld_stream(a + i).x;
  if (acc == 0x12345678u) *sink = acc;
}

Result<BandwidthProbe> probe_read_bandwidth(size_t bytes, int passes) {
  if (passes < 1) return invalid_argument("bandwidth probe: passes < 1");
  MS_ASSIGN_OR_RETURN(DeviceInfo info, device_info());
  size_t free_b = 0, total_b = 0;
  MS_CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b));
  bytes = std::min(bytes, free_b / 2);
  bytes &= ~size_t(15);
  if (bytes < (size_t(64) << 20)) return resource_exhausted("not enough free device memory for the bandwidth probe");
  DeviceBuffer<uint8_t> buf;
  DeviceBuffer<unsigned> sink;
  MS_RETURN_IF_ERROR(buf.alloc(bytes));
  MS_RETURN_IF_ERROR(sink.alloc(1));
  MS_RETURN_IF_ERROR(launch_random_fill_bf16(buf.get(), bytes / 2, 7, 1.0f, 0.0f, nullptr));
  const unsigned blocks = static_cast<unsigned>(info.sm_count * 4), threads = 512;
  cudaEvent_t e0, e1;
  MS_CUDA_RETURN(cudaEventCreate(&e0));
  MS_CUDA_RETURN(cudaEventCreate(&e1));
  std::vector<float> ms_list;
  auto timed_passes = [&]() -> Status {
    for (int p = 0; p < passes + 2; ++p) {
      MS_CUDA_RETURN(cudaEventRecord(e0));
      read_probe_kernel<<<blocks, threads>>>(reinterpret_cast<const uint4*>(buf.get()), bytes / 16, sink.get());
      MS_CUDA_LAUNCH_CHECK("read_probe_kernel");
      MS_CUDA_RETURN(cudaEventRecord(e1));
      MS_CUDA_RETURN(cudaEventSynchronize(e1));
      float ms = 0;
      MS_CUDA_RETURN(cudaEventElapsedTime(&ms, e0, e1));
      if (p >= 2) ms_list.push_back(ms);  // the first two passes are warm-up
    }
    return Status::ok();
  };
  Status st = timed_passes();
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  MS_RETURN_IF_ERROR(st);
  std::sort(ms_list.begin(), ms_list.end());
  BandwidthProbe r;
  r.bytes = bytes;
  r.passes = passes;
  r.read_gbs = double(bytes) / (ms_list[ms_list.size() / 2] * 1e-3) / 1e9;
  return r;
}

}  // namespace ms::gpu
