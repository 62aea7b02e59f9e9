// Comparing a client-sent credential against a secret without the time it
// takes saying anything about the secret: not where the first difference is
// (no early exit) and not how long the secret is (the loop always runs over
// kMaxSecretBytes, reading the secret from a zero-padded copy).
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ms {

inline constexpr size_t kMaxSecretBytes = 4096;

class Secret {
 public:
  Secret() = default;
  // InvalidArgument if `value` is empty or longer than kMaxSecretBytes.
  static Result<Secret> create(std::string_view value);

  bool empty() const { return size_ == 0; }
  // The time depends on neither the secret (length or content) nor `given`
  // up to kMaxSecretBytes; a longer `given` is refused at once (its length
  // is the client's own).
  bool matches(std::string_view given) const;

 private:
  std::array<unsigned char, kMaxSecretBytes> padded_{};
  size_t size_ = 0;
};

}  // namespace ms
