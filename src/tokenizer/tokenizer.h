// Tokenizer: a Hugging Face tokenizer.json (byte-level BPE: Qwen2/3, Llama 3,
// GPT-2, Cohere Command) loaded and run natively. encode() follows HF
// tokenizers exactly: added/special tokens are cut out first, the rest is
// normalized, pre-tokenized and BPE-encoded, then the post-processor adds
// special tokens. A tokenizer.json feature this code does not implement is an
// error at load naming it. StreamingDetokenizer turns ids into UTF-8 deltas.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace ms {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;  // match only when not inside a word
};

// Bytes [begin, end) of a text.
struct TextRange {
  size_t begin = 0, end = 0;
};

class AddedTokenMatcher;  // tokenizer.cpp
struct SpecialPolicy;     // tokenizer.cpp

class Tokenizer {
 public:
  // `path`: a directory holding tokenizer.json (and optionally
  // tokenizer_config.json, special_tokens_map.json, generation_config.json,
  // chat_template.jinja), or the path of a tokenizer.json file.
  static Result<Tokenizer> load(const std::string& path);
  // Parses tokenizer.json text (no side files); `name` labels errors.
  static Result<Tokenizer> from_json_text(std::string_view json_text, const std::string& name = "tokenizer.json");

  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // add_special_tokens: run the post-processor (e.g. Llama 3's BOS).
  // parse_special: match special added tokens in the text; when false they are
  // encoded as plain text (non-special added tokens still match, like HF's
  // split_special_tokens). Invalid UTF-8 is encoded byte by byte.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens, bool parse_special = true) const;
  // encode(text, add_special_tokens, parse_special = true), except that a
  // special token overlapping a `text_only` range (sorted, not overlapping)
  // is plain text there, as with parse_special = false. Chat prompts use it:
  // the template's markup keeps its control tokens while control-token text
  // inside message content stays text (no role injection).
  std::vector<int32_t> encode_with_text_ranges(std::string_view text, std::span<const TextRange> text_only,
                                               bool add_special_tokens) const;
  // Unknown ids are dropped; invalid UTF-8 becomes U+FFFD (as HF decode).
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  // The leftmost (then longest) special added token whose text occurs in
  // `text` at or after `from`, as encode() with parse_special would cut it.
  struct SpecialMatch {
    size_t begin, end;
    int index;  // into added_tokens()
  };
  std::optional<SpecialMatch> find_special_text(std::string_view text, size_t from) const;

  int32_t vocab_size() const { return vocab_size_; }  // highest id + 1
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // "" for an unknown id
  bool is_special(int32_t id) const;
  // The bytes `id` decodes to (before UTF-8 repair); empty for unknown ids.
  std::string_view token_bytes(int32_t id) const;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  const std::string& chat_template() const { return chat_template_; }
  // The file the chat template came from ("" when there is none).
  const std::string& chat_template_source() const { return chat_template_source_; }
  // The tokenizer.json path (or the `name` given to from_json_text).
  const std::string& source() const { return source_; }
  // Every id this tokenizer can produce or prepend (vocab, added tokens, the
  // post-processor's, bos/eos) must be below the model's vocabulary size:
  // an id past it would index past the embedding table. The error names the
  // tokenizer file, the id and token, and `model_source` (config.json).
  Status check_fits_vocab(int64_t model_vocab_size, const std::string& model_source) const;
  const std::vector<AddedToken>& added_tokens() const { return added_; }

 private:
  Status init_from_json(const nlohmann::json& j);
  Status load_side_files(const std::string& dir);
  Status add_added_token(AddedToken t);
  Status finalize();
  void encode_text(std::string& text, std::vector<int32_t>& out) const;
  std::vector<int32_t> encode_with(std::string_view text, bool add_special_tokens, const SpecialPolicy& policy) const;
  void encode_normalized_part(std::string_view part, size_t part_offset, const SpecialPolicy& policy,
                              std::vector<int32_t>& out) const;

  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  std::vector<AddedToken> added_;
  std::unique_ptr<AddedTokenMatcher> raw_matcher_;   // tokens with normalized = false
  std::unique_ptr<AddedTokenMatcher> norm_matcher_;  // tokens with normalized = true
  std::vector<int32_t> prefix_ids_, suffix_ids_;     // TemplateProcessing "single"
  std::vector<std::string> token_bytes_;             // id -> decoded bytes
  std::vector<int8_t> special_;                      // id -> is special added token
  std::vector<int32_t> added_index_;                 // id -> index in added_, or -1
  int32_t vocab_size_ = 0;

  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
  std::string bos_token_, eos_token_, chat_template_;
  std::string chat_template_source_, source_;
};

// Incremental detokenizer: push ids one at a time, get UTF-8 text deltas that
// never end inside a character; the deltas plus flush() equal decode(ids).
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}
  std::string push(int32_t id);
  // Emits what is left; an unfinished character becomes U+FFFD.
  std::string flush();
  bool has_pending() const { return !pending_.empty(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes not yet emitted (an incomplete character)
};

}  // namespace ms
