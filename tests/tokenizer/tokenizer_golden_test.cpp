// Golden tests: encode/decode must equal the real HF tokenizer
// (tokenizers@0.23.2, goldens from tools/gen_tokenizer_fixtures.js) on the
// official Qwen3 and Llama 3 tokenizer.json and on a Command-R tokenizer.json
// rebuilt from llama.cpp's gguf vocab (pruned to the merges the texts use),
// and llama.cpp's vocab cases for the three vocabularies.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ms {
namespace {

using testing_util::fixture_dir;
using testing_util::read_all;

// Loading is slow-ish (6 MB JSON); load each model once per test binary.
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

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, EncodeDecodeMatchHf) {
  const std::string name = GetParam();
  const Tokenizer& tok = model(name);
  const std::string file = name == "command-r" ? "/goldens_command_r.json" : "/goldens.json";
  const auto goldens = nlohmann::json::parse(read_all(fixture_dir() + file));
  int n = 0;
  for (const auto& c : goldens["cases"]) {
    const std::string text = c["text"];
    const auto& g = c.contains(name) ? c[name] : c;
    const auto ids = g["ids"].get<std::vector<int32_t>>();
    const auto ids_ns = g["ids_no_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(show(tok.encode(text, true)), show(ids)) << "text: " << text;
    EXPECT_EQ(show(tok.encode(text, false)), show(ids_ns)) << "text: " << text;
    EXPECT_EQ(tok.decode(ids, false), g["decode"].get<std::string>()) << "text: " << text;
    EXPECT_EQ(tok.decode(ids, true), g["decode_skip_special"].get<std::string>()) << "text: " << text;
    ++n;
  }
  EXPECT_GT(n, 50);
}

INSTANTIATE_TEST_SUITE_P(Models, Golden, ::testing::Values("qwen3", "llama3", "command-r"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

struct VocabCase {
  std::string file;
  std::string model;
};

class LlamaCppVocab : public ::testing::TestWithParam<VocabCase> {};

// llama.cpp's test-tokenizer-0 format: texts separated by a
// "\n__ggml_vocab_test__\n" line; one line of ids per text in the .out file.
TEST_P(LlamaCppVocab, MatchesOut) {
  const VocabCase vc = GetParam();
  const Tokenizer& tok = model(vc.model);
  const std::string inp = read_all(fixture_dir() + "/" + vc.file + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    size_t next = inp.find(sep, pos);
    if (next == std::string::npos) next = inp.size();
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_all(fixture_dir() + "/" + vc.file + ".out"));
  std::string line;
  size_t i = 0;
  for (; i < texts.size() && std::getline(out, line); ++i) {
    std::istringstream ls(line);
    std::vector<int32_t> want;
    for (int32_t x; ls >> x;) want.push_back(x);
    EXPECT_EQ(show(tok.encode(texts[i], false)), show(want)) << "case " << i << ": " << texts[i];
  }
  EXPECT_EQ(i, texts.size());
  EXPECT_GT(i, 40u);
  // tools/gen_tokenizer_fixtures.js checked that llama.cpp agrees with HF on
  // every case (llamacpp_check.json); HF stays the reference.
  const auto check = nlohmann::json::parse(read_all(fixture_dir() + "/llamacpp_check.json"));
  for (const auto& c : check[vc.file]["cases"]) EXPECT_TRUE(c["agree"].get<bool>());
}

INSTANTIATE_TEST_SUITE_P(Vocabs, LlamaCppVocab,
                         ::testing::Values(VocabCase{"ggml-vocab-llama-bpe.gguf", "llama3"},
                                           VocabCase{"ggml-vocab-qwen2.gguf", "qwen3"},
                                           VocabCase{"ggml-vocab-command-r.gguf", "command-r"}),
                         [](const auto& info) {
                           std::string s = info.param.model;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace ms
