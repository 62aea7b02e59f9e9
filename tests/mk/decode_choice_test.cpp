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

TEST(DecodeChooser, TimesBothPathsAlternatelyThenTakesTheFaster) {
  DecodeChooserOptions o;  // warmup 1, samples 5
  DecodeChooser c(o);
  std::vector<std::string> lines;
  auto taken = run(c, 8, 8192, 30, 10.6, 12.4, &lines);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(taken[i], i % 2 ? kLy : kMk) << i;  // warm-up + 5 samples each, alternately
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
  // Two samples a path, so one slow step would decide: the megakernel's
  // first step builds its lists (500 ms), its later steps take 9 ms, the
  // layered path's 10 ms. Counting the first step would pick the layered path.
  DecodeChooserOptions o;
  o.samples = 2;
  DecodeChooser c(o);
  for (int i = 0; i < 6; ++i) {
    const DecodeChoice p = c.pick(4, 1024);
    c.record(4, 1024, p, p == kMk ? (i == 0 ? 500.0 : 9.0) : 10.0);
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

TEST(DecodeChooser, RetimesTheOtherPathOnAFreshWindowAndFollowsAChange) {
  DecodeChooserOptions o;
  o.explore_every = 20;
  DecodeChooser c(o);
  run(c, 8, 8192, 12, 10.0, 12.0);  // timed: the megakernel wins
  auto taken = run(c, 8, 8192, 25, 10.0, 12.0);
  // 20 steps on the megakernel, then the layered path's five-step window.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(taken[i], kMk) << i;
  for (int i = 20; i < 25; ++i) EXPECT_EQ(taken[i], kLy) << i;
  EXPECT_EQ(c.pick(8, 8192), kMk);
  // The layered path became faster (another batch make-up): its next
  // re-timing, a fresh window, decides at once (its old 12 ms samples are gone).
  std::vector<std::string> lines;
  taken = run(c, 8, 8192, 25, 10.0, 8.0, &lines);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(taken[i], kMk) << i;
  for (int i = 20; i < 25; ++i) EXPECT_EQ(taken[i], kLy) << i;
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("megakernel 10.000 ms, layered 8.000 ms -> layered"), std::string::npos) << lines[0];
  EXPECT_EQ(c.pick(8, 8192), kLy);
  // Now the megakernel is the one re-timed.
  taken = run(c, 8, 8192, 25, 10.0, 8.0);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(taken[i], kLy) << i;
  for (int i = 20; i < 25; ++i) EXPECT_EQ(taken[i], kMk) << i;
}

TEST(DecodeChooser, NearEqualPathsDoNotFlipBackAndForth) {
  DecodeChooserOptions o;
  o.explore_every = 10;
  DecodeChooser c(o);
  std::vector<std::string> lines;
  run(c, 1, 8192, 12, 10.0, 10.5, &lines);  // the megakernel, by 5%
  ASSERT_EQ(lines.size(), 1u);
  // The layered path 2% faster: inside the 3% margin, the choice stays.
  auto taken = run(c, 1, 8192, 150, 10.0, 9.8, &lines);
  EXPECT_EQ(lines.size(), 1u);
  int mk = 0;
  for (DecodeChoice p : taken) mk += p == kMk;
  EXPECT_EQ(mk, 150 - 5 * (150 / 15));  // re-timing 5 layered steps after every 10 on the megakernel
  // 5% faster: past the margin, it switches once.
  run(c, 1, 8192, 15, 10.0, 9.5, &lines);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("-> layered"), std::string::npos) << lines[1];
}

}  // namespace
}  // namespace ms::mk
