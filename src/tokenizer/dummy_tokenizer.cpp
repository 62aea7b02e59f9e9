#include "tokenizer/dummy_tokenizer.h"

#include <nlohmann/json.hpp>

#include "tokenizer/unicode.h"

namespace ms {

Result<Tokenizer> make_dummy_tokenizer(int32_t vocab_size, int32_t bos_id, const std::vector<int>& eos_ids) {
  using nlohmann::json;
  std::vector<std::pair<int32_t, std::string>> specials;
  if (bos_id >= 0) specials.push_back({bos_id, "<|bos|>"});
  for (size_t i = 0; i < eos_ids.size(); ++i)
    specials.push_back({eos_ids[i], i == 0 ? "<|eos|>" : "<|eos_" + std::to_string(i) + "|>"});
  std::vector<int8_t> is_special(vocab_size > 0 ? size_t(vocab_size) : 0, 0);
  json added = json::array();
  for (const auto& [id, name] : specials) {
    if (id < 0 || id >= vocab_size)
      return invalid_argument("dummy tokenizer: special token id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(vocab_size));
    if (is_special[id]) continue;  // bos == eos in some configs
    is_special[id] = 1;
    added.push_back({{"id", id}, {"content", name}, {"special", true}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}});
  }
  if (vocab_size < 256 + static_cast<int32_t>(added.size()))
    return invalid_argument("dummy tokenizer: a vocabulary of " + std::to_string(vocab_size) +
                            " ids cannot hold the 256 bytes and " + std::to_string(added.size()) + " special tokens");
  const auto& byte_cp = unicode::byte_to_code_point();
  // Specials are in the BPE vocabulary too: that is where an added token takes its id from.
  json vocab = json::object();
  for (const json& a : added) vocab[a["content"].get<std::string>()] = a["id"];
  int next_byte = 0;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (is_special[id]) continue;
    if (next_byte < 256) {
      std::string s;
      unicode::append_utf8(s, byte_cp[next_byte++]);
      vocab[s] = id;
    } else {
      vocab["<" + std::to_string(id) + ">"] = id;
    }
  }
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                               {"use_regex", true}}},
            {"post_processor", nullptr},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                         {"use_regex", true}}},
            {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                       {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                       {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                       {"vocab", std::move(vocab)}, {"merges", json::array()}}}};
  return Tokenizer::from_json_text(j.dump(), "dummy tokenizer");
}

}  // namespace ms
