// Implementation of pre_tokenizer.h. Regexes run through PCRE2 with JIT in
// UTF + UCP mode; PCRE2_MATCH_INVALID_UTF makes invalid input bytes simply
// never match, so they become words of their own instead of an error.
#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace ms {

using nlohmann::json;

// GPT-2's pattern, used by ByteLevel when use_regex is true.
static constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Oniguruma (what HF tokenizers uses) treats U+0085 as \s; PCRE2's UCP \s
// does not. Rewrite \s / \S so that both agree with HF.
static std::string onig_compatible(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      else if (n == 'S' && !in_class) out += "[^\\s\\x{85}]";
      else { out += c; out += n; }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') { out += '^'; ++i; }
      if (i + 1 < p.size() && p[i + 1] == ']') { out += ']'; ++i; }
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

class Regex {
 public:
  static Result<std::shared_ptr<const Regex>> compile(const std::string& pattern, bool literal) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    const std::string p = literal ? pattern : onig_compatible(pattern);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), opts, &err, &err_off, nullptr);
    if (!code) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof(buf));
      return invalid_argument("pre_tokenizer Split regex /" + pattern + "/ does not compile at offset " +
                              std::to_string(err_off) + ": " + reinterpret_cast<char*>(buf));
    }
    auto r = std::shared_ptr<Regex>(new Regex());
    r->code_ = code;
    r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return std::shared_ptr<const Regex>(std::move(r));
  }
  ~Regex() { pcre2_code_free(code_); }

  // Appends (begin, end, is_match) parts covering [0, n) of `s` to `parts`.
  struct Part { uint32_t begin, end; bool is_match; };
  void find_parts(const char* s, size_t n, uint32_t base, std::vector<Part>& parts) const {
    struct ThreadState {
      pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
      pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
      pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
      ThreadState() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
      ~ThreadState() {
        pcre2_match_context_free(ctx);
        pcre2_jit_stack_free(stack);
        pcre2_match_data_free(md);
      }
    };
    thread_local ThreadState ts;
    size_t pos = 0, last = 0;
    const auto subject = reinterpret_cast<PCRE2_SPTR>(s);
    while (pos <= n) {
      int rc = jit_ ? pcre2_jit_match(code_, subject, n, pos, 0, ts.md, ts.ctx)
                    : pcre2_match(code_, subject, n, pos, 0, ts.md, ts.ctx);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_)  // e.g. JIT stack exhausted: retry interpreted
        rc = pcre2_match(code_, subject, n, pos, 0, ts.md, nullptr);
      if (rc < 0) break;  // no further match (a resource error also ends here)
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ts.md);
      const size_t b = ov[0], e = ov[1];
      if (e == b) {  // empty match: not a delimiter; step one code point
        if (b >= n) break;
        pos = b + unicode::decode_utf8(std::string_view(s, n), b).len;
        continue;
      }
      if (b > last) parts.push_back({base + uint32_t(last), base + uint32_t(b), false});
      parts.push_back({base + uint32_t(b), base + uint32_t(e), true});
      last = pos = e;
    }
    if (last < n) parts.push_back({base + uint32_t(last), base + uint32_t(n), false});
  }

 private:
  Regex() = default;
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

bool is_word_character(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  static const std::shared_ptr<const Regex> word = [] {
    auto r = Regex::compile("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]", false);
    return r.is_ok() ? r.value() : nullptr;
  }();
  if (!word) return false;
  std::string s;
  unicode::append_utf8(s, cp);
  std::vector<Regex::Part> parts;
  word->find_parts(s.data(), s.size(), 0, parts);
  return parts.size() == 1 && parts[0].is_match;
}

Result<Normalizer> Normalizer::from_json(const json& j) {
  Normalizer n;
  if (j.is_null()) return n;
  if (!j.is_object() || !j.contains("type")) return invalid_argument("normalizer: expected an object with a type");
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") {
    n.nfc_ = true;
  } else if (type == "Sequence") {
    for (const json& sub : j.value("normalizers", json::array())) {
      MS_ASSIGN_OR_RETURN(Normalizer s, from_json(sub));
      n.nfc_ = n.nfc_ || s.nfc_;
    }
  } else {
    return unimplemented("tokenizer.json normalizer type '" + type + "' is not supported (supported: NFC, Sequence)");
  }
  return n;
}

void Normalizer::normalize(std::string& text) const {
  if (nfc_ && unicode::may_change_under_nfc(text)) text = unicode::nfc(text);
}

static Result<PreTokenizer::Behavior> parse_behavior(const std::string& b) {
  using B = PreTokenizer::Behavior;
  if (b == "Removed") return B::kRemoved;
  if (b == "Isolated") return B::kIsolated;
  if (b == "MergedWithPrevious") return B::kMergedWithPrevious;
  if (b == "MergedWithNext") return B::kMergedWithNext;
  if (b == "Contiguous") return B::kContiguous;
  return unimplemented("pre_tokenizer Split behavior '" + b + "' is not supported");
}

Status PreTokenizer::add(const json& j) {
  if (!j.is_object() || !j.contains("type")) return invalid_argument("pre_tokenizer: expected an object with a type");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    for (const json& sub : j.value("pretokenizers", json::array())) MS_RETURN_IF_ERROR(add(sub));
    return Status::ok();
  }
  if (type == "Split") {
    Step s{Step::Kind::kSplit, nullptr};
    const json& pat = j.value("pattern", json::object());
    std::string text;
    bool literal;
    if (pat.contains("Regex")) { text = pat["Regex"].get<std::string>(); literal = false; }
    else if (pat.contains("String")) { text = pat["String"].get<std::string>(); literal = true; }
    else return invalid_argument("pre_tokenizer Split: pattern must hold Regex or String");
    MS_ASSIGN_OR_RETURN(s.regex, Regex::compile(text, literal));
    MS_ASSIGN_OR_RETURN(s.behavior, parse_behavior(j.value("behavior", std::string("Isolated"))));
    s.invert = j.value("invert", false);
    steps_.push_back(std::move(s));
    return Status::ok();
  }
  if (type == "ByteLevel") {
    byte_level_ = true;
    if (j.value("add_prefix_space", false)) steps_.push_back({Step::Kind::kAddPrefixSpace, nullptr});
    if (j.value("use_regex", true)) {
      Step s{Step::Kind::kSplit, nullptr};
      MS_ASSIGN_OR_RETURN(s.regex, Regex::compile(kGpt2Pattern, false));
      steps_.push_back(std::move(s));
    }
    return Status::ok();
  }
  if (type == "Digits") {
    Step s{Step::Kind::kSplit, nullptr};
    MS_ASSIGN_OR_RETURN(s.regex, Regex::compile(j.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+", false));
    steps_.push_back(std::move(s));
    return Status::ok();
  }
  return unimplemented("tokenizer.json pre_tokenizer type '" + type +
                       "' is not supported (supported: Split, ByteLevel, Digits, Sequence)");
}

Result<PreTokenizer> PreTokenizer::from_json(const json& j) {
  PreTokenizer p;
  if (!j.is_null()) MS_RETURN_IF_ERROR(p.add(j));
  return p;
}

static void apply_behavior(PreTokenizer::Behavior behavior, std::vector<Regex::Part>& parts,
                           std::vector<Span>& out) {
  using B = PreTokenizer::Behavior;
  switch (behavior) {
    case B::kIsolated:
      for (const auto& p : parts) out.push_back({p.begin, p.end});
      return;
    case B::kRemoved:
      for (const auto& p : parts) if (!p.is_match) out.push_back({p.begin, p.end});
      return;
    case B::kMergedWithPrevious: {
      const size_t first = out.size();
      bool prev_match = false;
      for (const auto& p : parts) {
        if (p.is_match && !prev_match && out.size() > first) out.back().end = p.end;
        else out.push_back({p.begin, p.end});
        prev_match = p.is_match;
      }
      return;
    }
    case B::kMergedWithNext: {
      std::vector<Span> rev;
      bool prev_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !prev_match && !rev.empty()) rev.back().begin = it->begin;
        else rev.push_back({it->begin, it->end});
        prev_match = it->is_match;
      }
      out.insert(out.end(), rev.rbegin(), rev.rend());
      return;
    }
    case B::kContiguous: {
      const size_t first = out.size();
      bool prev_match = false;
      for (const auto& p : parts) {
        if (p.is_match == prev_match && out.size() > first) out.back().end = p.end;
        else out.push_back({p.begin, p.end});
        prev_match = p.is_match;
      }
      return;
    }
  }
}

void PreTokenizer::split(std::string& text, std::vector<Span>& words) const {
  words.clear();
  if (text.empty()) return;
  words.push_back({0, static_cast<uint32_t>(text.size())});
  std::vector<Span> next;
  std::vector<Regex::Part> parts;
  for (const Step& step : steps_) {
    next.clear();
    if (step.kind == Step::Kind::kAddPrefixSpace) {
      std::string rebuilt;
      rebuilt.reserve(text.size() + words.size());
      for (const Span& w : words) {
        const uint32_t b = rebuilt.size();
        if (text[w.begin] != ' ') rebuilt.push_back(' ');
        rebuilt.append(text, w.begin, w.end - w.begin);
        next.push_back({b, static_cast<uint32_t>(rebuilt.size())});
      }
      text.swap(rebuilt);
    } else {
      for (const Span& w : words) {
        parts.clear();
        step.regex->find_parts(text.data() + w.begin, w.end - w.begin, w.begin, parts);
        if (step.invert)
          for (auto& p : parts) p.is_match = !p.is_match;
        apply_behavior(step.behavior, parts, next);
      }
    }
    words.swap(next);
  }
}

}  // namespace ms
