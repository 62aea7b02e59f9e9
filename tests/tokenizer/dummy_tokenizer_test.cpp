// The stand-in tokenizer of dummy-weight servers: the model's exact
// vocabulary size, specials at the config's ids, bytes at the lowest other
// ids, placeholders "<ID>" for the rest; text and ids round-trip; streaming
// gives one visible piece per placeholder; bad sizes are errors.
#include "tokenizer/dummy_tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>

namespace ms {
namespace {

TEST(DummyTokenizer, NmcShape) {
  const auto t0 = std::chrono::steady_clock::now();
  auto t = make_dummy_tokenizer(262144, 2, {3});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  std::printf("dummy tokenizer of 262144 ids built in %.3f s\n", s);
  EXPECT_EQ(t->vocab_size(), 262144);
  EXPECT_TRUE(t->is_special(2));
  EXPECT_TRUE(t->is_special(3));
  EXPECT_EQ(t->id_to_token(2), "<|bos|>");
  EXPECT_EQ(t->id_to_token(3), "<|eos|>");
  // Bytes 0, 1 at ids 0, 1; bytes 2.. after the specials: 'a' (0x61) at id 0x61 + 2.
  EXPECT_EQ(t->token_bytes(0), std::string(1, '\0'));
  EXPECT_EQ(t->token_bytes(0x61 + 2), "a");
  EXPECT_EQ(t->token_bytes(257), std::string(1, '\xff'));
  EXPECT_EQ(t->decode(std::vector<int32_t>{258, 70123, 262143}, true), "<258><70123><262143>");
  EXPECT_EQ(t->decode(std::vector<int32_t>{2, 0x61 + 2, 3}, true), "a");
  EXPECT_EQ(t->decode(std::vector<int32_t>{2, 0x61 + 2, 3}, false), "<|bos|>a<|eos|>");
  // Text is one token per byte (no merges), UTF-8 included, and decodes back.
  const std::string text = "Hello, wörld <70123>";
  std::vector<int32_t> ids = t->encode(text, true);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(t->decode(ids, true), text);
  // Specials in text are parsed when asked.
  EXPECT_EQ(t->encode("<|eos|>", false, true), std::vector<int32_t>{3});
  StreamingDetokenizer d(*t, true);
  EXPECT_EQ(d.push(100000), "<100000>");
  EXPECT_EQ(d.push(3), "");
}

TEST(DummyTokenizer, SpecialsAtTheTopOfTheVocabulary) {
  auto t = make_dummy_tokenizer(151936, 151643, {151645, 151643});  // Qwen3: eos list holds bos too
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->vocab_size(), 151936);
  EXPECT_EQ(t->token_bytes('a'), "a");  // no special below 256: bytes sit at their own ids
  EXPECT_EQ(t->id_to_token(151645), "<|eos|>");
  EXPECT_EQ(t->id_to_token(151643), "<|bos|>");
  EXPECT_EQ(t->decode(std::vector<int32_t>{151935}, true), "<151935>");
}

TEST(DummyTokenizer, BadShapes) {
  EXPECT_FALSE(make_dummy_tokenizer(200, -1, {}).is_ok());      // fewer ids than bytes
  EXPECT_FALSE(make_dummy_tokenizer(257, 0, {256}).is_ok());    // bytes + 2 specials > 257
  EXPECT_TRUE(make_dummy_tokenizer(258, 0, {257}).is_ok());
  auto out = make_dummy_tokenizer(512, 2, {600});
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("600"), std::string::npos);
}

}  // namespace
}  // namespace ms
