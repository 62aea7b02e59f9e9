#include "gpu/common/pdl.cuh"

#include <cstdlib>
#include <cstring>

namespace ms::gpu {

bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MEGASERVE_PDL");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

}  // namespace ms::gpu
