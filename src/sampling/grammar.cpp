// GrammarBuilder::build: NFA per rule -> DFA per rule -> one trimmed,
// class-compressed state table; see grammar.h.
#include "sampling/grammar.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace ms {

GrammarBuilder::GrammarBuilder() { add_rule(); }

int GrammarBuilder::add_rule() {
  const int r = static_cast<int>(rules_.size());
  rules_.push_back({});
  rules_[r].start = new_state(r);
  rules_[r].end = new_state(r);
  return r;
}

int GrammarBuilder::new_state(int rule) {
  states_.push_back({});
  states_.back().rule = rule;
  return static_cast<int>(states_.size()) - 1;
}

void GrammarBuilder::bytes(int from, const ByteSet& set, int to) {
  if (set.any()) states_[from].edges.push_back({set, to});
}

void GrammarBuilder::byte(int from, uint8_t b, int to) {
  ByteSet s;
  s.set(b);
  bytes(from, s, to);
}

void GrammarBuilder::eps(int from, int to) { states_[from].eps.push_back(to); }

void GrammarBuilder::call(int from, int rule, int to) { states_[from].calls.push_back({rule, to}); }

void GrammarBuilder::literal(int from, std::string_view text, int to) {
  if (text.empty()) {
    eps(from, to);
    return;
  }
  int cur = from;
  for (size_t i = 0; i < text.size(); ++i) {
    const int nxt = i + 1 == text.size() ? to : new_state(states_[from].rule);
    byte(cur, static_cast<uint8_t>(text[i]), nxt);
    cur = nxt;
  }
}

int GrammarBuilder::add_string(StringSpec spec) {
  strings_.push_back(spec);
  return static_cast<int>(strings_.size()) - 1;
}

void GrammarBuilder::tag(int state, StringTag tag) { states_[state].tag = tag; }

namespace {

struct VecHash {
  size_t operator()(const std::vector<int>& v) const {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ v.size();
    for (int x : v) h = (h ^ uint64_t(uint32_t(x))) * 0x100000001b3ull;
    return static_cast<size_t>(h);
  }
};

}  // namespace

Result<Grammar> GrammarBuilder::build(const GrammarLimits& limits) const {
  if (over_budget(limits))
    return invalid_argument("the grammar is too large (" + std::to_string(num_states()) + " NFA states, at most " +
                            std::to_string(limits.max_nfa_states) + ")");
  // Byte classes: bytes that every edge set either contains or not together.
  std::vector<ByteSet> distinct;
  std::unordered_map<ByteSet, int> set_index;
  for (const NfaState& s : states_)
    for (const ByteEdge& e : s.edges)
      if (set_index.emplace(e.set, static_cast<int>(distinct.size())).second) distinct.push_back(e.set);
  std::array<uint8_t, 256> cls{};
  int num_classes = 0;
  {
    std::map<std::vector<bool>, int> sig_class;
    for (int b = 0; b < 256; ++b) {
      std::vector<bool> sig(distinct.size());
      for (size_t i = 0; i < distinct.size(); ++i) sig[i] = distinct[i].test(b);
      auto [it, fresh] = sig_class.emplace(std::move(sig), num_classes);
      if (fresh) ++num_classes;
      cls[b] = static_cast<uint8_t>(it->second);
    }
  }
  // The classes each distinct edge set covers.
  std::vector<std::vector<int>> set_classes(distinct.size());
  for (size_t i = 0; i < distinct.size(); ++i) {
    std::vector<bool> seen(num_classes, false);
    for (int b = 0; b < 256; ++b)
      if (distinct[i].test(b) && !seen[cls[b]]) {
        seen[cls[b]] = true;
        set_classes[i].push_back(cls[b]);
      }
  }

  // Subset construction (all rules in one table: NFA states never cross rules).
  std::unordered_map<std::vector<int>, int, VecHash> dfa_of;
  std::vector<std::vector<int>> sets;
  std::vector<int> closure_stack;
  std::vector<uint8_t> mark(states_.size(), 0);
  auto closure = [&](const std::vector<int>& seed) {
    std::vector<int> out;
    closure_stack = seed;
    while (!closure_stack.empty()) {
      int s = closure_stack.back();
      closure_stack.pop_back();
      if (mark[s]) continue;
      mark[s] = 1;
      out.push_back(s);
      for (int e : states_[s].eps) closure_stack.push_back(e);
    }
    for (int s : out) mark[s] = 0;
    std::sort(out.begin(), out.end());
    return out;
  };
  bool too_big = false;
  auto intern = [&](const std::vector<int>& set) -> int {
    if (set.empty()) return -1;
    auto it = dfa_of.find(set);
    if (it != dfa_of.end()) return it->second;
    if (static_cast<int>(sets.size()) >= limits.max_dfa_states) {
      too_big = true;
      return -1;
    }
    const int id = static_cast<int>(sets.size());
    dfa_of.emplace(set, id);
    sets.push_back(set);
    return id;
  };
  std::vector<int> rule_start(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) rule_start[r] = intern(closure({rules_[r].start}));
  std::vector<std::vector<int32_t>> rows;
  std::vector<std::vector<std::pair<int, int>>> dcalls;  // (callee rule, ret DFA state)
  std::vector<int> singleton_dfa(states_.size(), -1);    // DFA state of {s}, for s without epsilon edges
  std::vector<std::vector<int>> targets(num_classes);
  for (size_t d = 0; d < sets.size() && !too_big; ++d) {
    const std::vector<int> set = sets[d];  // copy: intern() may grow `sets`
    std::vector<int32_t> row(num_classes, -1);
    for (auto& t : targets) t.clear();
    for (int s : set)
      for (const ByteEdge& e : states_[s].edges)
        for (int c : set_classes[set_index.at(e.set)]) targets[c].push_back(e.to);
    for (int c = 0; c < num_classes; ++c) {
      std::vector<int>& t = targets[c];
      if (t.empty()) continue;
      if (t.size() == 1 && states_[t[0]].eps.empty()) {  // memoised: most string-content steps
        int& id = singleton_dfa[t[0]];
        if (id < 0) id = intern(t);
        row[c] = id;
        continue;
      }
      row[c] = intern(closure(t));
    }
    std::map<int, std::vector<int>> by_rule;
    for (int s : set)
      for (const auto& [rule, to] : states_[s].calls) by_rule[rule].push_back(to);
    std::vector<std::pair<int, int>> cl;
    for (auto& [rule, tos] : by_rule) cl.push_back({rule, intern(closure(tos))});
    rows.push_back(std::move(row));
    dcalls.push_back(std::move(cl));
  }
  if (too_big)
    return invalid_argument("the grammar is too large (more than " + std::to_string(limits.max_dfa_states) +
                            " automaton states)");
  const int n = static_cast<int>(sets.size());
  std::vector<uint8_t> acc(n, 0);
  std::vector<int> rule(n, 0);
  for (int d = 0; d < n; ++d) {
    rule[d] = states_[sets[d][0]].rule;
    for (int s : sets[d])
      if (s == rules_[states_[s].rule].end) acc[d] = 1;
  }

  // Live: can complete its rule (reach an accepting state, calls included).
  // A worklist backwards from the accepting states: d becomes live when a
  // byte edge leads to a live state, or a call whose callee start and return
  // are both live (re-checked when either turns live).
  std::vector<uint8_t> live(n, 0);
  {
    std::vector<std::vector<int>> byte_preds(n), call_deps(n);
    for (int d = 0; d < n; ++d) {
      for (int32_t t : rows[d])
        if (t >= 0) byte_preds[t].push_back(d);
      for (const auto& [r, ret] : dcalls[d])
        if (ret >= 0) {
          call_deps[ret].push_back(d);
          call_deps[rule_start[r]].push_back(d);
        }
    }
    std::vector<int> work;
    auto make_live = [&](int d) {
      if (!live[d]) {
        live[d] = 1;
        work.push_back(d);
      }
    };
    for (int d = 0; d < n; ++d)
      if (acc[d]) make_live(d);
    while (!work.empty()) {
      const int x = work.back();
      work.pop_back();
      for (int d : byte_preds[x]) make_live(d);
      for (int d : call_deps[x])
        for (const auto& [r, ret] : dcalls[d])
          if (ret >= 0 && live[ret] && live[rule_start[r]]) make_live(d);
    }
  }
  const int root = rule_start[0];
  if (!live[root]) return invalid_argument("the schema admits no value");
  // Reachable from the root start through live edges.
  std::vector<int32_t> remap(n, -1);
  std::vector<int> order = {root};
  remap[root] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int d = order[i];
    auto visit = [&](int t) {
      if (t >= 0 && live[t] && remap[t] < 0) {
        remap[t] = static_cast<int32_t>(order.size());
        order.push_back(t);
      }
    };
    for (int32_t t : rows[d]) visit(t);
    for (const auto& [r, ret] : dcalls[d])
      if (ret >= 0 && live[rule_start[r]] && live[ret]) {
        visit(rule_start[r]);
        visit(ret);
      }
  }
  // Called rules must read a byte before they can end or call anything that
  // leads back to them (the matcher's closure relies on it).
  std::vector<int> callee_rules;
  for (int d : order)
    for (const auto& [r, ret] : dcalls[d])
      if (ret >= 0 && live[rule_start[r]] && live[ret]) callee_rules.push_back(r);
  std::sort(callee_rules.begin(), callee_rules.end());
  callee_rules.erase(std::unique(callee_rules.begin(), callee_rules.end()), callee_rules.end());
  for (int r : callee_rules) {
    if (acc[rule_start[r]]) return internal_error("grammar rule " + std::to_string(r) + " can end empty");
    std::vector<int> path = {r};
    std::vector<uint8_t> on(rules_.size(), 0);
    // Depth-first over "calls at the start state"; any cycle is left recursion.
    std::vector<std::pair<int, size_t>> st = {{r, 0}};
    on[r] = 1;
    while (!st.empty()) {
      auto& [cur, idx] = st.back();
      const auto& cl = dcalls[rule_start[cur]];
      if (idx == cl.size()) {
        on[cur] = 0;
        st.pop_back();
        continue;
      }
      const int callee = cl[idx++].first;
      if (on[callee]) return internal_error("grammar rule " + std::to_string(callee) + " is left-recursive");
      on[callee] = 1;
      st.push_back({callee, 0});
    }
  }

  Grammar g;
  const int m = static_cast<int>(order.size());
  g.start_ = 0;
  g.num_rules_ = static_cast<int32_t>(rules_.size());
  g.num_classes_ = num_classes;
  g.byte_class_ = cls;
  g.next_.assign(size_t(m) * num_classes, -1);
  g.call_begin_.assign(m + 1, 0);
  g.accepting_.assign(m, 0);
  g.reads_.assign(m, 0);
  g.rule_of_.assign(m, 0);
  g.tags_.assign(m, {});
  g.strings_ = strings_;
  for (int i = 0; i < m; ++i) {
    const int d = order[i];
    for (int c = 0; c < num_classes; ++c) {
      const int32_t t = rows[d][c];
      if (t >= 0 && remap[t] >= 0) {
        g.next_[size_t(i) * num_classes + c] = remap[t];
        g.reads_[i] = 1;
      }
    }
    for (const auto& [r, ret] : dcalls[d])
      if (ret >= 0 && remap[ret] >= 0 && remap[rule_start[r]] >= 0)
        g.calls_.push_back({remap[rule_start[r]], remap[ret]});
    g.call_begin_[i + 1] = static_cast<int32_t>(g.calls_.size());
    g.accepting_[i] = acc[d];
    g.rule_of_[i] = rule[d];
    if (sets[d].size() == 1) g.tags_[i] = states_[sets[d][0]].tag;
  }
  for (int i = 0; i < m; ++i) {
    const StringTag& t = g.tags_[i];
    if (t.instance < 0 || t.sub != StrSub::kBoundary) continue;
    const int32_t exit = g.step(i, '"');
    if (exit >= 0 && g.strings_[t.instance].exit_state < 0) g.strings_[t.instance].exit_state = exit;
  }
  return g;
}

}  // namespace ms
