// parse_safetensors on in-memory images: shapes whose byte count overflows
// 64 bits (and could wrap to match a tiny data range) and headers nested past
// the JSON depth limit are errors naming the file and tensor.
#include <gtest/gtest.h>

#include <cstring>

#include "model/safetensors.h"

namespace ms {
namespace {

std::string image(const std::string& header, size_t data_bytes = 0) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\0');
}

Result<std::vector<TensorInfo>> parse(const std::string& img) {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(img.data()), img.size(), "/m/model.safetensors");
}

TEST(SafetensorsHeader, ParsesAValidImage) {
  auto r = parse(image(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 24));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].numel(), 6);
  EXPECT_EQ((*r)[0].nbytes, 24u);
}

TEST(SafetensorsHeader, ShapeProductOverflowIsAnError) {
  // 2^32 * 2^32 bytes wraps to 0 in 64 bits, which would "match" [0, 0].
  for (const char* shape : {"[4294967296,4294967296]", "[9223372036854775807,3]", "[4611686018427387904,4]"}) {
    auto r = parse(image(std::string(R"({"t":{"dtype":"U8","shape":)") + shape + R"(,"data_offsets":[0,0]}})"));
    ASSERT_FALSE(r.is_ok()) << shape;
    EXPECT_NE(r.status().message().find("/m/model.safetensors: tensor 't': shape"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("overflows"), std::string::npos) << r.status().message();
  }
}

TEST(SafetensorsHeader, DeepHeaderIsCorruptNotACrash) {
  auto r = parse(image(R"({"__metadata__":)" + std::string(100000, '[') + std::string(100000, ']') + "}"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("/m/model.safetensors: corrupt header (JSON nested deeper than the limit"),
            std::string::npos)
      << r.status().message();
}

TEST(SafetensorsHeader, TruncatedAndOversizedHeaderLengths) {
  EXPECT_FALSE(parse(std::string(7, '\0')).is_ok());
  std::string img = image("{}");
  const uint64_t huge = ~uint64_t(0);
  std::memcpy(img.data(), &huge, 8);
  auto r = parse(img);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("exceeds the file size"), std::string::npos);
}

}  // namespace
}  // namespace ms
