// jinja_interpreter.cpp: executes statements and evaluates expressions.
#include "chat/jinja_interpreter.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "chat/jinja_builtins.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_parser.h"

namespace ms::jinja {
namespace {

using Frame = std::unordered_map<std::string, Value>;
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

[[noreturn]] void overflow(const std::string& op) {
  throw JinjaError("integer overflow in " + op + " (integers are 64-bit here)");
}

// Python's // and % on int64 (b != 0); INT64_MIN // -1 is the one overflow.
int64_t floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) overflow("//");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// a ** b for b >= 0 by squaring, with overflow checks.
int64_t int_pow(int64_t a, int64_t b) {
  int64_t r = 1;
  while (b > 0) {
    if ((b & 1) && __builtin_mul_overflow(r, a, &r)) overflow("**");
    b >>= 1;
    if (b > 0 && __builtin_mul_overflow(a, a, &a)) overflow("**");
  }
  return r;
}

// `count` copies of something `unit` long, checked before anything is built.
size_t repeat_size(size_t unit, int64_t count, bool items) {
  if (count <= 0 || unit == 0) return 0;
  size_t total = 0;
  if (__builtin_mul_overflow(unit, static_cast<uint64_t>(count), &total)) total = SIZE_MAX;
  if (items) budget_check_items(total);
  else budget_check_string(total);
  return total;
}

class Interpreter {
 public:
  Interpreter(const RenderOptions& options, RenderBudget& budget) : options_(options), budget_(budget) {
    env_.repr = options.repr;
  }
  // A macro closes over the frames it was defined in, and is stored in one of
  // them: a reference cycle. Emptying every frame still alive frees it.
  ~Interpreter() {
    stack_.clear();
    for (auto& w : frames_)
      if (auto f = w.lock()) f->clear();
  }
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string run(const Body& body, const Value& context) {
    auto globals = new_frame();
    Object g;
    install_globals(g, options_);
    for (auto& kv : g.items()) (*globals)[kv.first] = kv.second;
    if (context.is_object()) {
      for (auto& kv : context.object().items()) (*globals)[kv.first] = kv.second;
    }
    stack_ = {globals, new_frame()};
    std::string out;
    exec_body(body, out);
    return out;
  }

 private:
  // --- statements ---------------------------------------------------------
  Flow exec_body(const Body& body, std::string& out) {
    for (const auto& s : body) {
      Flow f = exec(*s, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  // Every frame goes through here, so ~Interpreter can break cycles; expired
  // entries are dropped whenever the list doubles.
  FramePtr new_frame() {
    auto f = std::make_shared<Frame>();
    frames_.push_back(f);
    if (frames_.size() >= compact_at_) {
      std::erase_if(frames_, [](const std::weak_ptr<Frame>& w) { return w.expired(); });
      compact_at_ = std::max<size_t>(256, 2 * frames_.size());
    }
    return f;
  }

  // Every exec/eval is one level of evaluation depth and one step.
  class Depth {
   public:
    explicit Depth(Interpreter& in) : depth_(&in.budget_) { in.budget_.step(); }

   private:
    EvalDepth depth_;
  };

  void emit(std::string& out, const std::string& text) {
    if (text.size() > budget_.limits().max_output_bytes - std::min(out.size(), budget_.limits().max_output_bytes)) {
      throw LimitError("template render limit: output over " +
                       std::to_string(budget_.limits().max_output_bytes >> 20) + " MiB");
    }
    out += text;
  }

  Flow exec(const Stmt& s, std::string& out) {
    try {
      Depth depth(*this);
      return exec_inner(s, out);
    } catch (JinjaError& e) {
      e.set_line(s.line);
      throw;
    }
  }

  Flow exec_inner(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::kText: emit(out, s.text); return Flow::kNormal;
      case Stmt::Kind::kOutput: emit(out, eval(*s.expr).to_str(options_.repr)); return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i) {
          if (eval(*s.conds[i]).truthy()) return exec_body(s.bodies[i], out);
        }
        if (s.bodies.size() > s.conds.size()) return exec_body(s.bodies.back(), out);
        return Flow::kNormal;
      case Stmt::Kind::kFor: exec_for(s, out); return Flow::kNormal;
      case Stmt::Kind::kSet: exec_set(s); return Flow::kNormal;
      case Stmt::Kind::kMacro: set_var(s.text, make_macro(s, nullptr)); return Flow::kNormal;
      case Stmt::Kind::kCallBlock: {
        Value caller = make_macro(s, nullptr, "caller");
        const Expr& call = *s.expr;
        Value fn = eval(*call.items[0]);
        CallArgs args = eval_args(call);
        args.keyword.emplace_back("caller", caller);
        emit(out, call_value(fn, args).to_str(options_.repr));
        return Flow::kNormal;
      }
      case Stmt::Kind::kFilterBlock: {
        std::string body;
        exec_scoped(s.bodies[0], body);
        emit(out, eval_with_body(*s.expr, Value(body)).to_str(options_.repr));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
      case Stmt::Kind::kDo: eval(*s.expr); return Flow::kNormal;
      case Stmt::Kind::kScope: return exec_body(s.bodies[0], out);
    }
    return Flow::kNormal;
  }

  void exec_scoped(const Body& body, std::string& out) {
    stack_.push_back(new_frame());
    try {
      exec_body(body, out);
    } catch (...) {
      stack_.pop_back();
      throw;
    }
    stack_.pop_back();
  }

  Value eval_with_body(const Expr& chain, Value body) {
    stack_.push_back(new_frame());
    (*stack_.back())["__body__"] = std::move(body);
    Value v;
    try {
      v = eval(chain);
    } catch (...) {
      stack_.pop_back();
      throw;
    }
    stack_.pop_back();
    return v;
  }

  void assign_targets(const std::vector<std::string>& targets, const Value& v, Frame& frame) {
    if (targets.size() == 1) {
      frame[targets[0]] = v;
      return;
    }
    Array items = iterate(v);
    if (items.size() != targets.size()) {
      throw JinjaError("cannot unpack " + std::to_string(items.size()) + " values into " +
                       std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) frame[targets[i]] = items[i];
  }

  void exec_set(const Stmt& s) {
    Value v;
    if (s.bodies.empty()) {
      v = eval(*s.expr);
    } else {
      std::string body;
      exec_scoped(s.bodies[0], body);
      v = eval_with_body(*s.expr, Value(body));
    }
    if (!s.attr.empty()) {
      Value target = lookup(s.targets[0]);
      if (!target.is_object()) throw JinjaError("cannot set attribute '" + s.attr + "' on " + target.type_name());
      target.object().set(s.attr, v);
      target.update_charge();
      return;
    }
    assign_targets(s.targets, v, *stack_.back());
  }

  void exec_for(const Stmt& s, std::string& out) {
    Value iterable = eval(*s.expr);
    if (iterable.is_none()) throw JinjaError("'NoneType' object is not iterable");
    Array all = iterate(iterable);
    auto frame = new_frame();
    stack_.push_back(frame);
    struct Pop {
      std::vector<FramePtr>& st;
      ~Pop() { st.pop_back(); }
    } pop{stack_};
    // Loop filtering (`for x in y if c`) happens before loop.* is computed.
    Array items;
    if (s.cond) {
      for (const auto& it : all) {
        assign_targets(s.targets, it, *frame);
        if (eval(*s.cond).truthy()) items.push_back(it);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      if (s.bodies.size() > 1) exec_body(s.bodies[1], out);
      return;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      budget_.step();
      frame->clear();
      Object loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(n - i));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("depth", Value(1));
      loop.set("depth0", Value(0));
      loop.set("previtem", i > 0 ? items[i - 1] : Value());
      loop.set("nextitem", i + 1 < n ? items[i + 1] : Value());
      loop.set("cycle", Value::function("cycle", [i](CallArgs& a) -> Value {
        if (a.positional.empty()) throw JinjaError("loop.cycle() needs arguments");
        return a.positional[static_cast<size_t>(i) % a.positional.size()];
      }));
      (*frame)["loop"] = Value(std::move(loop));
      assign_targets(s.targets, items[i], *frame);
      Flow f = exec_body(s.bodies[0], out);
      if (f == Flow::kBreak) break;
    }
  }

  // A macro (or a call block's `caller`) as a callable value. Its body runs in
  // a fresh frame on top of the globals and the template's top-level frame.
  Value make_macro(const Stmt& s, std::nullptr_t, const std::string& name = "") {
    const Stmt* def = &s;
    std::vector<FramePtr> closure = stack_;
    std::string macro_name = name.empty() ? s.text : name;
    return Value::function(macro_name, [this, def, closure, macro_name](CallArgs& args) -> Value {
      const int max_calls = budget_.limits().max_call_depth;
      if (call_depth_ >= max_calls) {
        throw LimitError("template render limit: macro '" + macro_name + "' called with " + std::to_string(max_calls) +
                         " calls already open (endless recursion?)");
      }
      struct CallDepth {
        int& d;
        ~CallDepth() { --d; }
      } call_depth{++call_depth_};
      auto frame = new_frame();
      size_t np = def->params.size();
      if (args.positional.size() > np) {
        throw JinjaError("macro '" + macro_name + "' takes " + std::to_string(np) + " arguments, got " +
                         std::to_string(args.positional.size()));
      }
      std::vector<FramePtr> saved = std::move(stack_);
      stack_ = closure;
      stack_.push_back(frame);
      struct Restore {
        std::vector<FramePtr>& st;
        std::vector<FramePtr> saved;
        ~Restore() { st = std::move(saved); }
      } restore{stack_, std::move(saved)};
      for (size_t i = 0; i < np; ++i) {
        const MacroParam& p = def->params[i];
        const Value* v = args.get(i, p.name);
        (*frame)[p.name] = v ? *v : (p.default_value ? eval(*p.default_value) : Value());
      }
      for (const auto& kv : args.keyword) {
        bool known = false;
        for (const auto& p : def->params) known = known || p.name == kv.first;
        if (!known && kv.first == "caller") (*frame)["caller"] = kv.second;
        else if (!known) throw JinjaError("macro '" + macro_name + "' has no argument '" + kv.first + "'");
      }
      std::string out;
      exec_body(def->bodies[0], out);
      return Value(out);
    });
  }

  // --- expressions --------------------------------------------------------
  Value lookup(const std::string& name) const {
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    return Value();
  }

  void set_var(const std::string& name, Value v) { (*stack_.back())[name] = std::move(v); }

  CallArgs eval_args(const Expr& e, size_t first = 1) {
    CallArgs a;
    for (size_t i = first; i < e.items.size(); ++i) a.positional.push_back(eval(*e.items[i]));
    for (const auto& kv : e.kwargs) a.keyword.emplace_back(kv.first, eval(*kv.second));
    return a;
  }

  Value call_value(const Value& fn, CallArgs& args) {
    if (!fn.is_function()) throw JinjaError(std::string("'") + fn.type_name() + "' object is not callable");
    return fn.call(args);
  }

  Value eval(const Expr& e) {
    try {
      Depth depth(*this);
      return eval_inner(e);
    } catch (JinjaError& err) {
      err.set_line(e.line);
      throw;
    }
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName: return lookup(e.name);
      case Expr::Kind::kList: case Expr::Kind::kTuple: {
        Array a;
        for (const auto& it : e.items) a.push_back(eval(*it));
        return e.kind == Expr::Kind::kTuple ? Value::tuple(std::move(a)) : Value(std::move(a));
      }
      case Expr::Kind::kDict: {
        Object o;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          Value k = eval(*e.items[i]);
          o.set_typed(k, eval(*e.items[i + 1]));
        }
        return Value(std::move(o));
      }
      case Expr::Kind::kAttr: {
        Value obj = eval(*e.items[0]);
        if (obj.is_object()) {
          if (const Value* v = obj.object().find(e.name)) return *v;
        }
        return get_method(env_, obj, e.name);
      }
      case Expr::Kind::kItem: return get_item(eval(*e.items[0]), eval(*e.items[1]));
      case Expr::Kind::kSlice: return eval_slice(e);
      case Expr::Kind::kCall: {
        const Expr& callee = *e.items[0];
        Value fn;
        if (callee.kind == Expr::Kind::kAttr) {
          // Python's getattr comes first for calls: d.items() is the method.
          Value obj = eval(*callee.items[0]);
          fn = get_method(env_, obj, callee.name);
          if (fn.is_undefined() && obj.is_object()) {
            if (const Value* v = obj.object().find(callee.name)) fn = *v;
          }
          if (fn.is_undefined()) {
            throw JinjaError(std::string("'") + obj.type_name() + "' object has no method '" + callee.name + "'");
          }
        } else {
          fn = eval(callee);
          if (fn.is_undefined() && callee.kind == Expr::Kind::kName) {
            throw JinjaError("'" + callee.name + "' is undefined (not a function)");
          }
        }
        CallArgs args = eval_args(e);
        return call_value(fn, args);
      }
      case Expr::Kind::kFilter: {
        Value input = eval(*e.items[0]);
        CallArgs args = eval_args(e);
        return apply_filter(env_, e.name, input, args);
      }
      case Expr::Kind::kTest: {
        if (!has_test(e.name)) throw JinjaError("unknown test '" + e.name + "'");
        Value input = eval(*e.items[0]);
        CallArgs args = eval_args(e);
        bool r = apply_test(env_, e.name, input, args);
        return Value(e.negate ? !r : r);
      }
      case Expr::Kind::kUnary: {
        Value v = eval(*e.items[0]);
        if (e.name == "not") return Value(!v.truthy());
        if (!v.is_number()) throw JinjaError("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
        if (e.name == "+") return v.is_bool() ? Value(v.as_int()) : v;
        if (v.is_float()) return Value(-v.as_double());
        if (v.as_int() == INT64_MIN) overflow("unary -");
        return Value(-v.as_int());
      }
      case Expr::Kind::kCond: {
        if (eval(*e.items[0]).truthy()) return eval(*e.items[1]);
        return e.items[2] ? eval(*e.items[2]) : Value();
      }
      case Expr::Kind::kBinary: return eval_binary(e);
    }
    return Value();
  }

  Value eval_slice(const Expr& e) {
    Value obj = eval(*e.items[0]);
    auto opt = [&](size_t i) -> std::optional<int64_t> {
      if (!e.items[i]) return std::nullopt;
      Value v = eval(*e.items[i]);
      if (v.is_none()) return std::nullopt;
      if (!v.is_number()) throw JinjaError("slice indices must be integers");
      return v.as_int();
    };
    std::optional<int64_t> start = opt(1), stop = opt(2), step_o = opt(3);
    int64_t step = step_o.value_or(1);
    if (step == 0) throw JinjaError("slice step cannot be zero");
    std::vector<uint32_t> cps;
    int64_t n;
    if (obj.is_string()) { cps = utf8_decode(obj.str()); n = static_cast<int64_t>(cps.size()); }
    else if (obj.is_array()) n = static_cast<int64_t>(obj.array().size());
    else if (obj.is_undefined()) return Value();
    else throw JinjaError(std::string("'") + obj.type_name() + "' object is not subscriptable");
    auto clamp = [&](std::optional<int64_t> v, int64_t def) -> int64_t {
      if (!v) return def;
      int64_t x = *v;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    int64_t b = clamp(start, step > 0 ? 0 : n - 1), en = clamp(stop, step > 0 ? n : -1);
    // Indices stay in [-1, n]; a step longer than that takes one element, so
    // clamping it keeps i + step from overflowing.
    step = std::clamp<int64_t>(step, -(n + 2), n + 2);
    auto more = [&](int64_t i) { return step > 0 ? i < en : i > en; };
    if (obj.is_string()) {
      std::string s;
      for (int64_t i = b; more(i); i += step) utf8_append(s, cps[i]);
      return Value(s);
    }
    Array a;
    for (int64_t i = b; more(i); i += step) a.push_back(obj.array()[i]);
    return Value(std::move(a));
  }

  static bool contains(const Value& hay, const Value& needle) {
    if (hay.is_string()) {
      if (!needle.is_string()) throw JinjaError("'in <string>' requires string as left operand");
      return hay.str().find(needle.str()) != std::string::npos;
    }
    if (hay.is_array()) {
      budget_step(static_cast<int64_t>(hay.array().size()));
      for (const auto& x : hay.array()) if (x.equals(needle)) return true;
      return false;
    }
    if (hay.is_object()) {
      if (needle.is_string()) return hay.object().find(needle.str()) != nullptr;
      return hay.object().key_value(needle.to_str()).equals(needle) && hay.object().find(needle.to_str());
    }
    if (hay.is_undefined()) return false;
    throw JinjaError(std::string("argument of type '") + hay.type_name() + "' is not iterable");
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.items[0]);
      return a.truthy() ? eval(*e.items[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.items[0]);
      return a.truthy() ? a : eval(*e.items[1]);
    }
    Value a = eval(*e.items[0]);
    Value b = eval(*e.items[1]);
    if (op == "~") {
      std::string x = a.to_str(options_.repr), y = b.to_str(options_.repr);
      budget_.check_string(x.size() + y.size());
      return Value(x + y);
    }
    if (op == "==") return Value(a.equals(b));
    if (op == "!=") return Value(!a.equals(b));
    if (op == "<") return Value(a.less(b));
    if (op == ">") return Value(b.less(a));
    if (op == "<=") return Value(!b.less(a));
    if (op == ">=") return Value(!a.less(b));
    if (op == "in") return Value(contains(b, a));
    if (op == "not in") return Value(!contains(b, a));
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        budget_.check_string(a.str().size() + b.str().size());
        // Markup + str escapes the plain side (Python jinja2; @huggingface/jinja has no Markup).
        if ((a.is_safe() || b.is_safe()) && options_.repr == ReprStyle::kPython) {
          return Value::safe_string((a.is_safe() ? a.str() : html_escape(a.str())) +
                                    (b.is_safe() ? b.str() : html_escape(b.str())));
        }
        return Value(a.str() + b.str());
      }
      if (a.is_array() && b.is_array()) {
        budget_.check_items(a.array().size() + b.array().size());
        Array r = a.array();
        r.insert(r.end(), b.array().begin(), b.array().end());
        return Value(std::move(r));
      }
    }
    if (op == "*") {
      if ((a.is_string() || a.is_array()) && b.is_int()) std::swap(a, b);
      if (a.is_int() && (b.is_string() || b.is_array())) {
        // 'a' * 10**12: the size is checked before anything is built.
        if (b.is_string()) {
          // By doubling: 'a' * 10**6 is 20 appends, not a million.
          const size_t total = repeat_size(b.str().size(), a.as_int(), false);
          std::string r;
          r.reserve(total);
          if (total > 0) r = b.str();
          while (r.size() < total) r.append(r, 0, std::min(r.size(), total - r.size()));
          return Value(std::move(r));
        }
        Array r;
        r.reserve(repeat_size(b.array().size(), a.as_int(), true));
        for (int64_t i = 0; i < a.as_int(); ++i) r.insert(r.end(), b.array().begin(), b.array().end());
        return Value(std::move(r));
      }
    }
    if (op == "%" && a.is_string()) {
      CallArgs args;
      if (b.is_tuple()) args.positional = b.array();
      else args.positional.push_back(b);
      return apply_filter(env_, "format", a, args);
    }
    if (!a.is_number() || !b.is_number()) {
      throw JinjaError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() +
                       "'");
    }
    bool fl = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.as_double() == 0) throw JinjaError("division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (op == "**") {
      if (!fl && b.as_int() >= 0) return Value(int_pow(a.as_int(), b.as_int()));
      return Value(std::pow(a.as_double(), b.as_double()));
    }
    if (fl) {
      double x = a.as_double(), y = b.as_double();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (y == 0) throw JinjaError("division by zero");
      if (op == "//") return Value(std::floor(x / y));
      if (op == "%") return Value(x - std::floor(x / y) * y);
    } else {
      int64_t x = a.as_int(), y = b.as_int(), r = 0;
      if (op == "+" && __builtin_add_overflow(x, y, &r)) overflow("+");
      if (op == "-" && __builtin_sub_overflow(x, y, &r)) overflow("-");
      if (op == "*" && __builtin_mul_overflow(x, y, &r)) overflow("*");
      if (op == "+" || op == "-" || op == "*") return Value(r);
      if (y == 0) throw JinjaError("division by zero");
      if (op == "//") return Value(floor_div(x, y));
      if (op == "%") return Value(floor_mod(x, y));
    }
    throw JinjaError("unknown operator " + op);
  }

  RenderOptions options_;
  RenderBudget& budget_;
  BuiltinEnv env_;
  std::vector<FramePtr> stack_;
  int call_depth_ = 0;  // macro calls open
  std::vector<std::weak_ptr<Frame>> frames_;  // every frame made (new_frame)
  size_t compact_at_ = 256;
};

Body parse_source(const std::string& source, const ParseLimits& limits) {
  if (source.size() > limits.max_source_bytes) {
    throw JinjaError("template of " + std::to_string(source.size()) + " bytes is over the limit of " +
                     std::to_string(limits.max_source_bytes) + " bytes");
  }
  return parse(tokenize(source), limits);
}

}  // namespace

Template::Template(const std::string& source, const ParseLimits& limits) : body_(parse_source(source, limits)) {}

std::string Template::render(const Value& context, const RenderOptions& options, RenderBudget& budget) const {
  Interpreter interp(options, budget);
  return interp.run(body_, context);
}

}  // namespace ms::jinja
