// TokenVocab: the trie and the string pre-scan; see token_vocab.h.
#include "sampling/token_vocab.h"

#include <algorithm>
#include <numeric>

namespace ms {

std::shared_ptr<const TokenVocab> TokenVocab::create(std::vector<std::string> bytes, std::vector<uint8_t> excluded) {
  std::shared_ptr<TokenVocab> v(new TokenVocab());
  excluded.resize(bytes.size(), 0);
  for (size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i].empty()) excluded[i] = 1;
  v->bytes_ = std::move(bytes);
  v->excluded_ = std::move(excluded);
  v->build_trie();
  return v;
}

void TokenVocab::build_trie() {
  std::vector<int32_t> order;
  for (int32_t t = 0; t < size(); ++t)
    if (!excluded(t)) order.push_back(t);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  same_next_.assign(size(), -1);
  node_byte_ = {0};
  node_size_ = {0};
  node_token_ = {-1};
  node_depth_ = {0};
  // Open path from the root: open[d] = node at depth d. Pre-order ids are
  // creation order; a node's size is known when it leaves the path.
  std::vector<int32_t> open = {0};
  auto close_to = [&](size_t depth) {
    while (open.size() > depth + 1) {
      int32_t n = open.back();
      open.pop_back();
      node_size_[n] = num_nodes() - n;
    }
  };
  std::string_view prev;
  int32_t prev_token = -1;
  for (int32_t t : order) {
    std::string_view s = bytes_[t];
    if (prev_token >= 0 && s == prev) {  // same bytes: chain behind the node's first token
      int32_t last = prev_token;
      while (same_next_[last] >= 0) last = same_next_[last];
      same_next_[last] = t;
      continue;
    }
    size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
    close_to(lcp);
    for (size_t d = lcp; d < s.size(); ++d) {
      int32_t n = num_nodes();
      node_byte_.push_back(static_cast<uint8_t>(s[d]));
      node_size_.push_back(0);
      node_token_.push_back(-1);
      node_depth_.push_back(static_cast<int32_t>(d + 1));
      open.push_back(n);
    }
    node_token_[open.back()] = t;
    prev = s;
    prev_token = t;
  }
  close_to(0);
  node_size_[0] = num_nodes();
}

int32_t TokenVocab::find_node(std::string_view prefix) const {
  int32_t n = 0;
  for (char ch : prefix) {
    const uint8_t b = static_cast<uint8_t>(ch);
    int32_t c = n + 1, end = n + node_size_[n], found = -1;
    for (; c < end; c += node_size_[c])
      if (node_byte_[c] == b) {
        found = c;
        break;
      }
    if (found < 0) return -1;
    n = found;
  }
  return n;
}

const StringScan& TokenVocab::string_scan() const {
  std::call_once(scan_once_, [this] {
    auto scan = std::make_unique<StringScan>();
    struct Frame {
      int32_t node;
      StrSub sub;
      int32_t started;
    };
    std::vector<Frame> stack;
    for (int c = 0; c < kNumStrSubs; ++c) {
      StringScan::Sub& out = scan->subs[c];
      out.stay_bits.assign(words(), 0);
      std::vector<std::pair<int32_t, int32_t>> stay;  // (started, token)
      stack.clear();
      stack.push_back({0, static_cast<StrSub>(c), 0});
      while (!stack.empty()) {
        const Frame f = stack.back();
        stack.pop_back();
        if (f.node != 0)
          for (int32_t t = node_token_[f.node]; t >= 0; t = same_next_[t]) {
            set_token_bit(out.stay_bits, t);
            stay.push_back({f.started, t});
          }
        const int32_t end = f.node + node_size_[f.node];
        for (int32_t ch = f.node + 1; ch < end; ch += node_size_[ch]) {
          const uint8_t b = node_byte_[ch];
          if (f.sub == StrSub::kBoundary && b == '"') {
            out.exits.push_back({ch, f.started});
            continue;
          }
          const StrStep st = str_step(f.sub, b);
          if (st.ok) stack.push_back({ch, st.next, f.started + (st.starts_char ? 1 : 0)});
        }
      }
      std::sort(stay.begin(), stay.end());
      for (const auto& [started, t] : stay) {
        out.stay_tokens.push_back(t);
        out.stay_started.push_back(started);
        out.max_started = std::max(out.max_started, started);
      }
    }
    scan_ = std::move(scan);
  });
  return *scan_;
}

void fill_all_tokens(std::span<uint32_t> words, int32_t n) {
  const int32_t full = n / 32;
  std::fill(words.begin(), words.begin() + full, 0xffffffffu);
  std::fill(words.begin() + full, words.end(), 0u);
  if (n % 32) words[full] = (1u << (n % 32)) - 1;
}

}  // namespace ms
