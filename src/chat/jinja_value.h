// jinja_value.h: the dynamic value type of the Jinja chat-template engine.
// A Value is undefined, none, bool, int64, double, string, array, object
// (insertion-ordered) or a callable. Arrays and objects are shared by reference,
// as in Python, so `list.append(x)` and `{% set ns.x = 1 %}` mutate in place.
// Values convert from nlohmann::json, and print like Python's str().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ms::jinja {

// Thrown inside the engine only; the public API (ChatTemplate, render) turns it
// into a ms::Status. `line` is 1-based, 0 when unknown.
class JinjaError : public std::runtime_error {
 public:
  JinjaError(const std::string& message, int line = 0) : std::runtime_error(message), line_(line) {}
  int line() const { return line_; }
  void set_line(int line) { if (line_ == 0) line_ = line; }
 private:
  int line_;
};

// A render limit was hit (jinja_limits.h): the template (or its input) asked
// for more than a render may cost, as opposed to a mistake in the template.
class LimitError : public JinjaError {
 public:
  using JinjaError::JinjaError;
};

// How containers, booleans and None print: Python's str() (what transformers
// renders) or @huggingface/jinja's JavaScript rendering (JSON-like), kept for
// byte-exact comparison against that reference.
enum class ReprStyle { kPython, kHfJs };

class Value;
using Array = std::vector<Value>;

// Insertion-ordered string-keyed map (templates are small; linear lookup).
class Object {
 public:
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value v);
  bool erase(const std::string& key);
  void clear();
  size_t size() const;
  std::vector<std::pair<std::string, Value>>& items() { return items_; }
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  // Dict literals may use non-string keys ({4096: 512}); entries are stored
  // under the key's str() and the original key is kept here for iteration.
  void set_typed(const Value& key, Value v);
  Value key_value(const std::string& key) const;
  bool is_namespace = false;

 private:
  std::vector<std::pair<std::string, Value>> items_;
  std::vector<std::pair<std::string, Value>> typed_keys_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Argument `i` by position, or by `name` as a keyword; nullptr if absent.
  const Value* get(size_t i, const std::string& name) const;
};

using NativeFunction = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };

  Value() = default;  // undefined
  static Value none() { Value v; v.kind_ = Kind::kNone; return v; }
  Value(bool b) : kind_(Kind::kBool), int_(b ? 1 : 0) {}
  Value(int v) : kind_(Kind::kInt), int_(v) {}
  Value(int64_t v) : kind_(Kind::kInt), int_(v) {}
  Value(double v) : kind_(Kind::kFloat), float_(v) {}
  // Strings, lists and dicts made during a render are charged to its
  // RenderBudget (size limits, live bytes) until the last copy dies.
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  Value(Array a);
  Value(Object o);
  static Value function(std::string name, NativeFunction fn);
  static Value tuple(Array a) { Value v(std::move(a)); v.is_tuple_ = true; return v; }
  // A string marked safe (jinja2's Markup, from `|safe` or `|escape`):
  // `safe + str` HTML-escapes the plain operand, as Markup.__add__ does.
  static Value safe_string(std::string s) { Value v(std::move(s)); v.is_tuple_ = true; return v; }
  bool is_safe() const { return kind_ == Kind::kString && is_tuple_; }
  // From JSON; ordered_json keeps the caller's key order (as Python dicts do).
  // Nesting past RenderLimits::max_value_depth is a JinjaError.
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);
  // After the list or dict this value holds changed size in place (append,
  // pop, update ...): re-charges it to the render's budget.
  void update_charge() const;

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_tuple() const { return kind_ == Kind::kArray && is_tuple_; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const;    // bool/int/float -> int64; a float out of range or NaN is a JinjaError
  double as_double() const;  // bool/int/float -> double
  const std::string& str() const { return *str_; }
  Array& array() const { return *arr_; }
  Object& object() const { return *obj_; }
  const std::string& function_name() const { return fn_->name; }
  Value call(CallArgs& args) const { return fn_->fn(args); }

  bool truthy() const;  // Python truthiness; undefined is false
  // Python str() of the value (or the @huggingface/jinja rendering).
  std::string to_str(ReprStyle style = ReprStyle::kPython) const;
  // Python repr(): strings quoted; used inside containers.
  std::string repr(ReprStyle style = ReprStyle::kPython) const;
  const char* type_name() const;

  // Python ==, with 1 == 1.0 == True.
  bool equals(const Value& other) const;
  // Python <; throws JinjaError for unorderable types.
  bool less(const Value& other) const;
  // The walks above (and tojson) stop with a JinjaError past
  // RenderLimits::max_value_depth: a list may contain itself.

 private:
  std::string repr_at(ReprStyle style, int depth) const;
  bool equals_at(const Value& other, int depth) const;
  bool less_at(const Value& other, int depth) const;
  struct Function {
    std::string name;
    NativeFunction fn;
  };
  Kind kind_ = Kind::kUndefined;
  bool is_tuple_ = false;  // arrays: a tuple; strings: marked safe
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<std::string> str_;
  std::shared_ptr<Array> arr_;
  std::shared_ptr<Object> obj_;
  std::shared_ptr<Function> fn_;
};

// Python float repr: shortest round-trip, always with a '.', 'e' or 'inf'.
std::string format_double(double d);
// Throws JinjaError when `depth` (0 at the top) passes max_value_depth.
void check_value_depth(int depth);
// JSON text of `v` like Python's json.dumps(ensure_ascii=False): ", " / ": "
// separators by default, "," / ": " with an indent; sort_keys optional.
std::string to_json_text(const Value& v, int indent, bool sort_keys, bool ensure_ascii,
                         const std::string& item_sep = "", const std::string& key_sep = "");
// UTF-8 helpers: code points of a string, and back.
std::vector<uint32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end);
void utf8_append(std::string& out, uint32_t cp);

}  // namespace ms::jinja
