// Encode throughput on tests/fixtures/tokenizer/bench_corpus.txt, the text
// tools/tokenizer_bench.js times with the HF Rust tokenizer. Prints MB/s
// (whole text in one call after a warm-up, and ~4 KB prompts one after the
// other); asserts only correctness (the ids round-trip), never a speed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ms {
namespace {

using testing_util::fixture_dir;
using testing_util::read_all;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class Bench : public ::testing::TestWithParam<std::string> {};

TEST_P(Bench, EncodeThroughput) {
  auto tok = Tokenizer::load(fixture_dir() + "/" + GetParam());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  std::ifstream f(fixture_dir() + "/bench_corpus.txt", std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  ASSERT_GT(text.size(), 100000u);

  auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> warm = tok->encode(text, false);  // fills the word cache
  const double cold = seconds_since(t0);
  const int reps = 5;
  t0 = std::chrono::steady_clock::now();
  size_t n = 0;
  for (int r = 0; r < reps; ++r) n += tok->encode(text, false).size();
  const double whole = seconds_since(t0) / reps;
  EXPECT_EQ(n, warm.size() * reps);

  // 4 KB prompts, cut at UTF-8 character boundaries like the JS slices.
  t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < text.size();) {
    size_t e = std::min(text.size(), i + 4096);
    while (e < text.size() && (static_cast<unsigned char>(text[e]) & 0xC0) == 0x80) ++e;
    n += tok->encode(std::string_view(text).substr(i, e - i), false).size();
    i = e;
  }
  const double chunked = seconds_since(t0);
  std::printf("[bench] %s: %zu bytes -> %zu tokens; whole text %.2f MB/s, 4 KB prompts %.2f MB/s, "
              "first call (cold word cache) %.2f MB/s\n",
              GetParam().c_str(), text.size(), warm.size(), text.size() / whole / 1e6,
              text.size() / chunked / 1e6, text.size() / cold / 1e6);
  // Qwen3 normalizes to NFC, so its round trip gives the NFC text.
  const std::string expect = GetParam() == "qwen3" ? unicode::nfc(text) : text;
  EXPECT_TRUE(tok->decode(warm, false) == expect) << "decode(encode(text)) differs from the text";
}

INSTANTIATE_TEST_SUITE_P(Models, Bench, ::testing::Values("qwen3", "llama3"));

}  // namespace
}  // namespace ms
