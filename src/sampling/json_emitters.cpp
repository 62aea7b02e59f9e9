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

void JsonEmitter::string(int from, int to, int min_len, int max_len) {
  const int r = rule(from);
  const int inst = b_.add_string({min_len, max_len, -1});
  const int cap = max_len >= 0 ? max_len : min_len;  // counts kept: 0..cap
  // (count, sub) -> state, created on first reach.
  std::vector<int> node(size_t(cap + 1) * kNumStrSubs, -1);
  std::vector<std::pair<int, StrSub>> work;
  auto get = [&](int k, StrSub sub) {
    int& s = node[size_t(k) * kNumStrSubs + static_cast<int>(sub)];
    if (s < 0) {
      s = state(r);
      b_.tag(s, {inst, k, sub});
      work.push_back({k, sub});
    }
    return s;
  };
  b_.byte(from, '"', get(0, StrSub::kBoundary));
  while (!work.empty()) {
    const auto [k, sub] = work.back();
    work.pop_back();
    const int s = node[size_t(k) * kNumStrSubs + static_cast<int>(sub)];
    for (const StrGroup& g : str_groups(sub)) {
      const int k2 = k + (g.starts_char ? 1 : 0);
      if (max_len >= 0 && k2 > max_len) continue;
      b_.bytes(s, g.bytes, get(std::min(k2, cap), g.next));
    }
    if (sub == StrSub::kBoundary && k >= min_len) b_.byte(s, '"', to);
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

void JsonEmitter::run(int from, int to, const ByteSet& set, int min_n, int max_n) {
  int cur = from;
  if (min_n == 0) b_.eps(from, to);
  for (int i = 0; i < max_n; ++i) {
    const int nxt = state(rule(from));
    b_.bytes(cur, set, nxt);
    if (i + 1 >= min_n) b_.eps(nxt, to);
    cur = nxt;
  }
}

void JsonEmitter::date(int from, int to) {
  const int r = rule(from);
  const int year = state(r), dash = state(r);
  digits(from, year, 4, 4, false);
  lit(year, "-", dash);
  auto month = [&](const char* m, const char* last_day) {
    const int md = state(r);
    lit(dash, std::string(m) + "-", md);
    fixed_len_range(md, to, "01", last_day);
  };
  month("02", "28");
  for (const char* m : {"04", "06", "09", "11"}) month(m, "30");
  for (const char* m : {"01", "03", "05", "07", "08", "10", "12"}) month(m, "31");
}

void JsonEmitter::time(int from, int to) {
  const int r = rule(from);
  const int h = state(r), c1 = state(r), m = state(r), c2 = state(r), sec = state(r), frac = state(r),
            zone = state(r), oh = state(r), oc = state(r);
  fixed_len_range(from, h, "00", "23");
  lit(h, ":", c1);
  fixed_len_range(c1, m, "00", "59");
  lit(m, ":", c2);
  fixed_len_range(c2, sec, "00", "59");
  b_.eps(sec, zone);
  lit(sec, ".", frac);
  digits(frac, zone, 1, 6, false);
  lit(zone, "Z", to);
  ByteSet pm;
  pm.set('+');
  pm.set('-');
  const int sign = state(r);
  b_.bytes(zone, pm, sign);
  fixed_len_range(sign, oh, "00", "23");
  lit(oh, ":", oc);
  fixed_len_range(oc, to, "00", "59");
}

bool JsonEmitter::formatted_string(int from, int to, const std::string& format) {
  const int r = rule(from);
  const int open = state(r), close = state(r);
  if (format == "date") {
    date(open, close);
  } else if (format == "time") {
    time(open, close);
  } else if (format == "date-time") {
    const int d = state(r), t = state(r);
    date(open, d);
    lit(d, "T", t);
    time(t, close);
  } else if (format == "uuid") {
    ByteSet hex;
    for (int b = 0; b < 256; ++b) hex[b] = is_hex_digit(static_cast<uint8_t>(b));
    int cur = open;
    const int groups[] = {8, 4, 4, 4, 12};
    for (int g = 0; g < 5; ++g) {
      const int nxt = g == 4 ? close : state(r);
      if (g > 0) {
        const int dash = state(r);
        lit(cur, "-", dash);
        cur = dash;
      }
      run(cur, nxt, hex, groups[g], groups[g]);
      cur = nxt;
    }
  } else if (format == "email") {
    ByteSet atom, alnum, label_mid, alpha;
    for (int b = 0; b < 256; ++b) {
      const bool an = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z');
      alnum[b] = an;
      alpha[b] = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z');
      atom[b] = an || b == '_' || b == '+' || b == '-';
      label_mid[b] = an || b == '-';
    }
    // local: atom ('.' atom){0,2}
    int cur = open;
    const int at = state(r);
    for (int a = 0; a < 3; ++a) {
      const int done = state(r);
      run(cur, done, atom, 1, 20);
      b_.byte(done, '@', at);
      if (a < 2) {
        const int dot = state(r);
        lit(done, ".", dot);
        cur = dot;
      }
    }
    // domain: (label '.'){1,3} tld
    cur = at;
    const int tld = state(r);
    for (int l = 0; l < 3; ++l) {
      const int first = state(r), done = state(r), dot = state(r);
      b_.bytes(cur, alnum, first);
      b_.eps(first, done);
      const int mid = state(r);
      run(first, mid, label_mid, 0, 20);
      b_.bytes(mid, alnum, done);
      lit(done, ".", dot);
      b_.eps(dot, tld);
      cur = dot;
    }
    run(tld, close, alpha, 2, 10);
  } else {
    return false;
  }
  lit(from, "\"", open);
  lit(close, "\"", to);
  return true;
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
