// Secret: equality exactly as strings compare, for every length up to the
// limit; the loop itself never depends on the secret (see the header).
#include "core/secret_compare.h"

#include <gtest/gtest.h>

namespace ms {
namespace {

TEST(Secret, MatchesExactlyTheSameBytes) {
  const Secret s = Secret::create("sk-abc").value();
  EXPECT_TRUE(s.matches("sk-abc"));
  for (const char* other : {"", "sk-ab", "sk-abcd", "sk-abd", "SK-abc"}) EXPECT_FALSE(s.matches(other));
  EXPECT_FALSE(s.matches(std::string("sk-abc\0", 7)));  // zero padding must not make these equal
  EXPECT_FALSE(s.matches(std::string(kMaxSecretBytes + 1, 'x')));
  EXPECT_FALSE(Secret().matches(""));
}

TEST(Secret, EveryLengthUpToTheLimit) {
  for (size_t n : {size_t(1), size_t(63), size_t(64), size_t(1000), kMaxSecretBytes}) {
    std::string v(n, 'a');
    v.back() = 'z';
    const Secret s = Secret::create(v).value();
    EXPECT_TRUE(s.matches(v)) << n;
    std::string w = v;
    w.front() = 'b';
    EXPECT_FALSE(s.matches(w)) << n;
    EXPECT_FALSE(s.matches(v.substr(0, n - 1))) << n;
  }
  EXPECT_FALSE(Secret::create("").is_ok());
  EXPECT_FALSE(Secret::create(std::string(kMaxSecretBytes + 1, 'a')).is_ok());
}

}  // namespace
}  // namespace ms
