// A grammar for constrained decoding: a set of rules, each a deterministic
// automaton over bytes, where a transition may also call another rule (push a
// return state, run the callee, pop back when it ends). Rules that call each
// other are how recursion (nested JSON of unbounded depth, recursive $refs) is
// expressed; everything else is inlined into one rule, so most grammars are a
// single DFA and their token masks depend on the DFA state alone.
//
// GrammarBuilder assembles an NFA per rule (byte-set edges, epsilon edges,
// call edges); build() determinizes each rule (subset construction), removes
// states that cannot complete, checks that no rule can end without reading a
// byte or call itself before reading one (so a matcher's closure is finite by
// construction), and compresses the byte alphabet into equivalence classes.
//
// States inside a JSON string's content are tagged with the string's
// instance and sub-state (json_string_automaton.h), so that token masks there
// are assembled from the vocabulary's string pre-scan.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sampling/json_string_automaton.h"

namespace ms {

using ByteSet = std::bitset<256>;

// A JSON string's content with length bounds (characters, see json_string_automaton.h).
struct StringSpec {
  int32_t min_len = 0;
  int32_t max_len = -1;    // -1: unbounded
  int32_t exit_state = -1; // (built grammar) DFA state right after the closing quote
};

struct StringTag {
  int32_t instance = -1;  // index into strings; -1: not a string-content state
  int32_t count = 0;      // characters started so far (saturates at min_len when unbounded)
  StrSub sub = StrSub::kBoundary;
};

struct CallEdge {
  int32_t callee_start = 0;  // DFA state: the callee rule's start
  int32_t ret = 0;           // DFA state in the caller to continue at after the callee ends
};

// Bounds on what one schema may compile to (a request that exceeds them is
// refused; compiling up to them takes ~1-2 s of the request's thread).
struct GrammarLimits {
  int max_nfa_states = 300000;
  int max_dfa_states = 150000;
};

class Grammar {
 public:
  int32_t num_states() const { return static_cast<int32_t>(accepting_.size()); }
  int32_t start() const { return start_; }
  int32_t num_rules() const { return num_rules_; }
  // Next state on byte b, or -1.
  int32_t step(int32_t s, uint8_t b) const { return next_[size_t(s) * num_classes_ + byte_class_[b]]; }
  std::span<const CallEdge> calls(int32_t s) const {
    return {calls_.data() + call_begin_[s], calls_.data() + call_begin_[s + 1]};
  }
  // The rule owning s may end at s (for rule 0, the root: the whole input may end).
  bool accepting(int32_t s) const { return accepting_[s] != 0; }
  int32_t rule_of(int32_t s) const { return rule_of_[s]; }
  // s has at least one byte transition.
  bool reads_bytes(int32_t s) const { return reads_[s] != 0; }
  const StringTag& string_tag(int32_t s) const { return tags_[s]; }
  const StringSpec& string_spec(int32_t instance) const { return strings_[instance]; }
  int32_t num_classes() const { return num_classes_; }

 private:
  friend class GrammarBuilder;
  int32_t start_ = 0;
  int32_t num_rules_ = 0;
  int32_t num_classes_ = 0;
  std::array<uint8_t, 256> byte_class_{};
  std::vector<int32_t> next_;        // (num_states, num_classes)
  std::vector<int32_t> call_begin_;  // (num_states + 1) CSR offsets into calls_
  std::vector<CallEdge> calls_;
  std::vector<uint8_t> accepting_, reads_;
  std::vector<int32_t> rule_of_;
  std::vector<StringTag> tags_;
  std::vector<StringSpec> strings_;
};

class GrammarBuilder {
 public:
  GrammarBuilder();  // creates rule 0, the root
  int add_rule();
  int rule_start(int rule) const { return rules_[rule].start; }
  int rule_end(int rule) const { return rules_[rule].end; }
  int new_state(int rule);
  int rule_of_state(int s) const { return states_[s].rule; }
  void bytes(int from, const ByteSet& set, int to);
  void byte(int from, uint8_t b, int to);
  void eps(int from, int to);
  void call(int from, int rule, int to);
  // A chain of states reading `text` from `from` to `to`.
  void literal(int from, std::string_view text, int to);
  int add_string(StringSpec spec);  // a string instance for tag()
  void tag(int state, StringTag tag);
  int num_states() const { return static_cast<int>(states_.size()); }
  // Exceeded the NFA state budget (checked by build(); compilers may poll it to stop early).
  bool over_budget(const GrammarLimits& limits) const { return num_states() > limits.max_nfa_states; }

  Result<Grammar> build(const GrammarLimits& limits = {}) const;

 private:
  struct ByteEdge {
    ByteSet set;
    int to;
  };
  struct NfaState {
    int rule = 0;
    std::vector<ByteEdge> edges;
    std::vector<int> eps;
    std::vector<std::pair<int, int>> calls;  // (rule, to)
    StringTag tag;
  };
  struct Rule {
    int start = 0, end = 0;
  };
  std::vector<NfaState> states_;
  std::vector<Rule> rules_;
  std::vector<StringSpec> strings_;
};

}  // namespace ms
