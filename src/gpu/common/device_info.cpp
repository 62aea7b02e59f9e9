#include "gpu/common/device_info.h"

#include <cuda_runtime.h>

#include "gpu/common/cuda_check.h"

namespace ms::gpu {

bool has_gpu() {
  int n = 0, dev = 0, major = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major >= 9;
}

GpuListing list_gpus() {
  GpuListing out;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    out.error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    (void)cudaGetLastError();
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if ((e = cudaGetDeviceProperties(&p, i)) != cudaSuccess) {
      out.error = "GPU " + std::to_string(i) + ": " + cudaGetErrorString(e);
      (void)cudaGetLastError();
      out.devices.clear();
      return out;
    }
    out.devices.push_back({p.name, p.major, p.minor, p.totalGlobalMem});
  }
  return out;
}

Result<DeviceInfo> device_info() {
  DeviceInfo d;
  MS_CUDA_RETURN(cudaGetDevice(&d.device));
  cudaDeviceProp p{};
  MS_CUDA_RETURN(cudaGetDeviceProperties(&p, d.device));
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.total_mem = p.totalGlobalMem;
  d.l2_bytes = static_cast<size_t>(p.l2CacheSize);
  d.smem_per_block_optin = p.sharedMemPerBlockOptin;
  int clock_khz = 0, bus_bits = 0;
  MS_CUDA_RETURN(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, d.device));
  MS_CUDA_RETURN(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, d.device));
  d.nominal_bw_gbs = double(clock_khz) * 1e3 * (double(bus_bits) / 8.0) * 2.0 / 1e9;
  return d;
}

}  // namespace ms::gpu
