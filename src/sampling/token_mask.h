// Token masks for grammar-constrained decoding: which tokens of the
// vocabulary a grammar allows next, computed fast enough to run every decode
// step for every constrained row.
//
// CompiledGrammar = a Grammar + a TokenVocab + a cache, shared (thread-safe)
// by every sequence decoding with it. Per DFA state it keeps, computed once:
//   - the local mask: the tokens the state accepts without leaving its rule
//     (a walk of the vocabulary trie; calls into other rules included, since
//     what they push is known);
//   - the frontier: trie nodes after which the state's rule may end inside a
//     token, so the rest of the token belongs to the caller.
// A configuration with an empty stack (every state of a non-recursive
// grammar) has exactly its local mask. One inside a called rule adds the
// frontier continued in the caller (walked with the real stack, cached per
// (state, stack)). This is the split of an adaptive token-mask cache into
// context-independent and context-dependent tokens (XGrammar, Dong et al.
// 2024), with rules inlined wherever recursion allows so that the
// context-dependent part is rare.
//
// States inside a JSON string are not walked at all: their mask is the
// vocabulary's string pre-scan (token_vocab.h) for the sub-state (a bitmap
// copy, or the tokens short enough for a maxLength), plus the tokens that
// close the string and go on in the grammar (walked once per string instance
// and sub-state, filtered by the length bounds per step).
//
// GrammarMatcher: one sequence's position in the grammar (a configuration
// set); fill_mask() writes the allowed-token bitmap, accept_token() advances.
// Stop tokens are not the grammar's business: the caller adds them where
// can_end() (grammar_constraint.h does).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sampling/grammar.h"
#include "sampling/grammar_runtime.h"
#include "sampling/token_vocab.h"

namespace ms {

// Deepest call stack a constrained output may build (nested JSON levels
// through recursive rules); calls beyond it are not offered.
inline constexpr int kGrammarMaxDepth = 64;

// A set of token ids as a bitmap or a list, whichever is smaller.
struct TokenSet {
  std::vector<uint32_t> bits;  // when non-empty: (words)
  std::vector<int32_t> list;   // otherwise
  static TokenSet make(std::vector<int32_t> ids, int32_t words);
  void or_into(std::span<uint32_t> words) const;
  size_t bytes() const { return bits.size() * 4 + list.size() * 4; }
};

class CompiledGrammar {
 public:
  static std::shared_ptr<CompiledGrammar> create(Grammar g, std::shared_ptr<const TokenVocab> vocab,
                                                 int max_depth = kGrammarMaxDepth);
  const Grammar& grammar() const { return g_; }
  const TokenVocab& vocab() const { return *vocab_; }
  int max_depth() const { return max_depth_; }

  // Computes the cached parts of up to max_states states ahead of decoding
  // (what a first request with a new schema would otherwise compute step by
  // step); returns the number of states computed.
  int precompute(int max_states = 1 << 16);
  size_t cache_bytes() const;

  // For GrammarMatcher: ORs the allowed tokens of configuration c (its stack
  // in `pool`) into words.
  void add_config_mask(const Config& c, StackPool& pool, std::span<uint32_t> words);

 private:
  struct Local {
    TokenSet accepted;
    std::vector<int32_t> frontier;  // trie nodes
  };
  struct StringExits {  // per (string instance, sub-state)
    std::vector<std::pair<int32_t, int32_t>> accepted;  // (token, characters started before the quote)
    std::vector<std::pair<int32_t, int32_t>> frontier;  // (trie node, characters started before the quote)
  };
  struct FrontierEntry {
    std::vector<int32_t> frames;  // the stack it was computed for (top first)
    std::vector<int32_t> tokens;
  };
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocab> vocab, int max_depth);
  const Local& local(int32_t s);                   // mu_ held
  const StringExits& string_exits(int32_t inst, StrSub sub);  // mu_ held
  Local compute_local(int32_t s);
  StringExits compute_string_exits(int32_t inst, StrSub sub);
  void add_string_mask(const StringTag& tag, std::span<uint32_t> words, std::vector<int32_t>* frontier);
  void exact_mask(const Config& c, StackPool& pool, std::span<uint32_t> words);

  const Grammar g_;
  const std::shared_ptr<const TokenVocab> vocab_;
  const int max_depth_;
  mutable std::mutex mu_;  // guards everything below
  std::vector<std::unique_ptr<Local>> local_;  // per state
  std::unordered_map<int64_t, std::unique_ptr<StringExits>> string_exits_;  // key: instance * kNumStrSubs + sub
  std::unordered_multimap<uint64_t, FrontierEntry> frontier_cache_;        // key: state x stack hash
  size_t bytes_ = 0;
  std::vector<ConfigSet> levels_;  // walk scratch
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar);
  // Advances by the token's bytes; false (and no change) when the grammar does not allow it.
  bool accept_token(int32_t token);
  bool accept_text(std::string_view text);
  // Whether accept_token(token) would succeed (no change; brute-force checks).
  bool can_accept(int32_t token);
  // The output may end here (stop tokens allowed).
  bool can_end() const { return cur_.can_end; }
  // Nothing can follow: the output is complete.
  bool terminated() const { return cur_.configs.empty(); }
  // words (>= vocab().words(), zeroed here): bit t set iff token t is allowed next.
  void fill_mask(std::span<uint32_t> words);
  const CompiledGrammar& grammar() const { return *g_; }

 private:
  bool advance(std::string_view bytes, bool commit);
  std::shared_ptr<CompiledGrammar> g_;
  StackPool pool_;
  ConfigStepper stepper_;
  ConfigSet cur_, tmp_, next_;
};

}  // namespace ms
