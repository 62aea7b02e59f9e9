// The load-progress lines: byte sizes in words, the rate and time left, the
// closing line, and the throttle (one line per interval, none for small
// transfers) with the clock given.
#include "core/byte_progress.h"

#include <gtest/gtest.h>

#include <vector>

namespace ms {
namespace {

using std::chrono::milliseconds;

TEST(ByteProgress, Units) {
  EXPECT_EQ(format_gb(61'040'000'000ull), "61.04 GB");
  EXPECT_EQ(format_gb(0), "0.00 GB");
  EXPECT_EQ(format_gib(uint64_t(150'117'318'656ull)), "139.81 GiB");
  EXPECT_EQ(format_gib(uint64_t(1) << 30), "1.00 GiB");
}

TEST(ByteProgress, LinesNameBytesRateAndTimeLeft) {
  EXPECT_EQ(format_transfer_progress("loading", 12'400'000'000ull, 61'040'000'000ull, 2.0),
            "loading: 12.40 / 61.04 GB (20%), 6.20 GB/s, 8 s left");
  // No rate before any byte or any time has passed.
  EXPECT_EQ(format_transfer_progress("loading", 0, 61'040'000'000ull, 0.5), "loading: 0.00 / 61.04 GB (0%)");
  EXPECT_EQ(format_transfer_progress("loading", 5, 10, 0.0), "loading: 0.00 / 0.00 GB (50%)");
  EXPECT_EQ(format_transfer_done("loading", 61'040'000'000ull, 11.9), "loading: 61.04 GB in 11.9 s (5.13 GB/s)");
  EXPECT_EQ(format_transfer_done("loading", 1'000'000'000ull, 0.0), "loading: 1.00 GB");
}

TEST(ByteProgress, ThrottledToOneLinePerInterval) {
  std::vector<std::string> lines;
  const uint64_t total = 10'000'000'000ull;
  ByteProgress p("up", total, [&](const std::string& l) { lines.push_back(l); }, 1.0, 1);
  const auto t0 = ByteProgress::Clock::now();
  p.start_at(t0);
  p.update_at(1'000'000'000ull, t0 + milliseconds(400));   // too soon
  p.update_at(2'000'000'000ull, t0 + milliseconds(1000));  // first line
  p.update_at(3'000'000'000ull, t0 + milliseconds(1500));  // too soon after it
  p.update_at(4'000'000'000ull, t0 + milliseconds(2000));  // second
  p.update_at(total, t0 + milliseconds(2500));
  p.finish_at(t0 + milliseconds(2500));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "up: 2.00 / 10.00 GB (20%), 2.00 GB/s, 4 s left");
  EXPECT_EQ(lines[1], "up: 4.00 / 10.00 GB (40%), 2.00 GB/s, 3 s left");
  EXPECT_EQ(lines[2], "up: 10.00 GB in 2.5 s (4.00 GB/s)");
}

TEST(ByteProgress, QuietBelowTheMinimumSize) {
  int lines = 0;
  ByteProgress p("up", 1000, [&](const std::string&) { ++lines; }, 0.0, 1 << 20);
  p.update(500);
  p.update(1000);
  p.finish();
  EXPECT_EQ(lines, 0);
}

}  // namespace
}  // namespace ms
