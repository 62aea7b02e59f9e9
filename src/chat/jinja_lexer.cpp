// jinja_lexer.cpp: hand-written scanner for the Jinja subset used by chat templates.
#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>

namespace ms::jinja {
namespace {

class Lexer {
 public:
  Lexer(const std::string& src, const LexOptions& opt) : src_(src), opt_(opt) {
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t open = find_tag(pos_);
      add_text(pos_, open);
      if (open == std::string::npos) break;
      lex_tag(open);
    }
    flush_text();
    tokens_.push_back({TokenKind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void add_text(size_t begin, size_t end) {
    if (end == std::string::npos) end = src_.size();
    std::string piece = src_.substr(begin, end - begin);
    if (strip_next_) {
      size_t k = 0;
      while (k < piece.size() && std::isspace(static_cast<unsigned char>(piece[k]))) ++k;
      piece.erase(0, k);
      strip_next_ = false;
    }
    if (pending_.empty()) pending_line_ = line_;
    last_piece_len_ = piece.size();
    pending_ += piece;
    count_lines(begin, end);
    pos_ = end;
  }

  void flush_text() {
    if (!pending_.empty()) tokens_.push_back({TokenKind::kText, pending_, pending_line_});
    pending_.clear();
  }

  void count_lines(size_t begin, size_t end) {
    for (size_t i = begin; i < end && i < src_.size(); ++i) if (src_[i] == '\n') ++line_;
  }

  void rstrip_pending() {
    while (!pending_.empty() && std::isspace(static_cast<unsigned char>(pending_.back()))) pending_.pop_back();
  }

  // lstrip_blocks: spaces/tabs between a line start and a block/comment tag go.
  void lstrip_pending(size_t tag_pos) {
    size_t k = tag_pos;
    while (k > 0 && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
    if (k != 0 && src_[k - 1] != '\n') return;
    size_t n = std::min(tag_pos - k, last_piece_len_);
    pending_.resize(pending_.size() - n);
  }

  // After a block/comment tag: `-` strips all following whitespace,
  // trim_blocks one newline.
  void after_block_close(bool minus) {
    if (minus) strip_next_ = true;
    else if (opt_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') { ++pos_; ++line_; }
  }

  void lex_tag(size_t open) {
    char kind = src_[open + 1];
    bool minus = open + 2 < src_.size() && src_[open + 2] == '-';
    bool plus = open + 2 < src_.size() && src_[open + 2] == '+';
    if (minus) rstrip_pending();
    else if (kind != '{' && opt_.lstrip_blocks && !plus) lstrip_pending(open);
    pos_ = open + 2 + ((minus || plus) ? 1 : 0);
    if (kind == '#') {
      size_t close = src_.find("#}", pos_);
      if (close == std::string::npos) throw JinjaError("unterminated comment", line_);
      bool cminus = close > pos_ && src_[close - 1] == '-';
      flush_text();  // a comment ends a text run: a later `{%-` strips only the text after it
      count_lines(pos_, close);
      pos_ = close + 2;
      after_block_close(cminus);
      return;
    }
    if (kind == '%' && try_raw()) return;
    flush_text();
    int tag_line = line_;
    tokens_.push_back({kind == '{' ? TokenKind::kExprOpen : TokenKind::kStmtOpen, "", tag_line});
    lex_inside(kind);
  }

  // `{% raw %}...{% endraw %}`: the body is text, verbatim.
  bool try_raw() {
    size_t p = pos_;
    while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && std::isalnum(static_cast<unsigned char>(src_[p + 3]))))
      return false;
    p += 3;
    while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
    bool minus = src_.compare(p, 1, "-") == 0;
    if (minus) ++p;
    if (src_.compare(p, 2, "%}") != 0) return false;
    count_lines(pos_, p + 2);
    pos_ = p + 2;
    after_block_close(minus);
    // Find `{%[-] endraw [-]%}`.
    for (size_t s = src_.find("{%", pos_); s != std::string::npos; s = src_.find("{%", s + 2)) {
      size_t q = s + 2;
      bool open_minus = q < src_.size() && src_[q] == '-';
      if (open_minus) ++q;
      while (q < src_.size() && std::isspace(static_cast<unsigned char>(src_[q]))) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && std::isspace(static_cast<unsigned char>(src_[q]))) ++q;
      bool close_minus = src_.compare(q, 1, "-") == 0;
      if (close_minus) ++q;
      if (src_.compare(q, 2, "%}") != 0) continue;
      add_text(pos_, s);
      if (open_minus) rstrip_pending();
      else if (opt_.lstrip_blocks) lstrip_pending(s);
      count_lines(s, q + 2);
      pos_ = q + 2;
      after_block_close(close_minus);
      return true;
    }
    throw JinjaError("unterminated {% raw %} block", line_);
  }

  void lex_inside(char kind) {
    int depth = 0;  // (, [, { nesting, so a dict's `}` is not `}}`
    while (true) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) throw JinjaError(kind == '{' ? "unterminated {{ expression" : "unterminated {% tag", line_);
      char c = src_[pos_];
      const char* close = kind == '{' ? "}}" : "%}";
      bool minus = c == '-' && src_.compare(pos_ + 1, 2, close) == 0;
      if (depth == 0 && (minus || src_.compare(pos_, 2, close) == 0)) {
        pos_ += minus ? 3 : 2;
        tokens_.push_back({kind == '{' ? TokenKind::kExprClose : TokenKind::kStmtClose, "", line_});
        if (kind == '{') strip_next_ = minus;
        else after_block_close(minus);
        return;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        tokens_.push_back({TokenKind::kName, src_.substr(b, pos_ - b), line_});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '"' || c == '\'') {
        lex_string(c);
      } else {
        static const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*", "/", "%", "~", "<", ">",
                                     "=", "(", ")", "[", "]", "{", "}", ".", ",", ":", "|"};
        bool found = false;
        for (const char* op : kOps) {
          size_t n = std::char_traits<char>::length(op);
          if (src_.compare(pos_, n, op) == 0) {
            if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++depth;
            if (op[0] == ')' || op[0] == ']' || op[0] == '}') --depth;
            tokens_.push_back({TokenKind::kOp, op, line_});
            pos_ += n;
            found = true;
            break;
          }
        }
        if (!found) throw JinjaError(std::string("unexpected character '") + c + "'", line_);
      }
    }
  }

  void lex_number() {
    size_t b = pos_;
    while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t q = pos_ + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        pos_ = q;
        while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
      }
    }
    std::string text;
    for (size_t i = b; i < pos_; ++i) if (src_[i] != '_') text += src_[i];
    Token t{is_float ? TokenKind::kFloat : TokenKind::kInt, text, line_};
    if (is_float) t.float_value = std::stod(text);
    else t.int_value = std::stoll(text);
    tokens_.push_back(t);
  }

  void lex_string(char quote) {
    int start_line = line_;
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) throw JinjaError("unterminated string literal", start_line);
      char c = src_[pos_++];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\') { out += c; continue; }
      if (pos_ >= src_.size()) throw JinjaError("unterminated string literal", start_line);
      char e = src_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'x': case 'u': case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > src_.size()) throw JinjaError("bad escape in string literal", line_);
          uint32_t cp = static_cast<uint32_t>(std::stoul(src_.substr(pos_, n), nullptr, 16));
          pos_ += n;
          utf8_append(out, cp);
          break;
        }
        case '\n': ++line_; break;  // line continuation
        default: out += '\\'; out += e;
      }
    }
    tokens_.push_back({TokenKind::kString, out, start_line});
  }

  std::string src_;
  LexOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  std::string pending_;
  int pending_line_ = 1;
  bool strip_next_ = false;
  size_t last_piece_len_ = 0;  // chars of pending_ that came from the latest source run
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace ms::jinja
