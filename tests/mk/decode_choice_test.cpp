// DecodeChooser: the per-(rows, context bucket) choice between the megakernel
// and the layered decode path from measured step times.
#include "mk/decode_choice.h"

#include <gtest/gtest.h>

namespace ms::mk {
namespace {

constexpr DecodeChoice kMk = DecodeChoice::kMegakernel, kLy = DecodeChoice::kLayered;

// Runs `steps` steps at (rows, bucket) with the given per-path step times;
// returns the paths taken and collects the log lines.
std::vector<DecodeChoice> run(DecodeChooser& c, int rows, int bucket, int steps, double mk_ms, double ly_ms,
                              std::vector<std::string>* lines = nullptr) {
  std::vector<DecodeChoice> taken;
  for (int i = 0; i < steps; ++i) {
    const DecodeChoice p = c.pick(rows, bucket);
    taken.push_back(p);
    auto line = c.record(rows, bucket, p, p == kMk ? mk_ms : ly_ms);
    if (line && lines) lines->push_back(*line);
  }
  return taken;
}

TEST(DecodeChooser, TimesBothPathsThenTakesTheFaster) {
  DecodeChooserOptions o;  // warmup 1, samples 5
  DecodeChooser c(o);
  std::vector<std::string> lines;
  auto taken = run(c, 8, 8192, 30, 10.6, 12.4, &lines);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(taken[i], kMk) << i;   // warm-up + 5 samples
  for (int i = 6; i < 12; ++i) EXPECT_EQ(taken[i], kLy) << i;  // then the layered path
  for (int i = 12; i < 30; ++i) EXPECT_EQ(taken[i], kMk) << i;
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("8 rows, context bucket 8192: megakernel 10.600 ms, layered 12.400 ms -> megakernel"),
            std::string::npos)
      << lines[0];

  DecodeChooser d(o);
  taken = run(d, 1, 8192, 30, 3.16, 2.79);
  for (int i = 12; i < 30; ++i) EXPECT_EQ(taken[i], kLy) << i;
}

TEST(DecodeChooser, TheFirstStepOfAPathIsNotCounted) {
  DecodeChooser c;
  // The megakernel's first step builds its lists: 500 ms, then 9 ms steps;
  // the layered path 10 ms. The warm-up step must not make it lose.
  for (int i = 0; i < 12; ++i) {
    const DecodeChoice p = c.pick(4, 1024);
    const bool first_mk = p == kMk && i == 0;
    c.record(4, 1024, p, p == kMk ? (first_mk ? 500.0 : 9.0) : 10.0);
  }
  EXPECT_EQ(c.pick(4, 1024), kMk);
  const auto st = c.state();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_DOUBLE_EQ(st[0].median_ms[static_cast<int>(kMk)], 9.0);
  EXPECT_DOUBLE_EQ(st[0].median_ms[static_cast<int>(kLy)], 10.0);
  EXPECT_TRUE(st[0].decided);
}

TEST(DecodeChooser, KeysAreIndependent) {
  DecodeChooser c;
  run(c, 1, 8192, 20, 3.16, 2.79);
  run(c, 8, 8192, 20, 10.6, 12.4);
  run(c, 8, 131072, 20, 24.2, 21.4);
  EXPECT_EQ(c.pick(1, 8192), kLy);
  EXPECT_EQ(c.pick(8, 8192), kMk);
  EXPECT_EQ(c.pick(8, 131072), kLy);
  // A new key starts by timing the megakernel.
  EXPECT_EQ(c.pick(2, 8192), kMk);
  EXPECT_EQ(c.state().size(), 4u);
}

TEST(DecodeChooser, RetimesTheOtherPathAndFollowsAChange) {
  DecodeChooserOptions o;
  o.explore_every = 20;
  o.explore_steps = 2;
  DecodeChooser c(o);
  run(c, 8, 8192, 12, 10.0, 12.0);  // timed: the megakernel wins
  auto taken = run(c, 8, 8192, 22, 10.0, 12.0);
  // 20 steps on the megakernel, then the layered path twice.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(taken[i], kMk) << i;
  EXPECT_EQ(taken[20], kLy);
  EXPECT_EQ(taken[21], kLy);
  EXPECT_EQ(c.pick(8, 8192), kMk);
  // The layered path became faster (another batch make-up): the re-timings
  // replace its samples until its median wins.
  // Two more re-timings (20 steps apart) put 4 of its 5 samples at 8 ms.
  std::vector<std::string> lines;
  taken = run(c, 8, 8192, 44, 10.0, 8.0, &lines);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("megakernel 10.000 ms, layered 8.000 ms -> layered"), std::string::npos) << lines[0];
  EXPECT_EQ(taken.back(), kLy);
  EXPECT_EQ(c.pick(8, 8192), kLy);
}

}  // namespace
}  // namespace ms::mk
