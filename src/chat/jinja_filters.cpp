// jinja_filters.cpp: Jinja2's built-in filters that chat templates use, with
// Python semantics (e.g. `length` of undefined is 0, `string` of a list is its repr).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "chat/jinja_builtins.h"
#include "chat/jinja_limits.h"

namespace ms::jinja {
namespace {

// For arguments that can only be given by keyword (any number of positional
// arguments may come first: map('f', a1, ..., a200)).
constexpr size_t kKeywordOnly = SIZE_MAX;

std::string str_arg(const CallArgs& a, size_t i, const std::string& name, const std::string& def) {
  const Value* v = a.get(i, name);
  return v && !v->is_undefined() ? v->to_str() : def;
}

bool bool_arg(const CallArgs& a, size_t i, const std::string& name, bool def) {
  const Value* v = a.get(i, name);
  return v && !v->is_undefined() ? v->truthy() : def;
}

std::string ascii_lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string ascii_upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string require_string(const Value& v, const std::string& filter) {
  if (v.is_string()) return v.str();
  if (v.is_undefined()) return "";
  if (v.is_none() && filter != "string") return "None";
  return v.to_str();
}

// select/reject/selectattr/rejectattr: shared test dispatch.
Array select_items(const BuiltinEnv& env, const Value& input, CallArgs& args, bool by_attr, bool keep) {
  size_t k = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) throw JinjaError("selectattr/rejectattr need an attribute name");
    attr = args.positional[k++].to_str();
  }
  std::string test;
  if (k < args.positional.size()) test = args.positional[k++].to_str();
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<long>(std::min(k, args.positional.size())),
                              args.positional.end());
  if (!test.empty() && !has_test(test)) throw JinjaError("unknown test '" + test + "'");
  Array out;
  if (!input.truthy()) return out;  // jinja2: `if value:` before iterating
  for (const auto& item : iterate(input)) {
    budget_step();
    Value v = by_attr ? get_attribute_path(item, attr) : item;
    bool r = test.empty() ? v.truthy() : apply_test(env, test, v, test_args);
    if (r == keep) out.push_back(item);
  }
  return out;
}

Value sort_key(const Value& v, const std::string& attr, bool case_sensitive) {
  Value k = attr.empty() ? v : get_attribute_path(v, attr);
  if (!case_sensitive && k.is_string()) return Value(ascii_lower(k.str()));
  return k;
}

std::string capitalize(const std::string& s) {
  std::string r = ascii_lower(s);
  if (!r.empty()) r[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(r[0])));
  return r;
}

// Jinja's title: capitalise the first letter of each word, lowercase the rest.
std::string title_case(const std::string& s) {
  std::string r;
  bool start = true;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      start = true;
      r += c;
    } else {
      r += static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      start = false;
    }
  }
  return r;
}

std::string do_indent(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::string out;
  size_t pos = 0;
  bool first_line = true;
  while (true) {
    budget_check_string(out.size() + pad.size());
    size_t nl = s.find('\n', pos);
    std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    bool indent = first_line ? first : (blank || !line.empty());
    if (first_line && first && !blank && line.empty()) indent = first;
    if (indent) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    pos = nl + 1;
    first_line = false;
  }
  return out;
}

// Python %-formatting: %s %d %i %f %r %% with optional width/precision.
std::string percent_format(const std::string& fmt, const Array& vals) {
  std::string out;
  size_t vi = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') { out += fmt[i]; continue; }
    if (++i >= fmt.size()) throw JinjaError("incomplete format");
    if (fmt[i] == '%') { out += '%'; continue; }
    std::string spec = "%";
    while (i < fmt.size() && fmt[i] != '\0' && std::strchr("-+ #0123456789.", fmt[i])) spec += fmt[i++];
    if (i >= fmt.size()) throw JinjaError("incomplete format");
    // Widths and precisions past the buffer below would be cut anyway; huge
    // ones cost printf time (or overflow its int).
    if (spec.size() > 8) throw JinjaError("format spec '" + spec + "' is too long");
    char conv = fmt[i];
    if (vi >= vals.size()) throw JinjaError("not enough arguments for format string");
    const Value& v = vals[vi++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? v.to_str() : v.repr();
      std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), s.c_str());
      out += std::string(buf).size() >= s.size() ? std::string(buf) : s;
    } else if (conv == 'd' || conv == 'i') {
      std::snprintf(buf, sizeof(buf), (spec + "lld").c_str(), static_cast<long long>(v.as_int()));
      out += buf;
    } else if (conv == 'f' || conv == 'e' || conv == 'g') {
      std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.as_double());
      out += buf;
    } else {
      throw JinjaError(std::string("unsupported format character '") + conv + "'");
    }
    budget_check_string(out.size());
  }
  return out;
}

Value filter_tojson(const Value& input, CallArgs& args) {
  int indent = 0;
  if (const Value* v = args.get(0, "indent"); v && v->is_number()) {
    // Python accepts any width; past a few hundred it is only a way to make
    // the output huge (each level repeats it).
    const int64_t want = v->as_int();
    if (want > 1024) throw JinjaError("tojson indent " + std::to_string(want) + " is over the limit of 1024");
    indent = static_cast<int>(std::max<int64_t>(want, 0));
  }
  bool sort_keys = bool_arg(args, kKeywordOnly, "sort_keys", false);
  bool ensure_ascii = bool_arg(args, kKeywordOnly, "ensure_ascii", false);  // HF overrides tojson with ensure_ascii=False
  std::string item_sep, key_sep;
  if (const Value* v = args.get(kKeywordOnly, "separators"); v && v->is_array() && v->array().size() == 2) {
    item_sep = v->array()[0].to_str();
    key_sep = v->array()[1].to_str();
  }
  return Value(to_json_text(input, indent, sort_keys, ensure_ascii, item_sep, key_sep));
}

Value filter_round(const Value& input, CallArgs& args) {
  int64_t precision = 0;
  if (const Value* v = args.get(0, "precision")) precision = v->as_int();
  std::string method = str_arg(args, 1, "method", "common");
  double x = input.as_double(), scale = std::pow(10.0, static_cast<double>(precision));
  double r;
  if (method == "ceil") r = std::ceil(x * scale) / scale;
  else if (method == "floor") r = std::floor(x * scale) / scale;
  else r = std::round(x * scale) / scale;
  return Value(r);
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value apply_filter(const BuiltinEnv& env, const std::string& name, const Value& input, CallArgs& args) {
  if (name == "default" || name == "d") {
    bool boolean = bool_arg(args, 1, "boolean", false);
    bool use_default = input.is_undefined() || (boolean && !input.truthy());
    if (!use_default) return input;
    const Value* d = args.get(0, "default_value");
    return d ? *d : Value("");
  }
  if (name == "length" || name == "count") return Value(py_length(input));
  if (name == "string") return Value(input.to_str(env.repr));
  if (name == "safe" || name == "escape" || name == "e" || name == "forceescape") {
    if (name == "safe" || (input.is_safe() && name != "forceescape")) return Value::safe_string(input.to_str(env.repr));
    return Value::safe_string(html_escape(input.to_str(env.repr)));
  }
  if (name == "tojson") return filter_tojson(input, args);
  if (name == "trim") return Value(py_strip(require_string(input, name), args.get(0, "chars"), true, true));
  if (name == "lower") return Value(ascii_lower(require_string(input, name)));
  if (name == "upper") return Value(ascii_upper(require_string(input, name)));
  if (name == "capitalize") return Value(capitalize(require_string(input, name)));
  if (name == "title") return Value(title_case(require_string(input, name)));
  if (name == "replace") {
    CallArgs a = args;
    return get_method(env, Value(require_string(input, name)), "replace").call(a);
  }
  if (name == "wordcount") {
    std::string s = require_string(input, name);
    int64_t n = 0;
    bool in_word = false;
    for (char c : s) {
      bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  if (name == "center") {
    std::string s = require_string(input, name);
    int64_t width = args.get(0, "width") ? args.get(0, "width")->as_int() : 80;
    int64_t len = static_cast<int64_t>(utf8_decode(s).size());
    if (width <= len) return Value(s);
    budget_check_string(s.size() + static_cast<uint64_t>(width - len));
    int64_t total = width - len, left = total / 2 + (total & width & 1);
    return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
  }
  if (name == "indent") {
    std::string pad = "    ";
    if (const Value* w = args.get(0, "width")) {
      if (w->is_string()) {
        pad = w->str();
      } else {
        const int64_t n = std::max<int64_t>(w->as_int(), 0);
        budget_check_string(static_cast<uint64_t>(n));
        pad.assign(static_cast<size_t>(n), ' ');
      }
    }
    return Value(do_indent(require_string(input, name), pad, bool_arg(args, 1, "first", false),
                           bool_arg(args, 2, "blank", false)));
  }
  if (name == "format") {
    Array vals = args.positional;
    return Value(percent_format(require_string(input, name), vals));
  }
  if (name == "int") {
    const Value* d = args.get(0, "default");
    if (input.is_number()) return Value(input.as_int());
    if (input.is_string()) {
      try {
        size_t used = 0;
        std::string s = py_strip(input.str(), nullptr, true, true);
        int64_t v = std::stoll(s, &used, 10);
        if (used == s.size()) return Value(v);
        double dv = std::stod(s, &used);
        if (used == s.size()) return Value(Value(dv).as_int());
      } catch (...) {
      }
    }
    return d ? *d : Value(int64_t{0});
  }
  if (name == "float") {
    const Value* d = args.get(0, "default");
    if (input.is_number()) return Value(input.as_double());
    if (input.is_string()) {
      try {
        size_t used = 0;
        std::string s = py_strip(input.str(), nullptr, true, true);
        double v = std::stod(s, &used);
        if (used == s.size()) return Value(v);
      } catch (...) {
      }
    }
    return d ? *d : Value(0.0);
  }
  if (name == "abs") {
    if (!input.is_number()) throw JinjaError(std::string("bad operand type for abs(): '") + input.type_name() + "'");
    if (input.is_float()) return Value(std::fabs(input.as_double()));
    if (input.as_int() == INT64_MIN) throw JinjaError("integer overflow in abs() (integers are 64-bit here)");
    return Value(static_cast<int64_t>(std::llabs(input.as_int())));
  }
  if (name == "round") return filter_round(input, args);
  if (name == "first" || name == "last") {
    if (input.is_undefined()) return Value();
    Array items = iterate(input);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value(iterate(input));
  if (name == "reverse") {
    if (input.is_string()) {
      auto cps = utf8_decode(input.str());
      std::reverse(cps.begin(), cps.end());
      return Value(utf8_encode(cps, 0, cps.size()));
    }
    Array items = iterate(input);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "join") {
    std::string sep = str_arg(args, 0, "d", "");
    std::string attr = str_arg(args, 1, "attribute", "");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(input)) {
      budget_step();
      if (!first) out += sep;
      first = false;
      out += (attr.empty() ? item : get_attribute_path(item, attr)).to_str(env.repr);
      budget_check_string(out.size());
    }
    return Value(out);
  }
  if (name == "items") {
    if (input.is_undefined()) return Value(Array{});
    if (!input.is_object()) throw JinjaError(std::string("items filter expects a mapping, got ") + input.type_name());
    Array out;
    for (const auto& kv : input.object().items()) {
      out.push_back(Value::tuple({input.object().key_value(kv.first), kv.second}));
    }
    return Value(std::move(out));
  }
  if (name == "dictsort") {
    if (!input.is_object()) throw JinjaError("dictsort expects a mapping");
    bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
    bool by_value = str_arg(args, 1, "by", "key") == "value";
    bool reverse = bool_arg(args, 2, "reverse", false);
    Array out;
    for (const auto& kv : input.object().items()) {
      out.push_back(Value::tuple({input.object().key_value(kv.first), kv.second}));
    }
    std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
      Value ka = sort_key(a.array()[by_value ? 1 : 0], "", case_sensitive);
      Value kb = sort_key(b.array()[by_value ? 1 : 0], "", case_sensitive);
      return reverse ? kb.less(ka) : ka.less(kb);
    });
    return Value(std::move(out));
  }
  if (name == "sort") {
    bool reverse = bool_arg(args, 0, "reverse", false);
    bool case_sensitive = bool_arg(args, 1, "case_sensitive", false);
    std::string attr = str_arg(args, 2, "attribute", "");
    Array items = iterate(input);
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      Value ka = sort_key(a, attr, case_sensitive), kb = sort_key(b, attr, case_sensitive);
      return reverse ? kb.less(ka) : ka.less(kb);
    });
    return Value(std::move(items));
  }
  if (name == "unique") {
    bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
    std::string attr = str_arg(args, 1, "attribute", "");
    Array out, keys;
    for (const auto& item : iterate(input)) {
      Value k = sort_key(item, attr, case_sensitive);
      budget_step(static_cast<int64_t>(keys.size()) + 1);  // quadratic: each key against all kept
      bool seen = false;
      for (const auto& s : keys) seen = seen || s.equals(k);
      if (!seen) { keys.push_back(k); out.push_back(item); }
    }
    return Value(std::move(out));
  }
  if (name == "min" || name == "max" || name == "sum") {
    std::string attr = str_arg(args, name == "sum" ? 0 : 1, "attribute", "");
    Array items = iterate(input);
    if (name == "sum") {
      Value acc = args.get(1, "start") ? *args.get(1, "start") : Value(int64_t{0});
      for (const auto& it : items) {
        Value v = attr.empty() ? it : get_attribute_path(it, attr);
        if (!v.is_number() || !acc.is_number()) throw JinjaError("sum filter needs numbers");
        int64_t r = 0;
        if (acc.is_float() || v.is_float()) acc = Value(acc.as_double() + v.as_double());
        else if (__builtin_add_overflow(acc.as_int(), v.as_int(), &r)) throw JinjaError("integer overflow in sum");
        else acc = Value(r);
      }
      return acc;
    }
    bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
    if (items.empty()) return Value();
    Value best = items[0];
    for (const auto& it : items) {
      Value k = sort_key(it, attr, case_sensitive), kb = sort_key(best, attr, case_sensitive);
      if (name == "min" ? k.less(kb) : kb.less(k)) best = it;
    }
    return best;
  }
  if (name == "batch") {
    int64_t n = args.get(0, "linecount") ? args.get(0, "linecount")->as_int() : 1;
    if (n <= 0) throw JinjaError("batch size must be positive");
    budget_check_items(static_cast<uint64_t>(n));
    const Value* fill = args.get(1, "fill_with");
    Array out, cur;
    for (const auto& it : iterate(input)) {
      cur.push_back(it);
      if (static_cast<int64_t>(cur.size()) == n) { out.push_back(Value(cur)); cur.clear(); }
    }
    if (!cur.empty()) {
      if (fill) while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
      out.push_back(Value(cur));
    }
    return Value(std::move(out));
  }
  if (name == "select" || name == "reject") return Value(select_items(env, input, args, false, name == "select"));
  if (name == "selectattr" || name == "rejectattr") {
    return Value(select_items(env, input, args, true, name == "selectattr"));
  }
  if (name == "map") {
    Array out;
    if (!input.truthy()) return Value(std::move(out));  // jinja2 maps a falsy input to nothing
    const Value* attr = args.get(kKeywordOnly, "attribute");
    if (attr) {
      const Value* def = args.get(kKeywordOnly, "default");
      for (const auto& it : iterate(input)) {
        Value v = get_attribute_path(it, attr->to_str());
        out.push_back(v.is_undefined() && def ? *def : v);
      }
      return Value(std::move(out));
    }
    if (args.positional.empty()) throw JinjaError("map needs a filter name or attribute=");
    // map('map', 'map', ...) nests once per argument: bounded like any evaluation.
    EvalDepth depth(RenderBudget::current());
    std::string filter = args.positional[0].to_str();
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const auto& it : iterate(input)) {
      budget_step(1 + static_cast<int64_t>(rest.positional.size()));  // the copy of the arguments
      CallArgs a = rest;
      out.push_back(apply_filter(env, filter, it, a));
    }
    return Value(std::move(out));
  }
  if (name == "attr") return get_item(input, Value(str_arg(args, 0, "name", "")));
  throw JinjaError("unknown filter '" + name + "'");
}

int64_t py_length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8_decode(v.str()).size());
    case Value::Kind::kArray: return static_cast<int64_t>(v.array().size());
    case Value::Kind::kObject: return static_cast<int64_t>(v.object().size());
    default: throw JinjaError(std::string("object of type '") + v.type_name() + "' has no len()");
  }
}

Array iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kArray: return v.array();
    case Value::Kind::kObject: {
      Array keys;
      for (const auto& kv : v.object().items()) keys.push_back(v.object().key_value(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      // One value (~100 bytes) per character: check the count before building.
      std::vector<uint32_t> cps = utf8_decode(v.str());
      budget_check_items(cps.size());
      Array chars;
      chars.reserve(cps.size());
      for (uint32_t cp : cps) {
        std::string s;
        utf8_append(s, cp);
        chars.push_back(Value(s));
      }
      return chars;
    }
    default: throw JinjaError(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

Value get_item(const Value& c, const Value& key) {
  if (c.is_object()) {
    if (key.is_string()) {
      if (const Value* v = c.object().find(key.str())) return *v;
      return Value();
    }
    if (const Value* v = c.object().find(key.to_str())) return *v;
    return Value();
  }
  if ((c.is_array() || c.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (c.is_array()) {
      int64_t n = static_cast<int64_t>(c.array().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return c.array()[static_cast<size_t>(i)];
    }
    auto cps = utf8_decode(c.str());
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    return Value(utf8_encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
  }
  return Value();
}

Value get_attribute_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    cur = numeric && cur.is_array() ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<uint32_t> set;
  bool ws = !chars || chars->is_none() || chars->is_undefined();
  if (!ws) set = utf8_decode(chars->to_str());
  auto strip_me = [&](uint32_t c) {
    if (ws) return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1c ||
                   c == 0x1d || c == 0x1e || c == 0x1f || c == 0x85 || c == 0xa0 || c == 0x3000 || c == 0x2028 ||
                   c == 0x2029 || (c >= 0x2000 && c <= 0x200a);
    return std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) while (b < e && strip_me(cps[b])) ++b;
  if (right) while (e > b && strip_me(cps[e - 1])) --e;
  return utf8_encode(cps, b, e);
}

}  // namespace ms::jinja
