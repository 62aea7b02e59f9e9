// jinja_value.cpp: Value construction, Python truthiness/equality/ordering,
// Python-compatible str()/repr(), JSON conversion and the tojson writer.
#include "chat/jinja_value.h"

#include <charconv>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "chat/jinja_limits.h"

namespace ms::jinja {
namespace {

// shared_ptr deleter that gives a value's bytes back to the budget it was
// charged to (nullptr: made outside a render, not charged). update_charge()
// rewrites `bytes` in place when a container grows or shrinks.
template <typename T>
struct Charged {
  RenderBudget* budget = nullptr;
  size_t bytes = 0;
  void operator()(T* p) const {
    if (budget) budget->release(bytes);
    delete p;
  }
};

size_t cost_of(const std::string& s) { return sizeof(std::string) + s.size(); }
size_t cost_of(const Array& a) { return sizeof(Array) + a.size() * sizeof(Value); }
size_t cost_of(const Object& o) {
  size_t n = sizeof(Object) + o.size() * (sizeof(std::pair<std::string, Value>) + sizeof(std::string));
  for (const auto& kv : o.items()) n += kv.first.size();
  return n;
}

template <typename T>
std::shared_ptr<T> make_charged(T&& v) {
  RenderBudget* b = RenderBudget::current();
  size_t bytes = 0;
  if (b) {
    bytes = cost_of(v);
    b->acquire(bytes);
  }
  T* p;
  try {
    p = new T(std::move(v));
  } catch (...) {
    if (b) b->release(bytes);
    throw;
  }
  std::shared_ptr<T> sp(p, Charged<T>{b, bytes});  // on failure the deleter runs
  if constexpr (!std::is_same_v<T, std::string>) {
    if (b) b->track(sp);
  }
  return sp;
}

template <typename T>
void recharge(const std::shared_ptr<T>& p) {
  auto* d = std::get_deleter<Charged<T>>(p);
  if (!d || !d->budget) return;
  const size_t now = cost_of(*p);
  if (now > d->bytes) d->budget->acquire(now - d->bytes);
  else d->budget->release(d->bytes - now);
  d->bytes = now;
}

int max_value_depth() {
  RenderBudget* b = RenderBudget::current();
  return b ? b->limits().max_value_depth : RenderLimits{}.max_value_depth;
}

}  // namespace

void check_value_depth(int depth) {
  if (depth > max_value_depth()) {
    throw LimitError("template render limit: a value nested deeper than " + std::to_string(max_value_depth()) +
                     " levels (a list or dict that contains itself?)");
  }
}

Value::Value(std::string s) : kind_(Kind::kString) {
  budget_check_string(s.size());
  str_ = make_charged(std::move(s));
}
// Building a container costs a step per item, so work that makes big lists
// in a loop (range(10**6) inside a loop) runs out of steps, not of time.
Value::Value(Array a) : kind_(Kind::kArray) {
  budget_check_items(a.size());
  budget_step(static_cast<int64_t>(a.size()));
  arr_ = make_charged(std::move(a));
}
Value::Value(Object o) : kind_(Kind::kObject) {
  budget_check_items(o.size());
  budget_step(static_cast<int64_t>(o.size()));
  obj_ = make_charged(std::move(o));
}

void Value::update_charge() const {
  if (kind_ == Kind::kArray) {
    budget_check_items(arr_->size());
    recharge(arr_);
  } else if (kind_ == Kind::kObject) {
    budget_check_items(obj_->size());
    recharge(obj_);
  }
}

const Value* Object::find(const std::string& key) const {
  for (const auto& kv : items_) if (kv.first == key) return &kv.second;
  return nullptr;
}
Value* Object::find(const std::string& key) {
  for (auto& kv : items_) if (kv.first == key) return &kv.second;
  return nullptr;
}
size_t Object::size() const { return items_.size(); }
void Object::clear() {
  items_.clear();
  typed_keys_.clear();
}
void Object::set(const std::string& key, Value v) {
  if (Value* p = find(key)) { *p = std::move(v); return; }
  items_.emplace_back(key, std::move(v));
}
void Object::set_typed(const Value& key, Value v) {
  if (key.is_string()) { set(key.str(), std::move(v)); return; }
  std::string k = key.to_str();
  set(k, std::move(v));
  for (auto& kv : typed_keys_) if (kv.first == k) { kv.second = key; return; }
  typed_keys_.emplace_back(k, key);
}
Value Object::key_value(const std::string& key) const {
  for (const auto& kv : typed_keys_) if (kv.first == key) return kv.second;
  return Value(key);
}
bool Object::erase(const std::string& key) {
  for (auto it = items_.begin(); it != items_.end(); ++it) {
    if (it->first == key) { items_.erase(it); return true; }
  }
  return false;
}

const Value* CallArgs::get(size_t i, const std::string& name) const {
  if (i < positional.size()) return &positional[i];
  for (const auto& kv : keyword) if (kv.first == name) return &kv.second;
  return nullptr;
}

Value Value::function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

template <typename Json>
static Value value_from_json(const Json& j, int depth) {
  check_value_depth(depth);
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value(static_cast<int64_t>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(value_from_json(e, depth + 1));
      return Value(std::move(a));
    }
    case nlohmann::json::value_t::object: {
      Object o;
      // JSON keys are unique: append without Object::set's linear search.
      for (auto it = j.begin(); it != j.end(); ++it) o.items().emplace_back(it.key(), value_from_json(it.value(), depth + 1));
      return Value(std::move(o));
    }
    default: return Value::none();
  }
}

Value Value::from_json(const nlohmann::json& j) { return value_from_json(j, 0); }
Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j, 0); }

int64_t Value::as_int() const {
  if (kind_ == Kind::kFloat) {
    // Python int(x) truncates; NaN and values past int64 have no integer here.
    if (!(float_ >= -9223372036854775808.0 && float_ < 9223372036854775808.0)) {
      throw JinjaError("cannot convert float " + format_double(float_) + " to integer");
    }
    return static_cast<int64_t>(float_);
  }
  return int_;
}
double Value::as_double() const {
  if (kind_ == Kind::kFloat) return float_;
  return static_cast<double>(int_);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0.0;
    case Kind::kString: return !str_->empty();
    case Kind::kArray: return !arr_->empty();
    case Kind::kObject: return obj_->size() != 0;
    case Kind::kFunction: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kArray: return is_tuple_ ? "tuple" : "list";
    case Kind::kObject: return obj_->is_namespace ? "Namespace" : "dict";
    case Kind::kFunction: return "function";
  }
  return "?";
}

std::string format_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, res.ptr);
  // Python repr switches to exponent form at 1e16 and below 1e-4.
  int exp10 = d == 0 ? 0 : static_cast<int>(std::floor(std::log10(std::fabs(d))));
  if (exp10 >= 16 || exp10 < -4) {
    res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
    s.assign(buf, res.ptr);
    // C++ prints e+16 / e-05; Python prints e+16 / e-05 too, but "1e+16" without ".0".
    return s;
  }
  res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::fixed);
  s.assign(buf, res.ptr);
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

static std::string py_quote(const std::string& s) {
  // Python repr of a str: single quotes unless the text has ' and no ".
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(q) || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) { char b[8]; std::snprintf(b, sizeof(b), "\\x%02x", c); out += b; }
    else out += static_cast<char>(c);
  }
  out += q;
  return out;
}

std::string Value::to_str(ReprStyle style) const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return *str_;
    case Kind::kNone: return style == ReprStyle::kPython ? "None" : "null";
    case Kind::kBool:
      if (style == ReprStyle::kPython) return int_ ? "True" : "False";
      return int_ ? "true" : "false";
    case Kind::kInt: return std::to_string(int_);
    case Kind::kFloat: return format_double(float_);
    default: return repr(style);
  }
}

std::string Value::repr(ReprStyle style) const { return repr_at(style, 0); }

std::string Value::repr_at(ReprStyle style, int depth) const {
  check_value_depth(depth);
  if (style == ReprStyle::kHfJs) {
    if (kind_ == Kind::kUndefined) return "undefined";
    if (kind_ == Kind::kFunction) return "[Function]";
    if (kind_ == Kind::kArray || kind_ == Kind::kObject || kind_ == Kind::kString) {
      std::string out;
      if (kind_ == Kind::kString) return to_json_text(*this, 0, false, false);
      if (kind_ == Kind::kArray) {
        out = "[";
        for (size_t i = 0; i < arr_->size(); ++i) {
          if (i) out += ", ";
          out += (*arr_)[i].repr_at(style, depth + 1);
          budget_check_string(out.size());
        }
        return out + "]";
      }
      out = "{";
      bool first = true;
      for (const auto& kv : obj_->items()) {
        if (!first) out += ", ";
        first = false;
        out += to_json_text(Value(kv.first), 0, false, false) + ": " + kv.second.repr_at(style, depth + 1);
        budget_check_string(out.size());
      }
      return out + "}";
    }
    return to_str(style);
  }
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kString: return py_quote(*str_);
    case Kind::kArray: {
      std::string out = is_tuple_ ? "(" : "[";
      for (size_t i = 0; i < arr_->size(); ++i) {
        if (i) out += ", ";
        out += (*arr_)[i].repr_at(style, depth + 1);
        budget_check_string(out.size());
      }
      if (is_tuple_ && arr_->size() == 1) out += ",";
      return out + (is_tuple_ ? ")" : "]");
    }
    case Kind::kObject: {
      std::string out = obj_->is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& kv : obj_->items()) {
        if (!first) out += ", ";
        first = false;
        out += obj_->key_value(kv.first).repr_at(style, depth + 1) + ": " + kv.second.repr_at(style, depth + 1);
        budget_check_string(out.size());
      }
      return out + (obj_->is_namespace ? "}>" : "}");
    }
    case Kind::kFunction: return "<function " + fn_->name + ">";
    default: return to_str(style);
  }
}

bool Value::equals(const Value& o) const { return equals_at(o, 0); }

bool Value::equals_at(const Value& o, int depth) const {
  check_value_depth(depth);
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return as_double() == o.as_double();
    return int_ == o.int_;
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined: case Kind::kNone: return true;
    case Kind::kString: return *str_ == *o.str_;
    case Kind::kArray: {
      if (arr_->size() != o.arr_->size()) return false;
      if (arr_ == o.arr_) return true;
      for (size_t i = 0; i < arr_->size(); ++i) if (!(*arr_)[i].equals_at((*o.arr_)[i], depth + 1)) return false;
      return true;
    }
    case Kind::kObject: {
      if (obj_ == o.obj_) return true;
      if (obj_->size() != o.obj_->size()) return false;
      for (const auto& kv : obj_->items()) {
        const Value* p = o.obj_->find(kv.first);
        if (!p || !kv.second.equals_at(*p, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kFunction: return fn_ == o.fn_;
    default: return false;
  }
}

bool Value::less(const Value& o) const { return less_at(o, 0); }

bool Value::less_at(const Value& o, int depth) const {
  check_value_depth(depth);
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return as_double() < o.as_double();
    return int_ < o.int_;
  }
  if (is_string() && o.is_string()) return *str_ < *o.str_;
  if (is_array() && o.is_array()) {
    size_t n = std::min(arr_->size(), o.arr_->size());
    for (size_t i = 0; i < n; ++i) {
      if ((*arr_)[i].less_at((*o.arr_)[i], depth + 1)) return true;
      if ((*o.arr_)[i].less_at((*arr_)[i], depth + 1)) return false;
    }
    return arr_->size() < o.arr_->size();
  }
  throw JinjaError(std::string("'<' not supported between instances of '") + type_name() + "' and '" +
                   o.type_name() + "'");
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) out += static_cast<char>(cp);
  else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<uint32_t> utf8_decode(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < cps.size(); ++i) utf8_append(out, cps[i]);
  return out;
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  auto cps = utf8_decode(s);
  for (uint32_t cp : cps) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char b[16];
        if (cp < 0x20) { std::snprintf(b, sizeof(b), "\\u%04x", cp); out += b; }
        else if (ensure_ascii && cp >= 0x7f) {
          if (cp >= 0x10000) {
            uint32_t v = cp - 0x10000;
            std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(b, sizeof(b), "\\u%04x", cp);
          }
          out += b;
        } else {
          utf8_append(out, cp);
        }
      }
    }
  }
  out += '"';
}

static void json_write(std::string& out, const Value& v, int indent, int depth, bool sort_keys, bool ensure_ascii,
                       const std::string& item_sep, const std::string& key_sep) {
  check_value_depth(depth);
  budget_check_string(out.size());
  auto newline = [&](int d) {
    budget_check_string(out.size() + 1 + static_cast<size_t>(indent) * d);
    out += '\n';
    out.append(static_cast<size_t>(indent) * d, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: case Value::Kind::kFunction: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += format_double(d);
      return;
    }
    case Value::Kind::kString: json_string(out, v.str(), ensure_ascii); return;
    case Value::Kind::kArray: {
      const Array& a = v.array();
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += item_sep;
        if (indent > 0) newline(depth + 1);
        json_write(out, a[i], indent, depth + 1, sort_keys, ensure_ascii, item_sep, key_sep);
      }
      if (indent > 0 && !a.empty()) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kObject: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.object().items()) items.push_back(&kv);
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (indent > 0) newline(depth + 1);
        json_string(out, items[i]->first, ensure_ascii);
        out += key_sep;
        json_write(out, items[i]->second, indent, depth + 1, sort_keys, ensure_ascii, item_sep, key_sep);
      }
      if (indent > 0 && !items.empty()) newline(depth);
      out += '}';
      return;
    }
  }
}

std::string to_json_text(const Value& v, int indent, bool sort_keys, bool ensure_ascii, const std::string& item_sep,
                         const std::string& key_sep) {
  std::string is = item_sep.empty() ? (indent > 0 ? "," : ", ") : item_sep;
  std::string ks = key_sep.empty() ? ": " : key_sep;
  std::string out;
  json_write(out, v, indent, 0, sort_keys, ensure_ascii, is, ks);
  return out;
}

}  // namespace ms::jinja
