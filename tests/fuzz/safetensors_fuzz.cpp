// Fuzz target: the safetensors header parser on an in-memory file image.
// Every tensor it accepts must lie inside the image, with a byte count that
// matches its dtype and shape; a finite-check over it must stay in bounds.
#include <cstdint>
#include <cstdlib>

#include "model/safetensors.h"
#include "model/weight_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = ms::parse_safetensors(data, size, "fuzz.safetensors");
  if (!r.is_ok()) return 0;
  for (const ms::TensorInfo& t : *r) {
    if (t.data < data || t.nbytes > size || t.data + t.nbytes > data + size) std::abort();
    if (static_cast<uint64_t>(t.numel()) * ms::dtype_size(t.dtype) != t.nbytes) std::abort();
    (void)ms::first_non_finite(t.data, t.numel(), t.dtype);
  }
  return 0;
}
