// The pieces under the HTTP server's limits, without sockets: the bounded
// gzip / deflate body decoder (a bomb stops at the limit, not after it is
// inflated) and the CORS origin policy.
#include <gtest/gtest.h>

#include <string>

#include "server/body_decoder.h"
#include "server/cors.h"
#include "gzip_for_tests.h"

namespace ms::server {
namespace {

using testing::compress;

TEST(BodyDecoder, GzipAndDeflateRoundTripInPieces) {
  const std::string text = "{\"prompt\": \"" + std::string(100000, 'x') + "\"}";
  for (bool gz : {true, false}) {
    std::string z = compress(text, gz), out;
    BodyDecoder d(gz ? ContentCoding::kGzip : ContentCoding::kDeflate, 1 << 20, &out);
    for (size_t i = 0; i < z.size(); i += 7) ASSERT_EQ(d.feed(std::string_view(z).substr(i, 7)), BodyDecoder::Result::kOk);
    EXPECT_EQ(d.finish(), BodyDecoder::Result::kOk);
    EXPECT_EQ(out, text);
  }
}

TEST(BodyDecoder, BombStopsAtTheLimit) {
  // 64 MiB of zeros compress to ~64 KiB; the decoder must refuse once it
  // has produced the limit, holding no more than that.
  std::string zeros(size_t(64) << 20, '\0');
  std::string z = compress(zeros);
  zeros.clear();
  zeros.shrink_to_fit();
  ASSERT_LT(z.size(), size_t(1) << 20);
  std::string out;
  BodyDecoder d(ContentCoding::kGzip, size_t(1) << 20, &out);
  BodyDecoder::Result r = BodyDecoder::Result::kOk;
  for (size_t i = 0; i < z.size() && r == BodyDecoder::Result::kOk; i += 4096) r = d.feed(std::string_view(z).substr(i, 4096));
  EXPECT_EQ(r, BodyDecoder::Result::kTooLarge);
  EXPECT_LE(out.size(), size_t(1) << 20);
}

TEST(BodyDecoder, CorruptTruncatedAndTrailingDataAreErrors) {
  std::string out;
  BodyDecoder bad(ContentCoding::kGzip, 1 << 20, &out);
  EXPECT_EQ(bad.feed("not gzip at all"), BodyDecoder::Result::kCorrupt);
  std::string z = compress("hello world");
  BodyDecoder cut(ContentCoding::kGzip, 1 << 20, &out);
  EXPECT_EQ(cut.feed(std::string_view(z).substr(0, z.size() - 4)), BodyDecoder::Result::kOk);
  EXPECT_EQ(cut.finish(), BodyDecoder::Result::kCorrupt);
  BodyDecoder trailing(ContentCoding::kGzip, 1 << 20, &out);
  EXPECT_EQ(trailing.feed(z + "junk"), BodyDecoder::Result::kCorrupt);
  std::string plain;
  BodyDecoder id(ContentCoding::kIdentity, 4, &plain);
  EXPECT_EQ(id.feed("abcd"), BodyDecoder::Result::kOk);
  EXPECT_EQ(id.feed("e"), BodyDecoder::Result::kTooLarge);
}

TEST(BodyDecoder, ContentCodingNames) {
  ContentCoding c;
  EXPECT_TRUE(parse_content_coding("", &c) && c == ContentCoding::kIdentity);
  EXPECT_TRUE(parse_content_coding(" GZIP ", &c) && c == ContentCoding::kGzip);
  EXPECT_TRUE(parse_content_coding("x-gzip", &c) && c == ContentCoding::kGzip);
  EXPECT_TRUE(parse_content_coding("deflate", &c) && c == ContentCoding::kDeflate);
  EXPECT_FALSE(parse_content_coding("br", &c));
  EXPECT_FALSE(parse_content_coding("gzip, gzip", &c));
}

TEST(CorsPolicy, DefaultAllowsOnlyPagesOnThisMachine) {
  CorsPolicy p = CorsPolicy::parse("local").value();
  EXPECT_TRUE(p.allows("http://localhost:3000"));
  EXPECT_TRUE(p.allows("http://127.0.0.1"));
  EXPECT_TRUE(p.allows("https://[::1]:8443"));
  EXPECT_FALSE(p.allows("http://localhost.evil.com"));
  EXPECT_FALSE(p.allows("http://evil.com"));
  EXPECT_FALSE(p.allows("null"));
  EXPECT_FALSE(p.allows("http://localhost:3000\r\nX: y"));
  EXPECT_EQ(CorsPolicy::parse("").value().describe(), "local");
}

TEST(CorsPolicy, AnyNoneAndLists) {
  EXPECT_TRUE(CorsPolicy::parse("*").value().allows("https://anything.example"));
  EXPECT_FALSE(CorsPolicy::parse("none").value().allows("http://localhost:3000"));
  CorsPolicy l = CorsPolicy::parse("https://a.example.com, http://b.example:8080/").value();
  EXPECT_TRUE(l.allows("https://a.example.com"));
  EXPECT_TRUE(l.allows("http://b.example:8080"));
  EXPECT_FALSE(l.allows("https://b.example:8080"));
  EXPECT_FALSE(CorsPolicy::parse("a.example.com").is_ok());
  EXPECT_FALSE(CorsPolicy::parse(",").is_ok());
}

}  // namespace
}  // namespace ms::server
