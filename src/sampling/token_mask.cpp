// Token-mask cache and per-sequence matcher; see token_mask.h.
#include "sampling/token_mask.h"

#include <algorithm>

namespace ms {
namespace {

// Above this many cached bytes per grammar, new local masks are computed on
// every use instead of stored (a pathological grammar cannot take the host's memory).
constexpr size_t kMaxCacheBytes = size_t(512) << 20;

// Calls one token may make in a cached (local) walk: a token opening more
// nested rules than this is not offered by a cached mask (no real tokenizer
// has one that is also valid JSON at that point); within kLocalPushes of the
// depth limit masks are walked with the real stack instead.
constexpr int kLocalPushes = 16;

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}

}  // namespace

TokenSet TokenSet::make(std::vector<int32_t> ids, int32_t words) {
  TokenSet s;
  if (static_cast<int64_t>(ids.size()) >= words) {
    s.bits.assign(words, 0);
    for (int32_t t : ids) set_token_bit(s.bits, t);
  } else {
    std::sort(ids.begin(), ids.end());
    s.list = std::move(ids);
  }
  return s;
}

void TokenSet::or_into(std::span<uint32_t> words) const {
  if (!bits.empty()) {
    for (size_t i = 0; i < bits.size(); ++i) words[i] |= bits[i];
  } else {
    for (int32_t t : list) set_token_bit(words, t);
  }
}

std::shared_ptr<CompiledGrammar> CompiledGrammar::create(Grammar g, std::shared_ptr<const TokenVocab> vocab,
                                                         int max_depth) {
  return std::shared_ptr<CompiledGrammar>(new CompiledGrammar(std::move(g), std::move(vocab), max_depth));
}

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocab> vocab, int max_depth)
    : g_(std::move(g)), vocab_(std::move(vocab)), max_depth_(max_depth) {
  local_.resize(g_.num_states());
}

size_t CompiledGrammar::cache_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

CompiledGrammar::Local CompiledGrammar::compute_local(int32_t s) {
  StackPool pool;
  ConfigStepper stepper(g_, pool, kLocalPushes);
  ConfigSet start;
  start.configs.push_back({s, StackPool::kEmpty});
  std::vector<int32_t> acc;
  Local out;
  walk_trie(
      *vocab_, stepper, 0, start, [&](int32_t t) { acc.push_back(t); },
      [&](int32_t n) { out.frontier.push_back(n); }, levels_);
  out.accepted = TokenSet::make(std::move(acc), vocab_->words());
  return out;
}

const CompiledGrammar::Local& CompiledGrammar::local(int32_t s) {
  if (!local_[s]) {
    auto l = std::make_unique<Local>(compute_local(s));
    const size_t sz = l->accepted.bytes() + l->frontier.size() * 4 + sizeof(Local);
    if (bytes_ + sz > kMaxCacheBytes) {
      static thread_local Local scratch;
      scratch = std::move(*l);
      return scratch;
    }
    bytes_ += sz;
    local_[s] = std::move(l);
  }
  return *local_[s];
}

CompiledGrammar::StringExits CompiledGrammar::compute_string_exits(int32_t inst, StrSub sub) {
  StringExits out;
  const int32_t exit_state = g_.string_spec(inst).exit_state;
  if (exit_state < 0) return out;
  StackPool pool;
  ConfigStepper stepper(g_, pool, kLocalPushes);
  ConfigSet after;  // just after the closing quote
  stepper.close({exit_state, StackPool::kEmpty}, &after);
  for (const StringScan::Exit& e : vocab_->string_scan().subs[static_cast<int>(sub)].exits) {
    if (!after.empty())
      for (int32_t t = vocab_->node_token(e.node); t >= 0; t = vocab_->same_bytes_next(t))
        out.accepted.push_back({t, e.started});
    if (after.escaped) out.frontier.push_back({e.node, e.started});
    if (after.configs.empty()) continue;
    walk_trie(
        *vocab_, stepper, e.node, after, [&](int32_t t) { out.accepted.push_back({t, e.started}); },
        [&](int32_t n) { out.frontier.push_back({n, e.started}); }, levels_);
  }
  return out;
}

const CompiledGrammar::StringExits& CompiledGrammar::string_exits(int32_t inst, StrSub sub) {
  const int64_t key = int64_t(inst) * kNumStrSubs + static_cast<int>(sub);
  auto it = string_exits_.find(key);
  if (it == string_exits_.end()) {
    auto e = std::make_unique<StringExits>(compute_string_exits(inst, sub));
    bytes_ += (e->accepted.size() + e->frontier.size()) * 8 + sizeof(StringExits);
    it = string_exits_.emplace(key, std::move(e)).first;
  }
  return *it->second;
}

void CompiledGrammar::add_string_mask(const StringTag& tag, std::span<uint32_t> words,
                                      std::vector<int32_t>* frontier) {
  const StringSpec& spec = g_.string_spec(tag.instance);
  const StringScan::Sub& scan = vocab_->string_scan().subs[static_cast<int>(tag.sub)];
  const int32_t k = tag.count;
  if (spec.max_len < 0 || spec.max_len - k >= scan.max_started) {
    for (size_t i = 0; i < scan.stay_bits.size(); ++i) words[i] |= scan.stay_bits[i];
  } else {
    const int32_t room = spec.max_len - k;
    const size_t n = std::upper_bound(scan.stay_started.begin(), scan.stay_started.end(), room) -
                     scan.stay_started.begin();
    for (size_t i = 0; i < n; ++i) set_token_bit(words, scan.stay_tokens[i]);
  }
  const StringExits& ex = string_exits(tag.instance, tag.sub);
  auto fits = [&](int32_t started) {
    const int32_t total = k + started;
    return total >= spec.min_len && (spec.max_len < 0 || total <= spec.max_len);
  };
  for (const auto& [t, started] : ex.accepted)
    if (fits(started)) set_token_bit(words, t);
  if (frontier)
    for (const auto& [node, started] : ex.frontier)
      if (fits(started)) frontier->push_back(node);
}

void CompiledGrammar::exact_mask(const Config& c, StackPool& pool, std::span<uint32_t> words) {
  ConfigStepper stepper(g_, pool, max_depth_);
  ConfigSet start;
  start.configs.push_back(c);
  walk_trie(
      *vocab_, stepper, 0, start, [&](int32_t t) { set_token_bit(words, t); }, [](int32_t) {}, levels_);
}

void CompiledGrammar::add_config_mask(const Config& c, StackPool& pool, std::span<uint32_t> words) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool nested = c.stack != StackPool::kEmpty;
  // Near the depth limit, calls a local mask assumed possible may not be:
  // walk the vocabulary with the real stack instead.
  if (pool.depth(c.stack) + kLocalPushes >= max_depth_) {
    exact_mask(c, pool, words);
    return;
  }
  std::vector<int32_t> frontier;
  const StringTag& tag = g_.string_tag(c.state);
  if (tag.instance >= 0) {
    add_string_mask(tag, words, nested ? &frontier : nullptr);
  } else {
    const Local& l = local(c.state);
    l.accepted.or_into(words);
    if (nested) frontier = l.frontier;
  }
  if (frontier.empty()) return;
  const std::vector<int32_t> frames = pool.frames(c.stack);
  const uint64_t key = mix(uint64_t(c.state), pool.hash(c.stack));
  auto [lo, hi] = frontier_cache_.equal_range(key);
  for (auto it = lo; it != hi; ++it)
    if (it->second.frames == frames) {
      for (int32_t t : it->second.tokens) set_token_bit(words, t);
      return;
    }
  // The rest of these tokens continues in the caller: pop, then walk.
  FrontierEntry e;
  e.frames = frames;
  ConfigStepper stepper(g_, pool, max_depth_);
  ConfigSet caller;
  stepper.close({pool.top(c.stack), pool.pop(c.stack)}, &caller);
  if (!caller.configs.empty())
    for (int32_t node : frontier)
      walk_trie(
          *vocab_, stepper, node, caller, [&](int32_t t) { e.tokens.push_back(t); }, [](int32_t) {}, levels_);
  for (int32_t t : e.tokens) set_token_bit(words, t);
  const size_t sz = (e.tokens.size() + e.frames.size()) * 4 + sizeof(FrontierEntry);
  if (bytes_ + sz <= kMaxCacheBytes) {
    bytes_ += sz;
    frontier_cache_.emplace(key, std::move(e));
  }
}

int CompiledGrammar::precompute(int max_states) {
  int done = 0;
  for (int32_t s = 0; s < g_.num_states() && done < max_states; ++s) {
    std::lock_guard<std::mutex> lock(mu_);
    const StringTag& tag = g_.string_tag(s);
    if (tag.instance >= 0)
      string_exits(tag.instance, tag.sub);
    else
      local(s);
    ++done;
  }
  return done;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar)
    : g_(std::move(grammar)), stepper_(g_->grammar(), pool_, g_->max_depth()) {
  cur_ = stepper_.initial();
}

bool GrammarMatcher::advance(std::string_view bytes, bool commit) {
  tmp_ = cur_;
  for (char ch : bytes) {
    stepper_.step(tmp_, static_cast<uint8_t>(ch), &next_);
    std::swap(tmp_, next_);
    if (tmp_.configs.empty() && !tmp_.can_end) return false;
  }
  if (commit) std::swap(cur_, tmp_);
  return true;
}

bool GrammarMatcher::accept_token(int32_t token) {
  const TokenVocab& v = g_->vocab();
  if (token < 0 || token >= v.size() || v.excluded(token)) return false;
  return advance(v.bytes(token), true);
}

bool GrammarMatcher::can_accept(int32_t token) {
  const TokenVocab& v = g_->vocab();
  if (token < 0 || token >= v.size() || v.excluded(token)) return false;
  return advance(v.bytes(token), false);
}

bool GrammarMatcher::accept_text(std::string_view text) { return advance(text, true); }

void GrammarMatcher::fill_mask(std::span<uint32_t> words) {
  std::fill(words.begin(), words.end(), 0u);
  for (const Config& c : cur_.configs) g_->add_config_mask(c, pool_, words);
}

}  // namespace ms
