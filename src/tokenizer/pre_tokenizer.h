// Pre-tokenizers and normalizers from tokenizer.json: they cut a text into the
// "words" that BPE encodes independently. Supported: normalizers NFC /
// Sequence / none; pre-tokenizers Split (regex via PCRE2 JIT, or literal),
// ByteLevel (add_prefix_space, use_regex), Digits, Sequence. Anything else is
// an error at load that names the type.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ms {

// A word: bytes [begin, end) of the working text.
struct Span {
  uint32_t begin;
  uint32_t end;
};

class Regex;  // PCRE2 pattern (pre_tokenizer.cpp)

// A word character as Rust's regex \w (Alphabetic, marks, decimal digits,
// connector punctuation, joiners): what HF checks for single_word added tokens.
bool is_word_character(char32_t cp);

class Normalizer {
 public:
  // `j` is tokenizer.json's "normalizer" (null allowed).
  static Result<Normalizer> from_json(const nlohmann::json& j);
  bool is_identity() const { return !nfc_; }
  // Rewrites `text` in place.
  void normalize(std::string& text) const;

 private:
  bool nfc_ = false;
};

class PreTokenizer {
 public:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    enum class Kind { kSplit, kAddPrefixSpace } kind;
    std::shared_ptr<const Regex> regex;  // kSplit
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
  };

  // `j` is tokenizer.json's "pre_tokenizer" (null allowed).
  static Result<PreTokenizer> from_json(const nlohmann::json& j);

  // True if a ByteLevel pre-tokenizer is present (the model then runs on bytes).
  bool byte_level() const { return byte_level_; }

  // Splits `text` into words (may insert prefix spaces into `text`).
  void split(std::string& text, std::vector<Span>& words) const;

 private:
  Status add(const nlohmann::json& j);
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace ms
