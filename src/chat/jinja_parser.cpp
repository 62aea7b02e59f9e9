// jinja_parser.cpp: statements and expressions of the supported Jinja subset.
#include "chat/jinja_parser.h"

#include <algorithm>
#include <set>

namespace ms::jinja {
namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& t, const ParseLimits& limits) : t_(t), limits_(limits) {}

  Body parse_all() {
    Body body = parse_body({});
    if (peek().kind != TokenKind::kEnd) fail("unexpected tag");
    return body;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  const Token& next() { return t_[pos_ < t_.size() - 1 ? pos_++ : pos_]; }
  [[noreturn]] void fail(const std::string& msg) const { throw JinjaError(msg, peek().line); }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).kind == TokenKind::kOp && peek(k).text == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).kind == TokenKind::kName && peek(k).text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got '" + describe(peek()) + "'");
    ++pos_;
  }
  bool accept_op(const char* op) { if (is_op(op)) { ++pos_; return true; } return false; }
  bool accept_name(const char* n) { if (is_name(n)) { ++pos_; return true; } return false; }
  std::string expect_name() {
    if (peek().kind != TokenKind::kName) fail("expected a name, got '" + describe(peek()) + "'");
    return next().text;
  }
  void expect_stmt_close() {
    if (peek().kind != TokenKind::kStmtClose) fail("expected '%}', got '" + describe(peek()) + "'");
    ++pos_;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEnd: return "end of template";
      case TokenKind::kStmtClose: return "%}";
      case TokenKind::kExprClose: return "}}";
      case TokenKind::kText: return "text";
      default: return t.text;
    }
  }
  ExprPtr make(Expr::Kind k, int line) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // Called on every node once its children are in place: its depth is one
  // more than its deepest child's, and a tree past the limit stops the parse
  // (chains like a.b.c or a ~ b ~ c deepen the tree without recursing here).
  ExprPtr seal(ExprPtr e) {
    int d = 0;
    for (const auto& c : e->items) if (c) d = std::max(d, c->depth);
    for (const auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > limits_.max_expr_depth) {
      throw JinjaError("expression nested deeper than the limit of " + std::to_string(limits_.max_expr_depth) +
                       " levels", e->line);
    }
    return e;
  }

  // Counts the constructs open at once (each recursion of the parser); past
  // the limit the parse stops instead of the stack overflowing.
  class Nest {
   public:
    explicit Nest(Parser& p) : p_(p) {
      if (p_.nesting_ >= p_.limits_.max_nesting) {
        p_.fail("template nested deeper than the limit of " + std::to_string(p_.limits_.max_nesting) + " levels");
      }
      ++p_.nesting_;
    }
    ~Nest() { --p_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };

  // Parses statements until a `{% <one of end_tags> %}` (not consumed) or the end.
  Body parse_body(const std::set<std::string>& end_tags) {
    Body body;
    while (true) {
      const Token& tk = peek();
      if (tk.kind == TokenKind::kEnd) {
        if (!end_tags.empty()) {
          std::string want = *end_tags.begin();
          for (const auto& t : end_tags) if (t.rfind("end", 0) == 0) want = t;
          fail("unexpected end of template, expected {% " + want + " %}");
        }
        return body;
      }
      if (tk.kind == TokenKind::kText) {
        auto s = std::make_shared<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = tk.line;
        s->text = tk.text;
        body.push_back(s);
        ++pos_;
      } else if (tk.kind == TokenKind::kExprOpen) {
        ++pos_;
        auto s = std::make_shared<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = tk.line;
        s->expr = parse_tuple_or_expr();
        if (peek().kind != TokenKind::kExprClose) fail("expected '}}', got '" + describe(peek()) + "'");
        ++pos_;
        body.push_back(s);
      } else if (tk.kind == TokenKind::kStmtOpen) {
        if (peek(1).kind == TokenKind::kName && end_tags.count(peek(1).text)) return body;
        ++pos_;
        body.push_back(parse_statement());
      } else {
        fail("unexpected token");
      }
    }
  }

  // Consumes `{% name %}`.
  void expect_tag(const char* name) {
    if (peek().kind != TokenKind::kStmtOpen || !is_name(name, 1)) fail(std::string("expected {% ") + name + " %}");
    pos_ += 2;
    expect_stmt_close();
  }

  StmtPtr parse_statement() {
    Nest nest(*this);
    auto s = std::make_shared<Stmt>();
    s->line = peek().line;
    std::string kw = expect_name();
    if (kw == "if") {
      s->kind = Stmt::Kind::kIf;
      s->conds.push_back(parse_expr());
      expect_stmt_close();
      while (true) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}));
        ++pos_;  // {%
        std::string t = next().text;
        if (t == "elif") { s->conds.push_back(parse_expr()); expect_stmt_close(); continue; }
        expect_stmt_close();
        if (t == "else") { s->bodies.push_back(parse_body({"endif"})); expect_tag("endif"); }
        break;
      }
    } else if (kw == "for") {
      s->kind = Stmt::Kind::kFor;
      s->targets.push_back(expect_name());
      while (accept_op(",")) s->targets.push_back(expect_name());
      if (!accept_name("in")) fail("expected 'in' in for loop");
      s->expr = parse_or();
      if (accept_name("if")) s->cond = parse_expr();
      if (accept_name("recursive")) s->recursive = true;
      expect_stmt_close();
      s->bodies.push_back(parse_body({"else", "endfor"}));
      if (is_name("else", 1)) {
        pos_ += 2;
        expect_stmt_close();
        s->bodies.push_back(parse_body({"endfor"}));
      }
      expect_tag("endfor");
    } else if (kw == "set") {
      s->kind = Stmt::Kind::kSet;
      s->targets.push_back(expect_name());
      if (accept_op(".")) s->attr = expect_name();
      while (accept_op(",")) s->targets.push_back(expect_name());
      if (accept_op("=")) {
        s->expr = parse_tuple_or_expr();
        expect_stmt_close();
      } else {
        // Block set, with optional filters applied to the body.
        auto body_ref = make(Expr::Kind::kName, s->line);
        body_ref->name = "__body__";
        s->expr = parse_filters(body_ref);
        expect_stmt_close();
        s->bodies.push_back(parse_body({"endset"}));
        expect_tag("endset");
      }
    } else if (kw == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->text = expect_name();
      parse_params(s->params);
      expect_stmt_close();
      s->bodies.push_back(parse_body({"endmacro"}));
      expect_tag("endmacro");
    } else if (kw == "call") {
      s->kind = Stmt::Kind::kCallBlock;
      if (is_op("(")) parse_params(s->params);
      s->expr = parse_expr();
      if (s->expr->kind != Expr::Kind::kCall) fail("{% call %} needs a macro call");
      expect_stmt_close();
      s->bodies.push_back(parse_body({"endcall"}));
      expect_tag("endcall");
    } else if (kw == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      auto body_ref = make(Expr::Kind::kName, s->line);
      body_ref->name = "__body__";
      s->expr = parse_filter_chain(body_ref, /*leading_pipe=*/false);
      expect_stmt_close();
      s->bodies.push_back(parse_body({"endfilter"}));
      expect_tag("endfilter");
    } else if (kw == "generation") {
      s->kind = Stmt::Kind::kScope;
      expect_stmt_close();
      s->bodies.push_back(parse_body({"endgeneration"}));
      expect_tag("endgeneration");
    } else if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_stmt_close();
    } else if (kw == "do") {
      s->kind = Stmt::Kind::kDo;
      s->expr = parse_tuple_or_expr();
      expect_stmt_close();
    } else if (kw == "include" || kw == "extends" || kw == "import" || kw == "from" || kw == "block" ||
               kw == "with" || kw == "autoescape" || kw == "trans") {
      --pos_;
      fail("unsupported tag {% " + kw + " %}");
    } else {
      --pos_;
      fail("unknown tag {% " + kw + " %}");
    }
    return s;
  }

  void parse_params(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!accept_op(")")) {
      MacroParam p;
      p.name = expect_name();
      if (accept_op("=")) p.default_value = parse_expr();
      params.push_back(std::move(p));
      if (!is_op(")")) expect_op(",");
    }
  }

  // `a, b` without parentheses becomes a tuple (used by {{ }} and set).
  ExprPtr parse_tuple_or_expr() {
    int line = peek().line;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::kTuple, line);
    t->items.push_back(first);
    while (accept_op(",")) {
      if (peek().kind == TokenKind::kStmtClose || peek().kind == TokenKind::kExprClose) break;
      t->items.push_back(parse_expr());
    }
    return seal(t);
  }

  ExprPtr parse_expr() {
    Nest nest(*this);
    int line = peek().line;
    ExprPtr e = parse_or();
    while (is_name("if")) {
      ++pos_;
      auto c = make(Expr::Kind::kCond, line);
      c->items.push_back(parse_or());
      c->items.push_back(e);
      c->items.push_back(accept_name("else") ? parse_expr() : nullptr);
      e = seal(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = make(Expr::Kind::kBinary, line);
    e->name = op;
    e->items = {std::move(a), std::move(b)};
    return seal(e);
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) { int l = next().line; e = binary("or", e, parse_and(), l); }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) { int l = next().line; e = binary("and", e, parse_not(), l); }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Nest nest(*this);
      auto e = make(Expr::Kind::kUnary, next().line);
      e->name = "not";
      e->items.push_back(parse_not());
      return seal(e);
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_concat();
    while (true) {
      int line = peek().line;
      if (peek().kind == TokenKind::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        std::string op = next().text;
        e = binary(op, e, parse_concat(), line);
      } else if (is_name("in")) {
        ++pos_;
        e = binary("in", e, parse_concat(), line);
      } else if (is_name("not") && is_name("in", 1)) {
        pos_ += 2;
        e = binary("not in", e, parse_concat(), line);
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_add();
    while (is_op("~")) { int l = next().line; e = binary("~", e, parse_add(), l); }
    return e;
  }
  ExprPtr parse_add() {
    ExprPtr e = parse_mul();
    while (is_op("+") || is_op("-")) { const Token& t = next(); e = binary(t.text, e, parse_mul(), t.line); }
    return e;
  }
  ExprPtr parse_mul() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(t.text, e, parse_pow(), t.line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) { int l = next().line; e = binary("**", e, parse_unary(true), l); }
    return e;
  }
  ExprPtr parse_unary(bool with_filters) {
    if (is_op("-") || is_op("+")) {
      Nest nest(*this);
      auto e = make(Expr::Kind::kUnary, peek().line);
      e->name = next().text;
      e->items.push_back(parse_unary(false));
      seal(e);
      return with_filters ? parse_filters(e) : e;
    }
    ExprPtr e = parse_postfix(parse_primary());
    return with_filters ? parse_filters(e) : e;
  }

  // Filters `| f(args)` and tests `is [not] t(args)`, interleaved with postfix.
  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(e);
      } else if (is_name("is")) {
        auto t = make(Expr::Kind::kTest, next().line);
        t->negate = accept_name("not");
        t->name = expect_name();
        t->items.push_back(e);
        if (is_op("(")) {
          parse_call_args(*t);
        } else {
          static const std::set<std::string> kStop = {"and", "or", "else", "if", "in", "is", "not", "recursive"};
          const Token& n = peek();
          bool arg = n.kind == TokenKind::kInt || n.kind == TokenKind::kFloat || n.kind == TokenKind::kString ||
                     (n.kind == TokenKind::kName && !kStop.count(n.text)) || is_op("[");
          if (arg) t->items.push_back(parse_postfix(parse_primary()));
        }
        e = seal(t);
      } else {
        return e;
      }
    }
  }

  // `| f(args) | g ...`; a {% filter %} tag names its first filter without `|`.
  ExprPtr parse_filter_chain(ExprPtr e, bool leading_pipe = true) {
    while (!leading_pipe || accept_op("|")) {
      leading_pipe = true;
      auto f = make(Expr::Kind::kFilter, peek().line);
      f->name = expect_name();
      f->items.push_back(e);
      if (is_op("(")) parse_call_args(*f);
      e = parse_postfix(seal(f));
    }
    return e;
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!accept_op(")")) {
      if (peek().kind == TokenKind::kName && is_op("=", 1)) {
        std::string key = next().text;
        ++pos_;
        call.kwargs.emplace_back(key, parse_expr());
      } else {
        if (!call.kwargs.empty()) fail("positional argument after keyword argument");
        call.items.push_back(parse_expr());
      }
      if (!is_op(")")) expect_op(",");
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      int line = peek().line;
      if (accept_op(".")) {
        auto a = make(Expr::Kind::kAttr, line);
        if (peek().kind == TokenKind::kInt) {
          a->kind = Expr::Kind::kItem;
          auto idx = make(Expr::Kind::kLiteral, line);
          idx->value = Value(next().int_value);
          a->items = {e, idx};
        } else {
          a->name = expect_name();
          a->items.push_back(e);
        }
        e = seal(a);
      } else if (accept_op("[")) {
        ExprPtr parts[3] = {nullptr, nullptr, nullptr};
        int n = 0;
        bool is_slice = false;
        while (true) {
          if (!is_op(":") && !is_op("]")) parts[n] = parse_expr();
          if (accept_op(":")) {
            is_slice = true;
            if (++n > 2) fail("too many ':' in slice");
            continue;
          }
          break;
        }
        expect_op("]");
        auto s = make(is_slice ? Expr::Kind::kSlice : Expr::Kind::kItem, line);
        s->items.push_back(e);
        if (is_slice) s->items.insert(s->items.end(), {parts[0], parts[1], parts[2]});
        else s->items.push_back(parts[0]);
        if (!is_slice && !parts[0]) fail("empty subscript");
        e = seal(s);
      } else if (is_op("(")) {
        auto c = make(Expr::Kind::kCall, line);
        c->items.push_back(e);
        parse_call_args(*c);
        e = seal(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    int line = t.line;
    auto lit = [&](Value v) {
      auto e = make(Expr::Kind::kLiteral, line);
      e->value = std::move(v);
      return e;
    };
    switch (t.kind) {
      case TokenKind::kInt: ++pos_; return lit(Value(t.int_value));
      case TokenKind::kFloat: ++pos_; return lit(Value(t.float_value));
      case TokenKind::kString: {
        std::string s;
        while (peek().kind == TokenKind::kString) s += next().text;  // adjacent literals concatenate
        return lit(Value(s));
      }
      case TokenKind::kName: {
        ++pos_;
        if (t.text == "true" || t.text == "True") return lit(Value(true));
        if (t.text == "false" || t.text == "False") return lit(Value(false));
        if (t.text == "none" || t.text == "None") return lit(Value::none());
        auto e = make(Expr::Kind::kName, line);
        e->name = t.text;
        return e;
      }
      case TokenKind::kOp: break;
      default: fail("expected an expression, got '" + describe(t) + "'");
    }
    if (accept_op("(")) {
      if (accept_op(")")) return make(Expr::Kind::kTuple, line);
      ExprPtr first = parse_expr();
      if (accept_op(")")) return first;
      auto tup = make(Expr::Kind::kTuple, line);
      tup->items.push_back(first);
      while (accept_op(",")) {
        if (is_op(")")) break;
        tup->items.push_back(parse_expr());
      }
      expect_op(")");
      return seal(tup);
    }
    if (accept_op("[")) {
      auto l = make(Expr::Kind::kList, line);
      while (!accept_op("]")) {
        l->items.push_back(parse_expr());
        if (!is_op("]")) expect_op(",");
      }
      return seal(l);
    }
    if (accept_op("{")) {
      auto d = make(Expr::Kind::kDict, line);
      while (!accept_op("}")) {
        d->items.push_back(parse_expr());
        expect_op(":");
        d->items.push_back(parse_expr());
        if (!is_op("}")) expect_op(",");
      }
      return seal(d);
    }
    fail("unexpected '" + t.text + "' in expression");
  }

  const std::vector<Token>& t_;
  const ParseLimits& limits_;
  size_t pos_ = 0;
  int nesting_ = 0;  // Nest guards open now
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const ParseLimits& limits) { return Parser(tokens, limits).parse_all(); }

}  // namespace ms::jinja
