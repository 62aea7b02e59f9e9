// secret_compare.cpp: see secret_compare.h.
#include "core/secret_compare.h"

#include <cstring>

namespace ms {

Result<Secret> Secret::create(std::string_view value) {
  if (value.empty()) return invalid_argument("the secret is empty");
  if (value.size() > kMaxSecretBytes) {
    return invalid_argument("the secret is " + std::to_string(value.size()) + " bytes, over the limit of " +
                            std::to_string(kMaxSecretBytes));
  }
  Secret s;
  std::memcpy(s.padded_.data(), value.data(), value.size());
  s.size_ = value.size();
  return s;
}

bool Secret::matches(std::string_view given) const {
  if (given.size() > kMaxSecretBytes) return false;
  std::array<unsigned char, kMaxSecretBytes> g{};
  std::memcpy(g.data(), given.data(), given.size());
  // volatile: the compiler may not turn the loop into an early-exit compare.
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < kMaxSecretBytes; ++i) diff = diff | (g[i] ^ padded_[i]);
  // Lengths differ -> mismatch, even when the padding makes the bytes equal.
  const size_t len_diff = given.size() ^ size_;
  return (diff | static_cast<unsigned char>(len_diff != 0)) == 0 && size_ != 0;
}

}  // namespace ms
