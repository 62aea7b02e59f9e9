// Device discovery: has_gpu() answers false (never aborts) on a machine with
// no GPU or no driver; DeviceInfo carries what the kernels and the benchmark
// size themselves from.
#pragma once

#include <string>

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

// True when a CUDA device with compute capability >= 9.0 is usable.
bool has_gpu();
// Properties of the current device.
Result<DeviceInfo> device_info();

}  // namespace ms::gpu
