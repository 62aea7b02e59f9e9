// JSON grammar pieces; see json_emitters.h.
#include "sampling/json_emitters.h"

#include <algorithm>
#include <vector>

namespace ms {
namespace {

ByteSet byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(b);
  return s;
}

int num_digits(uint64_t v) {
  int n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}

uint64_t pow10(int n) {
  uint64_t p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

}  // namespace

void JsonEmitter::ws(int from, int to) {
  b_.eps(from, to);
  b_.byte(from, ' ', to);
  int cur = state(rule(from));
  b_.byte(from, '\n', cur);
  b_.eps(cur, to);
  ByteSet indent;
  indent.set(' ');
  indent.set('\t');
  for (int i = 0; i < kMaxIndent; ++i) {
    const int nxt = state(rule(from));
    b_.bytes(cur, indent, nxt);
    b_.eps(nxt, to);
    cur = nxt;
  }
}

namespace {

// The string-content automaton's transitions out of each sub-state, grouped
// by (next sub-state, starts a character): a handful of byte sets each.
struct StrGroup {
  ByteSet bytes;
  StrSub next;
  bool starts_char;
};
const std::vector<StrGroup>& str_groups(StrSub sub) {
  static const std::vector<std::vector<StrGroup>> table = [] {
    std::vector<std::vector<StrGroup>> t(kNumStrSubs);
    for (int c = 0; c < kNumStrSubs; ++c)
      for (int b = 0; b < 256; ++b) {
        const StrStep st = str_step(static_cast<StrSub>(c), static_cast<uint8_t>(b));
        if (!st.ok) continue;
        auto it = std::find_if(t[c].begin(), t[c].end(), [&](const StrGroup& g) {
          return g.next == st.next && g.starts_char == st.starts_char;
        });
        if (it == t[c].end()) it = t[c].insert(t[c].end(), StrGroup{{}, st.next, st.starts_char});
        it->bytes.set(b);
      }
    return t;
  }();
  return table[static_cast<int>(sub)];
}

}  // namespace

void JsonEmitter::string_states(int from, int to, int min_len, int max_len, bool quoted) {
  // Quoted: the states are tagged for the string masks (token_mask.h), which
  // need them to be entered and left by the quote bytes alone.
  const int r = rule(from);
  const int inst = quoted ? b_.add_string({min_len, max_len, -1}) : -1;
  const int cap = max_len >= 0 ? max_len : min_len;  // counts kept: 0..cap
  // (count, sub) -> state, created on first reach.
  std::vector<int> node(size_t(cap + 1) * kNumStrSubs, -1);
  std::vector<std::pair<int, StrSub>> work;
  auto get = [&](int k, StrSub sub) {
    int& s = node[size_t(k) * kNumStrSubs + static_cast<int>(sub)];
    if (s < 0) {
      s = state(r);
      if (quoted) b_.tag(s, {inst, k, sub});
      work.push_back({k, sub});
    }
    return s;
  };
  if (quoted)
    b_.byte(from, '"', get(0, StrSub::kBoundary));
  else
    b_.eps(from, get(0, StrSub::kBoundary));
  while (!work.empty()) {
    const auto [k, sub] = work.back();
    work.pop_back();
    const int s = node[size_t(k) * kNumStrSubs + static_cast<int>(sub)];
    for (const StrGroup& g : str_groups(sub)) {
      const int k2 = k + (g.starts_char ? 1 : 0);
      if (max_len >= 0 && k2 > max_len) continue;
      b_.bytes(s, g.bytes, get(std::min(k2, cap), g.next));
    }
    if (sub == StrSub::kBoundary && k >= min_len) {
      if (quoted)
        b_.byte(s, '"', to);
      else
        b_.eps(s, to);
    }
  }
}

void JsonEmitter::digits(int from, int to, int min_n, int max_n, bool first_nonzero) {
  int cur = from;
  for (int i = 0; i < max_n; ++i) {
    const int nxt = state(rule(from));
    b_.bytes(cur, i == 0 && first_nonzero ? byte_range('1', '9') : byte_range('0', '9'), nxt);
    if (i + 1 >= min_n) b_.eps(nxt, to);
    cur = nxt;
  }
}

void JsonEmitter::integer(int from, int to) {
  const int m = state(rule(from));
  b_.eps(from, m);
  b_.byte(from, '-', m);
  b_.byte(m, '0', to);
  digits(m, to, 1, kMaxIntDigits, /*first_nonzero=*/true);
}

void JsonEmitter::number(int from, int to) {
  const int r = rule(from);
  const int ip = state(r), fe = state(r);
  integer(from, ip);
  const int dot = state(r);
  b_.byte(ip, '.', dot);
  digits(dot, fe, 1, kMaxFracDigits, false);
  b_.eps(ip, fe);
  const int e = state(r), sign = state(r);
  ByteSet ee;
  ee.set('e');
  ee.set('E');
  b_.bytes(fe, ee, e);
  ByteSet pm;
  pm.set('+');
  pm.set('-');
  b_.bytes(e, pm, sign);
  b_.eps(e, sign);
  digits(sign, to, 1, kMaxExpDigits, false);
  b_.eps(fe, to);
}

void JsonEmitter::fixed_len_range(int from, int to, const std::string& lo, const std::string& hi) {
  // lo <= hi, both of the same length: the digit strings between them.
  // Recursion depth is the length (at most 20 digits).
  if (lo.empty()) {
    b_.eps(from, to);
    return;
  }
  const int r = rule(from);
  const size_t rest = lo.size() - 1;
  if (lo.find_first_not_of('0') == std::string::npos && hi.find_first_not_of('9') == std::string::npos) {
    digits(from, to, static_cast<int>(lo.size()), static_cast<int>(lo.size()), false);
    return;  // every digit string: linear, and what keeps the recursion from branching 3 ways per digit
  }
  if (lo[0] == hi[0]) {
    const int s = state(r);
    b_.byte(from, static_cast<uint8_t>(lo[0]), s);
    fixed_len_range(s, to, lo.substr(1), hi.substr(1));
    return;
  }
  const int low = state(r);
  b_.byte(from, static_cast<uint8_t>(lo[0]), low);
  fixed_len_range(low, to, lo.substr(1), std::string(rest, '9'));
  if (hi[0] - lo[0] >= 2) {
    const int mid = state(r);
    b_.bytes(from, byte_range(static_cast<uint8_t>(lo[0] + 1), static_cast<uint8_t>(hi[0] - 1)), mid);
    digits(mid, to, static_cast<int>(rest), static_cast<int>(rest), false);
    if (rest == 0) b_.eps(mid, to);
  }
  const int high = state(r);
  b_.byte(from, static_cast<uint8_t>(hi[0]), high);
  fixed_len_range(high, to, std::string(rest, '0'), hi.substr(1));
}

void JsonEmitter::nonneg_range(int from, int to, uint64_t lo, uint64_t hi) {
  for (int len = num_digits(lo); len <= num_digits(hi); ++len) {
    const uint64_t a = std::max(lo, len == 1 ? 0 : pow10(len - 1));
    const uint64_t b = len >= 20 ? hi : std::min(hi, pow10(len) - 1);
    if (a > b) continue;
    fixed_len_range(from, to, std::to_string(a), std::to_string(b));
  }
}

void JsonEmitter::integer_range(int from, int to, int64_t lo, int64_t hi) {
  if (lo > hi) return;
  if (lo < 0) {
    const int64_t neg_hi = std::min<int64_t>(hi, -1);
    // Magnitudes [-neg_hi, -lo], computed without overflowing at INT64_MIN.
    const uint64_t mag_lo = uint64_t(-(neg_hi + 1)) + 1, mag_hi = uint64_t(-(lo + 1)) + 1;
    const int m = state(rule(from));
    b_.byte(from, '-', m);
    nonneg_range(m, to, mag_lo, mag_hi);
  }
  if (hi >= 0) nonneg_range(from, to, static_cast<uint64_t>(std::max<int64_t>(lo, 0)), static_cast<uint64_t>(hi));
}

void JsonEmitter::boolean(int from, int to) {
  lit(from, "true", to);
  lit(from, "false", to);
}

int JsonEmitter::any_object_rule() {
  if (any_object_rule_ < 0) {
    any_object_rule_ = b_.add_rule();
    any_object(b_.rule_start(any_object_rule_), b_.rule_end(any_object_rule_));
  }
  return any_object_rule_;
}

int JsonEmitter::any_array_rule() {
  if (any_array_rule_ < 0) {
    any_array_rule_ = b_.add_rule();
    any_array(b_.rule_start(any_array_rule_), b_.rule_end(any_array_rule_));
  }
  return any_array_rule_;
}

void JsonEmitter::any_value(int from, int to) {
  string(from, to);
  number(from, to);
  boolean(from, to);
  null(from, to);
  b_.call(from, any_object_rule(), to);
  b_.call(from, any_array_rule(), to);
}

void JsonEmitter::any_object(int from, int to) {
  (void)object_of(from, to, [this](int a, int b) {
    any_value(a, b);
    return Status::ok();
  });
}

Status JsonEmitter::object_of(int from, int to, const std::function<Status(int, int)>& value) {
  const int r = rule(from);
  const int open = state(r), first = state(r), key = state(r), colon = state(r), val = state(r), after = state(r),
            comma = state(r), next_key = state(r), close = state(r);
  lit(from, "{", open);
  ws(open, first);
  lit(first, "}", to);
  string(first, key);
  lit(key, ":", colon);
  ws(colon, val);
  MS_RETURN_IF_ERROR(value(val, after));
  lit(after, ",", comma);
  ws(comma, next_key);
  string(next_key, key);
  ws(after, close);
  lit(close, "}", to);
  return Status::ok();
}

void JsonEmitter::any_array(int from, int to) {
  const int r = rule(from);
  const int open = state(r), first = state(r), after = state(r), comma = state(r), next = state(r), close = state(r);
  lit(from, "[", open);
  ws(open, first);
  lit(first, "]", to);
  any_value(first, after);
  lit(after, ",", comma);
  ws(comma, next);
  any_value(next, after);
  ws(after, close);
  lit(close, "]", to);
}

}  // namespace ms
