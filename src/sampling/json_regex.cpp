// Patterns and formats as byte automata; see json_regex.h.
#include "sampling/json_regex.h"

#include <algorithm>
#include <bitset>
#include <map>

namespace ms {
namespace {

constexpr int kMaxNesting = 32;      // groups inside groups
constexpr int kMaxRepeat = 1000;     // {n,m} bounds
constexpr int kMaxRangeSpan = 256;   // code points in one non-ASCII class range

// A set of characters: ASCII as a bitset, others as code points.
struct CharSet {
  std::bitset<128> ascii;
  std::vector<uint32_t> others;
  void add(uint32_t cp) {
    if (cp < 128)
      ascii.set(cp);
    else if (std::find(others.begin(), others.end(), cp) == others.end())
      others.push_back(cp);
  }
};

CharSet printable() {  // what '.', negated classes and padding generate
  CharSet s;
  for (int c = 0x20; c < 0x7f; ++c) s.ascii.set(c);
  return s;
}

struct Re {
  enum Kind { kChars, kSeq, kAlt, kRepeat };
  Kind kind = kSeq;
  CharSet chars;
  std::vector<Re> kids;
  int min = 0, max = -1;  // kRepeat; -1: unbounded
  bool anchored_start = false, anchored_end = false;  // top-level alternatives
};

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}
  Result<Re> parse() {
    Re top;
    top.kind = Re::kAlt;
    for (;;) {
      Re seq;
      if (peek() == '^') {
        ++i_;
        seq.anchored_start = true;
      }
      MS_RETURN_IF_ERROR(parse_seq(&seq, 0, /*top=*/true));
      top.kids.push_back(std::move(seq));
      if (i_ >= p_.size()) break;
      if (p_[i_] == '|') {
        ++i_;
        continue;
      }
      return error("unbalanced ')'");
    }
    return top;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument(what + " at offset " + std::to_string(i_) + " of the pattern");
  }
  int peek() const { return i_ < p_.size() ? static_cast<unsigned char>(p_[i_]) : -1; }

  // One UTF-8 character of the pattern text as a code point.
  Result<uint32_t> next_char() {
    const unsigned char c = static_cast<unsigned char>(p_[i_]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > p_.size()) return error("invalid UTF-8");
    uint32_t cp = n == 1 ? c : (c & (0x7f >> n));
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(p_[i_ + k]) & 0x3f);
    i_ += n;
    return cp;
  }

  Result<uint32_t> hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (i_ >= p_.size() || !is_hex_digit(static_cast<uint8_t>(p_[i_]))) return error("bad hex escape");
      const char h = p_[i_++];
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After a backslash: adds the escape's characters to *set; *single and *cp
  // say whether it was one character (usable as a range end) and which.
  // in_class: inside [...], where \b is a backspace.
  Status escape(CharSet* set, bool in_class, bool* single, uint32_t* cp) {
    if (i_ >= p_.size()) return error("a trailing backslash");
    const char e = p_[i_++];
    auto of = [](std::string_view chars, bool ranges) {
      CharSet c;
      for (size_t k = 0; k < chars.size(); ++k) {
        if (ranges && k + 2 < chars.size() && chars[k + 1] == '-') {
          for (char x = chars[k]; x <= chars[k + 2]; ++x) c.ascii.set(static_cast<unsigned char>(x));
          k += 2;
        } else {
          c.ascii.set(static_cast<unsigned char>(chars[k]));
        }
      }
      return c;
    };
    const CharSet digit = of("0-9", true), word = of("0-9a-zA-Z_", true), space = of(" \t\n\r\f\v", false);
    const CharSet all = printable();
    *single = false;
    switch (e) {
      case 'd': set->ascii |= digit.ascii; return Status::ok();
      case 'w': set->ascii |= word.ascii; return Status::ok();
      case 's': set->ascii |= space.ascii; return Status::ok();
      case 'D': set->ascii |= all.ascii & ~digit.ascii; return Status::ok();
      case 'W': set->ascii |= all.ascii & ~word.ascii; return Status::ok();
      case 'S': set->ascii |= all.ascii & ~space.ascii; return Status::ok();
      default: break;
    }
    *single = true;
    switch (e) {
      case 'n': *cp = '\n'; break;
      case 't': *cp = '\t'; break;
      case 'r': *cp = '\r'; break;
      case 'f': *cp = '\f'; break;
      case 'v': *cp = '\v'; break;
      case '0': *cp = 0; break;
      case 'x': {
        MS_ASSIGN_OR_RETURN(*cp, hex(2));
        break;
      }
      case 'u': {
        MS_ASSIGN_OR_RETURN(*cp, hex(4));
        if (*cp >= 0xD800 && *cp <= 0xDFFF) return error("a surrogate \\u escape");
        break;
      }
      case 'b':
        if (!in_class) return error("'\\b' (word boundary) is not supported");
        *cp = '\b';
        break;
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          return error(std::string("'\\") + e + "' is not supported");
        *cp = static_cast<unsigned char>(e);  // escaped punctuation: itself
    }
    set->add(*cp);
    return Status::ok();
  }

  Status parse_class(CharSet* out) {
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++i_;
    }
    CharSet set;
    bool first = true;
    while (i_ < p_.size() && (p_[i_] != ']' || first)) {
      first = false;
      uint32_t lo = 0;
      bool single = true;
      if (p_[i_] == '\\') {
        ++i_;
        MS_RETURN_IF_ERROR(escape(&set, true, &single, &lo));
        if (!single) continue;
      } else {
        MS_ASSIGN_OR_RETURN(lo, next_char());
        set.add(lo);
      }
      if (peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi = 0;
        if (p_[i_] == '\\') {
          ++i_;
          CharSet tmp;
          bool s1 = true;
          MS_RETURN_IF_ERROR(escape(&tmp, true, &s1, &hi));
          if (!s1) return error("a class escape as a range end");
        } else {
          MS_ASSIGN_OR_RETURN(hi, next_char());
        }
        if (hi < lo) return error("a reversed range");
        if (hi >= 128 && hi - std::max<uint32_t>(lo, 128) >= kMaxRangeSpan)
          return error("a range of more than " + std::to_string(kMaxRangeSpan) + " non-ASCII code points");
        for (uint32_t c = lo; c <= hi; ++c)
          if (c < 0xD800 || c > 0xDFFF) set.add(c);
      }
    }
    if (i_ >= p_.size()) return error("an unterminated class");
    ++i_;  // ']'
    if (negate) {
      CharSet all = printable();
      out->ascii = all.ascii & ~set.ascii;
    } else {
      *out = std::move(set);
    }
    return Status::ok();
  }

  Status parse_seq(Re* seq, int depth, bool top) {
    seq->kind = Re::kSeq;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      const char c = p_[i_];
      if (c == '$') {
        ++i_;
        if (top && (i_ == p_.size() || p_[i_] == '|')) {
          seq->anchored_end = true;
          break;
        }
        return error("'$' inside the pattern is not supported");
      }
      if (c == '^') return error("'^' inside the pattern is not supported");
      Re atom;
      if (c == '(') {
        ++i_;
        if (peek() == '?') {
          if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
            i_ += 2;
          } else {
            return error("lookaround and named groups are not supported");
          }
        }
        if (depth + 1 > kMaxNesting) return error("groups nested deeper than " + std::to_string(kMaxNesting));
        atom.kind = Re::kAlt;
        for (;;) {
          Re alt;
          MS_RETURN_IF_ERROR(parse_seq(&alt, depth + 1, false));
          atom.kids.push_back(std::move(alt));
          if (peek() == '|') {
            ++i_;
            continue;
          }
          if (peek() != ')') return error("an unterminated group");
          ++i_;
          break;
        }
      } else if (c == '[') {
        ++i_;
        atom.kind = Re::kChars;
        MS_RETURN_IF_ERROR(parse_class(&atom.chars));
      } else if (c == '.') {
        ++i_;
        atom.kind = Re::kChars;
        atom.chars = printable();
      } else if (c == '\\') {
        ++i_;
        atom.kind = Re::kChars;
        bool single = true;
        uint32_t cp = 0;
        if (i_ < p_.size() && p_[i_] >= '1' && p_[i_] <= '9') return error("backreferences are not supported");
        if (i_ < p_.size() && (p_[i_] == 'p' || p_[i_] == 'P' || p_[i_] == 'c' || p_[i_] == 'B' || p_[i_] == 'k'))
          return error(std::string("'\\") + p_[i_] + "' is not supported");
        MS_RETURN_IF_ERROR(escape(&atom.chars, false, &single, &cp));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return error("a quantifier with nothing to repeat");
      } else {
        atom.kind = Re::kChars;
        MS_ASSIGN_OR_RETURN(uint32_t cp, next_char());
        atom.chars.add(cp);
      }
      MS_RETURN_IF_ERROR(quantifier(&atom));
      seq->kids.push_back(std::move(atom));
    }
    return Status::ok();
  }

  Status quantifier(Re* atom) {
    int lo = -1, hi = -1;
    const int c = peek();
    if (c == '*') {
      lo = 0;
      ++i_;
    } else if (c == '+') {
      lo = 1;
      ++i_;
    } else if (c == '?') {
      lo = 0;
      hi = 1;
      ++i_;
    } else if (c == '{') {
      const size_t save = i_++;
      auto number = [&](int* out) {
        size_t start = i_;
        int64_t v = 0;
        while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9' && v <= kMaxRepeat) v = v * 10 + (p_[i_++] - '0');
        *out = static_cast<int>(std::min<int64_t>(v, kMaxRepeat + 1));
        return i_ > start;
      };
      if (!number(&lo)) {
        i_ = save;  // not a quantifier: a literal '{' (ECMA-262 Annex B)
        return Status::ok();
      }
      hi = lo;
      if (peek() == ',') {
        ++i_;
        hi = -1;
        if (peek() != '}' && !number(&hi)) return error("a bad {n,m} quantifier");
      }
      if (peek() != '}') return error("a bad {n,m} quantifier");
      ++i_;
      if (lo > kMaxRepeat || hi > kMaxRepeat)
        return error("a repetition bound above " + std::to_string(kMaxRepeat));
      if (hi >= 0 && hi < lo) return error("a {n,m} quantifier with m < n");
    } else {
      return Status::ok();
    }
    if (peek() == '?') ++i_;  // lazy: the same language
    if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') return error("a repeated quantifier");
    Re rep;
    rep.kind = Re::kRepeat;
    rep.min = lo;
    rep.max = hi;
    rep.kids.push_back(std::move(*atom));
    *atom = std::move(rep);
    return Status::ok();
  }

  std::string_view p_;
  size_t i_ = 0;
};

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

// How JSON writes an ASCII character inside a string.
std::string json_escaped(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
  }
  static const char kHex[] = "0123456789abcdef";
  return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
}

void emit_chars(GrammarBuilder& b, int from, int to, const CharSet& set) {
  ByteSet raw;
  for (int c = 0; c < 128; ++c) {
    if (!set.ascii.test(c)) continue;
    if (c >= 0x20 && c != '"' && c != '\\')
      raw.set(c);
    else
      b.literal(from, json_escaped(c), to);
  }
  b.bytes(from, raw, to);
  for (uint32_t cp : set.others) b.literal(from, utf8(cp), to);
}

// Emission recursion depth is the AST's, bounded by kMaxNesting (plus the
// one level of a quantifier per atom).
void emit_re(GrammarBuilder& b, int from, int to, const Re& re) {
  const int r = b.rule_of_state(from);
  switch (re.kind) {
    case Re::kChars:
      emit_chars(b, from, to, re.chars);
      return;
    case Re::kAlt:
      for (const Re& k : re.kids) emit_re(b, from, to, k);
      return;
    case Re::kSeq: {
      int cur = from;
      for (size_t i = 0; i < re.kids.size(); ++i) {
        const int nxt = i + 1 == re.kids.size() ? to : b.new_state(r);
        emit_re(b, cur, nxt, re.kids[i]);
        cur = nxt;
      }
      if (re.kids.empty()) b.eps(from, to);
      return;
    }
    case Re::kRepeat: {
      int cur = from;
      for (int k = 0; k < re.min; ++k) {
        const int nxt = b.new_state(r);
        emit_re(b, cur, nxt, re.kids[0]);
        cur = nxt;
        if (b.num_states() > 4'000'000) return;  // the caller's budget check reports it
      }
      if (re.max < 0) {
        const int loop = b.new_state(r);
        b.eps(cur, loop);
        emit_re(b, loop, loop, re.kids[0]);
        b.eps(loop, to);
        return;
      }
      b.eps(cur, to);
      for (int k = re.min; k < re.max; ++k) {
        const int nxt = b.new_state(r);
        emit_re(b, cur, nxt, re.kids[0]);
        b.eps(nxt, to);
        cur = nxt;
        if (b.num_states() > 4'000'000) return;
      }
      return;
    }
  }
}

}  // namespace

Status emit_pattern(GrammarBuilder& b, int from, int to, std::string_view pattern) {
  Parser parser(pattern);
  MS_ASSIGN_OR_RETURN(Re re, parser.parse());
  const int r = b.rule_of_state(from);
  Re pad;  // the unanchored sides: any characters
  pad.kind = Re::kRepeat;
  pad.min = 0;
  pad.kids.push_back({});
  pad.kids[0].kind = Re::kChars;
  pad.kids[0].chars = printable();
  for (const Re& alt : re.kids) {
    const int a = b.new_state(r), z = b.new_state(r);
    if (alt.anchored_start)
      b.eps(from, a);
    else
      emit_re(b, from, a, pad);
    emit_re(b, a, z, alt);
    if (alt.anchored_end)
      b.eps(z, to);
    else
      emit_re(b, z, to, pad);
  }
  return Status::ok();
}

const char* format_pattern(std::string_view format) {
  static const std::map<std::string_view, const char*> k = {
      {"date",
       "^[0-9]{4}-(?:02-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|"
       "(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01]))$"},
      {"time", "^(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"},
      {"date-time",
       "^[0-9]{4}-(?:02-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|"
       "(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01]))T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?Z$"},
      {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$"},
      {"email",
       "^[A-Za-z0-9_+-]{1,20}(?:\\.[A-Za-z0-9_+-]{1,20}){0,2}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,20}[A-Za-z0-9])?\\.)"
       "{1,3}[A-Za-z]{2,10}$"},
  };
  auto it = k.find(format);
  return it == k.end() ? nullptr : it->second;
}

Status emit_string_product(GrammarBuilder& b, int from, int to, const std::vector<StringPart>& parts,
                           const GrammarLimits& limits) {
  std::vector<Grammar> dfas;
  for (const StringPart& p : parts) {
    GrammarBuilder pb;
    MS_RETURN_IF_ERROR(p.emit(pb, pb.rule_start(0), pb.rule_end(0)));
    auto g = pb.build(limits);
    if (!g.is_ok()) return invalid_argument(p.what + ": " + g.status().message());
    dfas.push_back(std::move(g).value());
  }
  // Breadth-first over the reachable tuples of states; a tuple accepts when all do.
  const int r = b.rule_of_state(from);
  std::map<std::vector<int32_t>, int> id;
  std::vector<std::vector<int32_t>> tuples;
  auto get = [&](const std::vector<int32_t>& t) {
    auto it = id.find(t);
    if (it != id.end()) return it->second;
    const int s = b.new_state(r);
    id.emplace(t, s);
    tuples.push_back(t);
    return s;
  };
  std::vector<int32_t> start;
  for (const Grammar& g : dfas) start.push_back(g.start());
  const int open = get(start);
  b.byte(from, '"', open);
  bool any_accepting = false;
  for (size_t i = 0; i < tuples.size(); ++i) {
    if (static_cast<int>(tuples.size()) > limits.max_dfa_states)
      return invalid_argument("the string constraints together are too large to compile");
    const std::vector<int32_t> t = tuples[i];
    const int s = id.at(t);
    bool acc = true;
    for (size_t k = 0; k < dfas.size(); ++k) acc = acc && dfas[k].accepting(t[k]);
    if (acc) {
      b.byte(s, '"', to);
      any_accepting = true;
    }
    std::map<int, ByteSet> by_target;
    for (int c = 0; c < 256; ++c) {
      std::vector<int32_t> n(t.size());
      bool ok = true;
      for (size_t k = 0; k < dfas.size() && ok; ++k) ok = (n[k] = dfas[k].step(t[k], static_cast<uint8_t>(c))) >= 0;
      if (ok) by_target[get(n)].set(c);
    }
    for (const auto& [target, set] : by_target) b.bytes(s, set, target);
  }
  if (!any_accepting) return invalid_argument("no string satisfies all of its constraints together");
  return Status::ok();
}

}  // namespace ms
