// Device discovery: has_gpu() answers false (never aborts) on a machine with
// no GPU or no driver; DeviceInfo carries what the kernels and the benchmark
// size themselves from.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace ms::gpu {

struct DeviceInfo {
  int device = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t total_mem = 0;
  size_t l2_bytes = 0;
  size_t smem_per_block_optin = 0;
  // Nominal HBM bandwidth: memory clock (kHz) * bus width (bits) / 8 * 2 (DDR).
  double nominal_bw_gbs = 0;
};

// True when the current CUDA device (device 0 unless cudaSetDevice chose
// another) is usable and has compute capability >= 9.0.
bool has_gpu();

// What the CUDA runtime sees, without creating a context: the device count
// (0 with `error` set when the runtime or driver cannot be used) and each
// device's name, compute capability and memory.
struct GpuListing {
  struct Device {
    std::string name;
    int cc_major = 0, cc_minor = 0;
    size_t total_mem = 0;
  };
  std::vector<Device> devices;
  std::string error;  // why there are none (cudaGetDeviceCount's error), if any
};
GpuListing list_gpus();
// Properties of the current device.
Result<DeviceInfo> device_info();

}  // namespace ms::gpu
