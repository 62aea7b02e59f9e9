// Configuration closure and stepping; see grammar_runtime.h.
#include "sampling/grammar_runtime.h"

#include <algorithm>

namespace ms {

int32_t StackPool::push(int32_t stack, int32_t ret) {
  const uint64_t key = (uint64_t(uint32_t(stack)) << 32) | uint32_t(ret);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(nodes_.size());
  const uint64_t h = (nodes_[stack].hash ^ (uint64_t(uint32_t(ret)) + 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
  nodes_.push_back({ret, stack, nodes_[stack].depth + 1, h ^ (h >> 29)});
  index_.emplace(key, id);
  return id;
}

std::vector<int32_t> StackPool::frames(int32_t stack) const {
  std::vector<int32_t> out;
  for (int32_t s = stack; s != kEmpty; s = nodes_[s].parent) out.push_back(nodes_[s].ret);
  return out;
}

void ConfigStepper::close(Config c, ConfigSet* out) {
  // Worklist over (state, stack): calls push (bounded by max_depth_), an
  // accepting state pops; build() rules out empty and left-recursive rules,
  // so this terminates; seen_ keeps diamonds from being expanded twice.
  work_.clear();
  seen_.clear();
  work_.push_back(c);
  while (!work_.empty()) {
    const Config x = work_.back();
    work_.pop_back();
    if (std::find(seen_.begin(), seen_.end(), x) != seen_.end()) continue;
    seen_.push_back(x);
    if (g_.reads_bytes(x.state) && std::find(out->configs.begin(), out->configs.end(), x) == out->configs.end() &&
        out->configs.size() < kMaxConfigs)
      out->configs.push_back(x);
    if (pool_.depth(x.stack) < max_depth_)
      for (const CallEdge& e : g_.calls(x.state)) work_.push_back({e.callee_start, pool_.push(x.stack, e.ret)});
    if (g_.accepting(x.state)) {
      if (x.stack != StackPool::kEmpty)
        work_.push_back({pool_.top(x.stack), pool_.pop(x.stack)});
      else if (g_.rule_of(x.state) == 0)
        out->can_end = true;
      else
        out->escaped = true;
    }
  }
}

void ConfigStepper::step(const ConfigSet& in, uint8_t b, ConfigSet* out) {
  out->clear();
  for (const Config& c : in.configs) {
    const int32_t t = g_.step(c.state, b);
    if (t < 0) continue;
    // Fast path: a state that only reads bytes is its own closure.
    if (g_.calls(t).empty() && !g_.accepting(t)) {
      const Config x{t, c.stack};
      if (std::find(out->configs.begin(), out->configs.end(), x) == out->configs.end() &&
          out->configs.size() < kMaxConfigs)
        out->configs.push_back(x);
      continue;
    }
    close({t, c.stack}, out);
  }
}

ConfigSet ConfigStepper::initial() {
  ConfigSet s;
  close({g_.start(), StackPool::kEmpty}, &s);
  return s;
}

bool grammar_accepts(const Grammar& g, std::string_view text, int max_depth) {
  StackPool pool;
  ConfigStepper stepper(g, pool, max_depth);
  ConfigSet cur = stepper.initial(), nxt;
  for (char ch : text) {
    stepper.step(cur, static_cast<uint8_t>(ch), &nxt);
    std::swap(cur, nxt);
    if (cur.configs.empty() && !cur.can_end) return false;
  }
  return cur.can_end;
}

}  // namespace ms
