// jinja_tests.cpp: Jinja2's `is` tests (defined, none, string, mapping,
// divisibleby, comparisons ...).
#include <cctype>
#include <set>

#include "chat/jinja_builtins.h"

namespace ms::jinja {

bool has_test(const std::string& name) {
  static const std::set<std::string> kTests = {
      "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "float",
      "boolean", "true", "false", "even", "odd", "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan",
      "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "callable", "lower", "upper", "sameas",
      "escaped", "filter", "test"};
  return kTests.count(name) != 0;
}

bool apply_test(const BuiltinEnv&, const std::string& name, const Value& v, CallArgs& args) {
  auto other = [&]() -> const Value& {
    static const Value kUndef;
    return args.positional.empty() ? kUndef : args.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_object() || v.is_string();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "even" || name == "odd") {
    if (!v.is_number()) throw JinjaError(std::string("'") + name + "' test needs a number, got " + v.type_name());
    int64_t r = v.as_int() % 2;
    return name == "even" ? r == 0 : r != 0;
  }
  if (name == "divisibleby") {
    int64_t d = other().as_int();
    if (d == 0) throw JinjaError("divisibleby 0");
    return v.as_int() % d == 0;
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    bool any = false;
    for (char c : v.str()) {
      unsigned char u = static_cast<unsigned char>(c);
      if (std::isalpha(u)) {
        any = true;
        if (name == "lower" ? std::isupper(u) : std::islower(u)) return false;
      }
    }
    return any;
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.equals(other());
  if (name == "ne" || name == "!=") return !v.equals(other());
  if (name == "lt" || name == "lessthan" || name == "<") return v.less(other());
  if (name == "le" || name == "<=") return !other().less(v);
  if (name == "gt" || name == "greaterthan" || name == ">") return other().less(v);
  if (name == "ge" || name == ">=") return !v.less(other());
  if (name == "sameas") {
    const Value& o = other();
    if (v.kind() != o.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool() || v.is_int()) return v.as_int() == o.as_int();
    return v.equals(o);
  }
  if (name == "in") {
    const Value& hay = other();
    if (hay.is_string()) return v.is_string() && hay.str().find(v.str()) != std::string::npos;
    for (const auto& x : iterate(hay)) if (x.equals(v)) return true;
    return false;
  }
  if (name == "filter" || name == "test") return v.is_string() && (name == "test" ? has_test(v.str()) : true);
  throw JinjaError("unknown test '" + name + "'");
}

}  // namespace ms::jinja
