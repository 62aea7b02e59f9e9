// A tokenizer's vocabulary as grammar-constrained decoding sees it: the bytes
// each token id decodes to, which ids a grammar may never offer (special and
// control tokens, empty tokens), and a byte trie over the offerable ones.
//
// The trie is laid out in pre-order: node n's subtree is the id range
// [n, n + subtree_size(n)), its first child (if any) is n + 1 and the next
// sibling of a child c is c + subtree_size(c). A walk that finds a child dead
// skips its whole subtree in one step; that is what keeps mask computation
// proportional to the tokens a grammar state can actually start, not to the
// vocabulary. Node 0 is the root (the empty prefix).
//
// string_scan(): every token run once through the JSON string-content
// automaton (json_string_automaton.h) from each of its sub-states, computed on
// first use (~5 ms for 262K tokens on one core) and kept for the vocabulary's
// lifetime. Immutable after construction apart from that once-only cache, so
// one instance is shared by every grammar and thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/json_string_automaton.h"

namespace ms {

// Per sub-state of the string-content automaton: what each token does when
// read from there (without its own closing quote).
struct StringScan {
  struct Exit {
    int32_t node = 0;     // trie node just after the closing quote
    int32_t started = 0;  // characters started before the quote
  };
  struct Sub {
    std::vector<uint32_t> stay_bits;   // (words) tokens read entirely as content
    // The same tokens, ordered by characters started (ascending), for length bounds.
    std::vector<int32_t> stay_tokens;
    std::vector<int32_t> stay_started;
    int32_t max_started = 0;
    std::vector<Exit> exits;           // token prefixes that close the string
  };
  Sub subs[kNumStrSubs];
};

class TokenVocab {
 public:
  // bytes[i]: the bytes token i decodes to. excluded[i] != 0: never offered
  // (the caller marks special tokens; empty tokens are excluded here).
  static std::shared_ptr<const TokenVocab> create(std::vector<std::string> bytes, std::vector<uint8_t> excluded);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  int32_t words() const { return (size() + 31) / 32; }  // uint32 words of a mask
  std::string_view bytes(int32_t id) const { return bytes_[id]; }
  bool excluded(int32_t id) const { return excluded_[id] != 0; }

  // Trie.
  int32_t num_nodes() const { return static_cast<int32_t>(node_byte_.size()); }
  uint8_t node_byte(int32_t n) const { return node_byte_[n]; }
  int32_t subtree_size(int32_t n) const { return node_size_[n]; }
  // First offerable token whose bytes are this node's prefix, or -1; more
  // tokens with the same bytes follow through same_bytes_next().
  int32_t node_token(int32_t n) const { return node_token_[n]; }
  int32_t same_bytes_next(int32_t token) const { return same_next_[token]; }
  int32_t depth(int32_t n) const { return node_depth_[n]; }
  // Node reached from the root by `prefix`, or -1.
  int32_t find_node(std::string_view prefix) const;

  const StringScan& string_scan() const;

 private:
  TokenVocab() = default;
  void build_trie();

  std::vector<std::string> bytes_;
  std::vector<uint8_t> excluded_;
  std::vector<uint8_t> node_byte_;
  std::vector<int32_t> node_size_, node_token_, node_depth_, same_next_;
  mutable std::once_flag scan_once_;
  mutable std::unique_ptr<StringScan> scan_;
};

// Sets every bit of `words` for the tokens in [0, n) (tail bits stay clear).
void fill_all_tokens(std::span<uint32_t> words, int32_t n);
inline void set_token_bit(std::span<uint32_t> words, int32_t t) { words[t >> 5] |= 1u << (t & 31); }
inline bool token_bit(std::span<const uint32_t> words, int32_t t) { return (words[t >> 5] >> (t & 31)) & 1u; }

}  // namespace ms
