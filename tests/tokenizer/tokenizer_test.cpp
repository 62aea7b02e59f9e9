// Unit tests of the tokenizer beyond the HF goldens: streaming detokenizer,
// invalid UTF-8, parse_special, side files (bos/eos/chat template), merges
// formats, ignore_merges, NFC and lossy UTF-8 helpers, bad tokenizer.json
// files (each must fail with an error naming the problem), threads.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ms {
namespace {

using nlohmann::json;

using testing_util::bl;
using testing_util::fixture_dir;
using testing_util::read_all;
using testing_util::tiny_json;

const Tokenizer& model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    auto r = Tokenizer::load(fixture_dir() + "/" + name);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    slot = std::make_unique<Tokenizer>(std::move(r).value());
  }
  return *slot;
}

Tokenizer tiny(const json& j) {
  auto r = Tokenizer::from_json_text(j.dump());
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return std::move(r).value();
}

std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special, int* empty_pushes = nullptr) {
  StreamingDetokenizer d(tok, skip_special);
  std::string out;
  for (int32_t id : ids) {
    const std::string delta = d.push(id);
    EXPECT_EQ(unicode::utf8_lossy(delta), delta) << "a delta is not valid UTF-8";
    if (delta.empty() && empty_pushes) ++*empty_pushes;
    out += delta;
  }
  return out + d.flush();
}

TEST(StreamingDetokenizer, EqualsDecodeOnAllGoldens) {
  const auto goldens = json::parse(read_all(fixture_dir() + "/goldens.json"));
  for (const std::string name : {"qwen3", "llama3"}) {
    const Tokenizer& tok = model(name);
    for (const auto& c : goldens["cases"]) {
      const auto ids = c[name]["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(stream(tok, ids, false), tok.decode(ids, false));
      EXPECT_EQ(stream(tok, ids, true), tok.decode(ids, true));
    }
  }
}

TEST(StreamingDetokenizer, SplitEmojiWaitsForWholeCharacter) {
  const Tokenizer& tok = model("qwen3");
  const std::string text = "🧑🏿‍🚀 and 𝕳𝖊𝖑𝖑𝖔";
  const auto ids = tok.encode(text, false);
  int empty = 0;
  EXPECT_EQ(stream(tok, ids, false, &empty), text);
  EXPECT_GT(empty, 0) << "expected some tokens to end inside a character";
}

TEST(StreamingDetokenizer, ByteTokensAndInvalidBytes) {
  const Tokenizer& tok = model("llama3");
  auto byte_id = [&](unsigned char b) { return *tok.token_to_id(bl(std::string(1, char(b)))); };
  StreamingDetokenizer d(tok, false);
  EXPECT_EQ(d.push(byte_id(0xC3)), "");
  EXPECT_TRUE(d.has_pending());
  EXPECT_EQ(d.push(byte_id(0xA9)), "é");
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.push(byte_id(0xA6)), "");
  EXPECT_EQ(d.push(byte_id(0x99)), "🦙");
  EXPECT_EQ(d.push(byte_id(0xFF)), "\xEF\xBF\xBD");       // never valid: replaced at once
  EXPECT_EQ(d.push(byte_id(0xE4)), "");                   // could still become a character
  EXPECT_EQ(d.push(byte_id('a')), "\xEF\xBF\xBD" "a");    // ...but did not
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");                   // unfinished at the end
  EXPECT_FALSE(d.has_pending());
}

TEST(StreamingDetokenizer, SpecialTokensShownOrSkipped) {
  const Tokenizer& tok = model("qwen3");
  const auto ids = tok.encode("<|im_start|>user\nhi<|im_end|>", false);
  EXPECT_EQ(stream(tok, ids, false), "<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(stream(tok, ids, true), "user\nhi");
  // A special token between the bytes of one character does not break it.
  std::vector<int32_t> e;
  for (const char* c : {"🦙", "𝖊", "𓀀", "🧑"}) {  // first character that needs several tokens
    e = tok.encode(c, false);
    if (e.size() >= 2) break;
  }
  ASSERT_GE(e.size(), 2u);
  const std::string ch = tok.decode(e, false);
  std::vector<int32_t> mixed = {e[0], *tok.token_to_id("<|im_end|>")};
  mixed.insert(mixed.end(), e.begin() + 1, e.end());
  EXPECT_EQ(stream(tok, mixed, true), ch);
  EXPECT_EQ(stream(tok, mixed, true), tok.decode(mixed, true));
  EXPECT_EQ(stream(tok, mixed, false), tok.decode(mixed, false));
}

TEST(Tokenizer, InvalidUtf8EncodesRawBytes) {
  const std::string bad = std::string("ok \xFF\xFE bad \xC3(\xE2\x82 end \xED\xA0\x80 x\xF0\x9F\x98", 28);
  for (const std::string name : {"qwen3", "llama3"}) {
    const Tokenizer& tok = model(name);
    const auto ids = tok.encode(bad, true);
    std::string bytes;
    for (int32_t id : ids) bytes += tok.token_bytes(id);
    EXPECT_EQ(bytes, bad) << name;
    EXPECT_EQ(tok.decode(ids, false), unicode::utf8_lossy(bad)) << name;
    // Prefixes cut anywhere must not crash either.
    for (size_t n = 0; n <= bad.size(); ++n) (void)tok.encode(std::string_view(bad).substr(0, n), true);
  }
}

TEST(Tokenizer, ParseSpecialFalseKeepsSpecialTokensAsText) {
  const Tokenizer& tok = model("qwen3");
  const int32_t im_start = *tok.token_to_id("<|im_start|>");
  const int32_t think = *tok.token_to_id("<think>");  // an added, non-special token
  EXPECT_TRUE(tok.is_special(im_start));
  EXPECT_FALSE(tok.is_special(think));
  const std::string text = "<|im_start|>user <think>x</think>";
  const auto parsed = tok.encode(text, false, true);
  const auto plain = tok.encode(text, false, false);
  EXPECT_NE(std::find(parsed.begin(), parsed.end(), im_start), parsed.end());
  EXPECT_EQ(std::find(plain.begin(), plain.end(), im_start), plain.end());
  EXPECT_NE(std::find(plain.begin(), plain.end(), think), plain.end());
  EXPECT_EQ(tok.decode(plain, false), text);
}

TEST(Tokenizer, OfficialSideFiles) {
  const Tokenizer& qwen = model("qwen3");
  EXPECT_EQ(qwen.vocab_size(), 151669);
  EXPECT_FALSE(qwen.bos_id().has_value());
  ASSERT_FALSE(qwen.eos_ids().empty());
  EXPECT_EQ(qwen.eos_ids()[0], 151645);  // <|im_end|>
  EXPECT_NE(qwen.chat_template().find("im_start"), std::string::npos);
  const Tokenizer& llama = model("llama3");
  EXPECT_EQ(llama.vocab_size(), 128256);
  EXPECT_EQ(llama.bos_id(), 128000);
  EXPECT_EQ(llama.eos_ids()[0], 128001);
  EXPECT_EQ(llama.id_to_token(128000), "<|begin_of_text|>");
  EXPECT_EQ(llama.id_to_token(9906), "Hello");
  EXPECT_EQ(llama.token_to_id("Hello"), 9906);
  EXPECT_EQ(llama.id_to_token(-1), "");
  EXPECT_EQ(llama.id_to_token(1 << 30), "");
  EXPECT_FALSE(llama.token_to_id("no such token here").has_value());
  EXPECT_EQ(llama.decode(std::vector<int32_t>{9906, -5, 1 << 30, 1917}, false), "Hello world");
}

TEST(Tokenizer, SideFilesInDirectory) {
  const auto dir = std::filesystem::temp_directory_path() / ("ms_tok_side_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_json({{"a", "b"}}).dump();
  json config = {{"bos_token", {{"content", "<s>"}}},
                 {"eos_token", "<eos>"},
                 {"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                {{"name", "default"}, {"template", "D"}}})},
                 {"added_tokens_decoder", {{"258", {{"content", "<s>"}, {"special", true}, {"normalized", false}}}}}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  std::ofstream(dir / "generation_config.json") << json{{"eos_token_id", {257, 99}}}.dump();
  auto tok = Tokenizer::load(dir.string());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tok->chat_template(), "D");
  EXPECT_EQ(tok->bos_id(), 258);
  EXPECT_EQ(tok->bos_token(), "<s>");
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{257, 99}));
  EXPECT_EQ(tok->encode("<s>ab<eos>", false), (std::vector<int32_t>{258, 256, 257}));
  EXPECT_TRUE(tok->is_special(258));
  // The path of the tokenizer.json itself also works (and reads the side files).
  auto by_file = Tokenizer::load((dir / "tokenizer.json").string());
  ASSERT_TRUE(by_file.is_ok());
  EXPECT_EQ(by_file->bos_id(), 258);
  std::filesystem::remove_all(dir);
}

TEST(Tokenizer, MergeFormatsAgreeAndRanksOrder) {
  const std::vector<std::pair<std::string, std::string>> merges = {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {" ", "a"}};
  Tokenizer s = tiny(tiny_json(merges, false));
  Tokenizer a = tiny(tiny_json(merges, true));
  for (const std::string text : {"abc", "ab", "a abc", "cabcab", "abcabcabc"}) EXPECT_EQ(s.encode(text, false), a.encode(text, false)) << text;
  // "bc" (rank 0) wins over "ab" (rank 1): "abc" -> "a" + "bc" -> "abc".
  EXPECT_EQ(s.encode("abc", false), (std::vector<int32_t>{*s.token_to_id(bl("abc"))}));
  EXPECT_EQ(s.encode("ab", false), (std::vector<int32_t>{*s.token_to_id(bl("ab"))}));
  // Long words take the heap path; the result must equal short-word merging.
  std::string long_word, expect_text;
  for (int i = 0; i < 200; ++i) long_word += "abc";
  const auto ids = s.encode(long_word, false);
  EXPECT_EQ(ids.size(), 200u);
  EXPECT_EQ(s.decode(ids, false), long_word);
}

TEST(Tokenizer, IgnoreMergesUsesWholeWordToken) {
  json j = tiny_json({{"a", "b"}});
  j["model"]["vocab"][bl("abc")] = 300;  // reachable only as a whole word
  j["added_tokens"][0]["id"] = 301;
  Tokenizer plain = tiny(j);
  EXPECT_EQ(plain.encode("abc", false), (std::vector<int32_t>{256, 'c'}));
  j["model"]["ignore_merges"] = true;
  Tokenizer ignore = tiny(j);
  EXPECT_EQ(ignore.encode("abc", false), (std::vector<int32_t>{300}));
  // A word that is not a token still goes through the merges.
  EXPECT_EQ(ignore.encode("abcab", false), (std::vector<int32_t>{256, 'c', 256}));
}

TEST(Tokenizer, VeryLongInputs) {
  const Tokenizer& tok = model("llama3");
  const std::string letters(200000, 'x');
  const auto ids = tok.encode(letters, false);
  EXPECT_EQ(tok.decode(ids, false), letters);
  std::string spaces(100000, ' ');
  spaces += "end";
  EXPECT_EQ(tok.decode(tok.encode(spaces, false), false), spaces);
}

TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
  const Tokenizer& tok = model("qwen3");
  const std::string text = read_all(fixture_dir() + "/bench_corpus.txt").substr(0, 200000);
  const auto want = tok.encode(text, true);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] { ok[t] = tok.encode(text, true) == want; });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]) << "thread " << t;
}

// Random bytes, fragments of special tokens and combining marks: encode never
// crashes, its token bytes give the input back (Llama 3 has no normalizer),
// and streaming equals decode. Random ids (valid or not) never crash decode.
TEST(Tokenizer, RandomInputsFuzz) {
  const std::vector<std::string> pieces = {"<|", "|>", "<|eot_id|>", "<|begin_of_text|>", "<|im_start|>", " ", "  ",
                                           "\n", "\t", "a", "Z", "7", "'s", "\xCC\x81", "\xE4\xB8\xAD", "\xF0\x9F",
                                           "\x80", "\xFF", "\xED\xA0\x80", "\xC3", "\xEF\xBF\xBD", "e\xCC\x81"};
  std::mt19937 rng(1234);
  for (const std::string name : {"llama3", "qwen3"}) {
    const Tokenizer& tok = model(name);
    for (int iter = 0; iter < 300; ++iter) {
      std::string text;
      const int n = rng() % 40;
      for (int i = 0; i < n; ++i) {
        if (rng() % 3 == 0) text.push_back(static_cast<char>(rng() % 256));
        else text += pieces[rng() % pieces.size()];
      }
      const auto ids = tok.encode(text, iter % 2 == 0, iter % 3 != 0);
      if (name == "llama3") {
        std::string bytes;
        for (int32_t id : ids) bytes += tok.token_bytes(id);  // this file's post-processor adds nothing
        EXPECT_EQ(bytes, text) << "iteration " << iter;
      }
      EXPECT_EQ(stream(tok, ids, false), tok.decode(ids, false));
      EXPECT_EQ(stream(tok, ids, true), tok.decode(ids, true));
    }
    std::vector<int32_t> junk;
    for (int i = 0; i < 200; ++i) junk.push_back(static_cast<int32_t>(rng() % 300000) - 1000);
    EXPECT_EQ(stream(tok, junk, false), tok.decode(junk, false));
  }
}

TEST(Unicode, NfcAndLossy) {
  EXPECT_EQ(unicode::nfc("e\xCC\x81"), "\xC3\xA9");                          // e + acute -> é
  EXPECT_EQ(unicode::nfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");          // reordered by class
  EXPECT_EQ(unicode::nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul L V T
  EXPECT_EQ(unicode::nfc("\xE2\x84\xAB"), "\xC3\x85");                        // Angstrom sign -> Å
  EXPECT_EQ(unicode::nfc("a\xFF" "e\xCC\x81"), "a\xFF\xC3\xA9");              // invalid byte kept
  EXPECT_FALSE(unicode::may_change_under_nfc("plain ascii and 中文"));
  EXPECT_TRUE(unicode::may_change_under_nfc("e\xCC\x81"));
  EXPECT_EQ(unicode::utf8_lossy("\xF0\x9F"), "\xEF\xBF\xBD");
  EXPECT_EQ(unicode::utf8_lossy("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(unicode::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(unicode::utf8_lossy("a\xC3\xA9z"), "a\xC3\xA9z");
  EXPECT_EQ(unicode::utf8_emittable_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(unicode::utf8_emittable_prefix("ab\xFF"), 3u);
}

// Loading must fail with a clear error, never crash or silently differ.
struct BadCase {
  std::string what;
  std::function<void(json&)> edit;
  StatusCode code;
  std::string must_mention;
};

TEST(Tokenizer, BadFilesFailWithClearErrors) {
  const std::vector<BadCase> cases = {
      {"unsupported normalizer", [](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, StatusCode::kUnimplemented, "NFKC"},
      {"normalizer in sequence", [](json& j) { j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}}; }, StatusCode::kUnimplemented, "Lowercase"},
      {"unsupported pre-tokenizer", [](json& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Metaspace"}}}}}; }, StatusCode::kUnimplemented, "Metaspace"},
      {"no byte level", [](json& j) { j["pre_tokenizer"] = {{"type", "Digits"}}; }, StatusCode::kUnimplemented, "ByteLevel"},
      {"bad regex", [](json& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}, {{"type", "ByteLevel"}}}}}; }, StatusCode::kInvalidArgument, "(unclosed"},
      {"bad behavior", [](json& j) { j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}}; }, StatusCode::kUnimplemented, "Sideways"},
      {"unigram model", [](json& j) { j["model"]["type"] = "Unigram"; }, StatusCode::kUnimplemented, "Unigram"},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, StatusCode::kUnimplemented, "dropout"},
      {"subword prefix", [](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, StatusCode::kUnimplemented, "continuing_subword_prefix"},
      {"decoder", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, StatusCode::kUnimplemented, "WordPiece"},
      {"no decoder", [](json& j) { j["decoder"] = nullptr; }, StatusCode::kUnimplemented, "decoder"},
      {"post-processor", [](json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, StatusCode::kUnimplemented, "BertProcessing"},
      {"truncation", [](json& j) { j["truncation"] = {{"max_length", 8}}; }, StatusCode::kUnimplemented, "truncation"},
      {"merge not in vocab", [](json& j) { j["model"]["merges"].push_back("zz qq"); }, StatusCode::kInvalidArgument, "zz qq"},
      {"merge malformed", [](json& j) { j["model"]["merges"].push_back("onlyone"); }, StatusCode::kInvalidArgument, "onlyone"},
      {"vocab wrong type", [](json& j) { j["model"]["vocab"] = 5; }, StatusCode::kInvalidArgument, "vocab"},
      {"vocab id wrong type", [](json& j) { j["model"]["vocab"]["a"] = "x"; }, StatusCode::kInvalidArgument, "malformed"},
      {"template unknown token", [](json& j) { j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", {{"id", "<bos>"}}}}}}, {"special_tokens", json::object()}}; }, StatusCode::kInvalidArgument, "<bos>"},
      {"no model", [](json& j) { j.erase("model"); }, StatusCode::kInvalidArgument, "model"},
  };
  for (const BadCase& c : cases) {
    json j = tiny_json({{"a", "b"}});
    c.edit(j);
    auto r = Tokenizer::from_json_text(j.dump());
    ASSERT_FALSE(r.is_ok()) << c.what;
    EXPECT_EQ(r.status().code(), c.code) << c.what << ": " << r.status().to_string();
    EXPECT_NE(r.status().message().find(c.must_mention), std::string::npos) << c.what << ": " << r.status().to_string();
  }
}

TEST(Tokenizer, MissingAndCorruptFiles) {
  auto missing = Tokenizer::load("/nonexistent/dir/for/megaserve");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("tokenizer.json"), std::string::npos);
  auto corrupt = Tokenizer::from_json_text("{\"model\": {\"vocab\": ");
  ASSERT_FALSE(corrupt.is_ok());
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss);
  auto not_object = Tokenizer::from_json_text("[1, 2]");
  EXPECT_FALSE(not_object.is_ok());
  // A truncated copy of a real file.
  const std::string real = read_all(fixture_dir() + "/llama3/tokenizer.json");
  auto truncated = Tokenizer::from_json_text(std::string_view(real).substr(0, real.size() / 2));
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
  // A corrupt side file is reported, naming it.
  const auto dir = std::filesystem::temp_directory_path() / ("ms_tok_bad_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_json({}).dump();
  std::ofstream(dir / "tokenizer_config.json") << "{not json";
  auto bad_side = Tokenizer::load(dir.string());
  ASSERT_FALSE(bad_side.is_ok());
  EXPECT_NE(bad_side.status().message().find("tokenizer_config.json"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ms
