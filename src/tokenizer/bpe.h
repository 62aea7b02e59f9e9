// The BPE model of tokenizer.json ("model": {"type": "BPE"}), on byte-level
// vocabularies: a word's bytes start as one symbol each and the lowest-ranked
// adjacent merge is applied until none applies. Merges live in an
// open-addressing hash map keyed by the (left id, right id) pair; results are
// cached per word.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ms {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// string -> id, open addressing over one flat slot array; the strings live
// in the owner's table indexed by id (the vocab), passed to each call, so a
// lookup touches one slot and one string.
class FlatStringIdMap {
 public:
  // `keys[id]` is the key of `id` ("" = no key).
  void build(const std::vector<std::string>& keys);
  std::optional<int32_t> find(std::string_view key, const std::vector<std::string>& keys) const;

 private:
  std::vector<int32_t> slots_;  // id or -1
  size_t mask_ = 0;
};

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object; vocab strings are byte-level
  // encoded (GPT-2 byte <-> code point table).
  static Result<BpeModel> from_json(const nlohmann::json& model);

  BpeModel();
  ~BpeModel();
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;

  // Appends the ids of `word` (raw bytes, not byte-level encoded).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;  // vocab string
  // Vocab string of `id`, or nullptr if the vocab has no such id.
  const std::string* id_to_token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(tokens_.size()) - 1; }
  int32_t vocab_count() const { return vocab_count_; }  // entries in "vocab"

 private:
  struct MergeMap;
  struct Cache;
  void merge_small(std::vector<int32_t>& syms) const;
  void merge_large(std::vector<int32_t>& syms) const;

  std::vector<std::string> tokens_;       // id -> vocab string ("" where unused)
  std::vector<std::string> token_raw_;    // id -> raw bytes ("" if not byte-level)
  FlatStringIdMap vocab_;                 // vocab string -> id
  FlatStringIdMap bytes_vocab_;           // raw bytes of a token -> id
  std::array<int32_t, 256> byte_id_{};    // single byte -> id, -1 if absent
  std::unique_ptr<MergeMap> merges_;
  std::unique_ptr<Cache> cache_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int32_t vocab_count_ = 0;
};

}  // namespace ms
