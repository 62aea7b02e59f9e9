// Read-bandwidth probe: streams a large device buffer with 16-byte loads and
// reports the achieved GB/s (median of several timed passes). The benchmark's
// second ceiling next to the nominal bandwidth of the device properties.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace ms::gpu {

struct BandwidthProbe {
  double read_gbs = 0;    // median over passes
  size_t bytes = 0;       // bytes read per pass
  int passes = 0;
};

// bytes: buffer size (default 4 GiB, far above L2).
Result<BandwidthProbe> probe_read_bandwidth(size_t bytes = size_t(4) << 30, int passes = 20);

}  // namespace ms::gpu
