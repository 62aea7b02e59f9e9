// Running a Grammar (grammar.h): configurations (a DFA state plus a call
// stack of return states), their closure (enter called rules, pop finished
// ones), one byte step over a set of configurations, and a walk over the
// vocabulary trie that finds every token a configuration set accepts.
//
// Stacks are persistent and interned in a StackPool (equal stacks share one
// id), so a configuration is two ints and copying a set is cheap. The call
// depth is bounded (max_depth): a call that would exceed it is not taken, so
// every walk and closure here is finite by construction.
//
// A configuration set is kept closed: it holds only configurations that can
// read a byte, and can_end says whether the whole input may end here. The
// flag `escaped` is for walks that start inside a rule without knowing its
// caller (token-mask precomputation): it marks that the starting rule may end
// here and the rest belongs to whoever called it.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sampling/grammar.h"
#include "sampling/token_vocab.h"

namespace ms {

class StackPool {
 public:
  static constexpr int32_t kEmpty = 0;
  StackPool() { nodes_.push_back({-1, -1, 0, 0}); }
  int32_t push(int32_t stack, int32_t ret);
  int32_t top(int32_t stack) const { return nodes_[stack].ret; }
  int32_t pop(int32_t stack) const { return nodes_[stack].parent; }
  int32_t depth(int32_t stack) const { return nodes_[stack].depth; }
  uint64_t hash(int32_t stack) const { return nodes_[stack].hash; }
  // Return states from the top down.
  std::vector<int32_t> frames(int32_t stack) const;
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    int32_t ret, parent, depth;
    uint64_t hash;
  };
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;  // (parent, ret) -> node
};

struct Config {
  int32_t state = 0;
  int32_t stack = StackPool::kEmpty;
  bool operator==(const Config& o) const { return state == o.state && stack == o.stack; }
};

struct ConfigSet {
  std::vector<Config> configs;  // each reads bytes
  bool can_end = false;         // the input may end here (root rule accepting, empty stack)
  bool escaped = false;         // a rule entered below the walk's base may end here
  bool empty() const { return configs.empty() && !can_end && !escaped; }
  void clear() {
    configs.clear();
    can_end = escaped = false;
  }
};

// Most configurations kept in a set; further alternatives are dropped (the
// ones kept stay valid, so outputs stay valid; only pathologically ambiguous
// grammars reach it).
inline constexpr size_t kMaxConfigs = 64;

class ConfigStepper {
 public:
  ConfigStepper(const Grammar& g, StackPool& pool, int max_depth) : g_(g), pool_(pool), max_depth_(max_depth) {}
  // Adds the closure of (state, stack) to *out.
  void close(Config c, ConfigSet* out);
  // *out = closure of every configuration of `in` after reading b (out != &in).
  void step(const ConfigSet& in, uint8_t b, ConfigSet* out);
  // The initial set of the grammar.
  ConfigSet initial();

 private:
  const Grammar& g_;
  StackPool& pool_;
  const int max_depth_;
  std::vector<Config> work_, seen_;
};

// Walks the trie below `node` (its children and their subtrees) with `start`
// the configuration set after the node's bytes. on_accept(token) for every
// offerable token the walk can read to its end; on_escape(node) for every node
// after which the walk's base rule may end (see `escaped`).
template <typename Accept, typename Escape>
void walk_trie(const TokenVocab& vocab, ConfigStepper& stepper, int32_t node, const ConfigSet& start,
               Accept&& on_accept, Escape&& on_escape, std::vector<ConfigSet>& levels);

// Whether `text` is a complete sentence of the grammar (tests and debugging).
bool grammar_accepts(const Grammar& g, std::string_view text, int max_depth = 256);

// ---------------------------------------------------------------------------

template <typename Accept, typename Escape>
void walk_trie(const TokenVocab& vocab, ConfigStepper& stepper, int32_t node, const ConfigSet& start,
               Accept&& on_accept, Escape&& on_escape, std::vector<ConfigSet>& levels) {
  struct Frame {
    int32_t child, end;
  };
  std::vector<Frame> frames;
  if (levels.empty()) levels.resize(1);
  levels[0] = start;
  frames.push_back({node + 1, node + vocab.subtree_size(node)});
  while (!frames.empty()) {
    Frame& f = frames.back();
    if (f.child >= f.end) {
      frames.pop_back();
      continue;
    }
    const int32_t c = f.child;
    f.child += vocab.subtree_size(c);
    const size_t d = frames.size();
    if (levels.size() <= d) levels.resize(d + 1);
    stepper.step(levels[d - 1], vocab.node_byte(c), &levels[d]);
    const ConfigSet& here = levels[d];
    if (here.empty()) continue;
    if (here.escaped) on_escape(c);
    for (int32_t t = vocab.node_token(c); t >= 0; t = vocab.same_bytes_next(t)) on_accept(t);
    if (!here.configs.empty() && vocab.subtree_size(c) > 1) frames.push_back({c + 1, c + vocab.subtree_size(c)});
  }
}

}  // namespace ms
