// jinja_methods.cpp: Python methods templates call on values (str.strip,
// str.split, dict.items, list.append ...) and the global functions
// (range, namespace, dict, raise_exception, strftime_now).
#include <algorithm>
#include <cctype>
#include <ctime>

#include "chat/jinja_builtins.h"
#include "chat/jinja_limits.h"

namespace ms::jinja {
namespace {


std::string need_str(const CallArgs& a, size_t i, const std::string& name, const std::string& method) {
  const Value* v = a.get(i, name);
  if (!v || !v->is_string()) throw JinjaError(method + "() argument '" + name + "' must be a string");
  return v->str();
}

bool is_py_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

Array py_split(const std::string& s, const Value* sep_v, int64_t maxsplit) {
  Array out;
  // Every piece is a value of ~100 bytes: count them as they are made.
  auto push = [&out](std::string piece) {
    budget_check_items(out.size() + 1);
    out.push_back(Value(std::move(piece)));
  };
  if (!sep_v || sep_v->is_none() || sep_v->is_undefined()) {
    size_t i = 0, n = s.size();
    while (true) {
      while (i < n && is_py_space(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = n;
        while (e > i && is_py_space(static_cast<unsigned char>(s[e - 1]))) --e;
        push(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < n && !is_py_space(static_cast<unsigned char>(s[j]))) ++j;
      push(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  std::string sep = sep_v->to_str();
  if (sep.empty()) throw JinjaError("empty separator");
  size_t pos = 0;
  while (true) {
    size_t f = s.find(sep, pos);
    if (f == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit)) {
      push(s.substr(pos));
      return out;
    }
    push(s.substr(pos, f - pos));
    pos = f + sep.size();
  }
}

// str.format: {} {0} {name} and {{ }} escapes; format specs are not supported.
std::string py_format(const std::string& fmt, const CallArgs& a, ReprStyle style) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') { out += '{'; ++i; continue; }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') { out += '}'; ++i; continue; }
    if (c != '{') { out += c; continue; }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw JinjaError("str.format: unmatched '{'");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find(':') != std::string::npos || field.find('!') != std::string::npos) {
      throw JinjaError("str.format: format spec '" + field + "' is unsupported");
    }
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_idx < a.positional.size() ? &a.positional[auto_idx] : nullptr;
      ++auto_idx;
    } else if (std::all_of(field.begin(), field.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
      size_t k = std::stoul(field);
      v = k < a.positional.size() ? &a.positional[k] : nullptr;
    } else {
      for (const auto& kv : a.keyword) if (kv.first == field) v = &kv.second;
    }
    if (!v) throw JinjaError("str.format: missing argument '" + field + "'");
    out += v->to_str(style);
    budget_check_string(out.size());
    i = close;
  }
  return out;
}

int64_t norm_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

Value string_method(const BuiltinEnv& env, const Value& self, const std::string& name) {
  const std::string s = self.str();
  auto fn = [&](auto body) { return Value::function(name, body); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return fn([s, l, r](CallArgs& a) { return Value(py_strip(s, a.get(0, "chars"), l, r)); });
  }
  if (name == "split" || name == "rsplit") {
    bool rs = name == "rsplit";
    return fn([s, rs](CallArgs& a) {
      const Value* m = a.get(1, "maxsplit");
      int64_t maxsplit = m ? m->as_int() : -1;
      if (rs && maxsplit >= 0) {
        // rsplit with a limit: split from the right.
        Array all = py_split(s, a.get(0, "sep"), -1);
        if (static_cast<int64_t>(all.size()) <= maxsplit + 1) return Value(all);
        const Value* sep = a.get(0, "sep");
        std::string j = sep && sep->is_string() ? sep->str() : " ";
        size_t head = all.size() - static_cast<size_t>(maxsplit);
        std::string first;
        for (size_t i = 0; i < head; ++i) first += (i ? j : "") + all[i].str();
        Array out{Value(first)};
        out.insert(out.end(), all.begin() + static_cast<long>(head), all.end());
        return Value(out);
      }
      return Value(py_split(s, a.get(0, "sep"), maxsplit));
    });
  }
  if (name == "splitlines") {
    return fn([s](CallArgs& a) {
      bool keep = a.get(0, "keepends") && a.get(0, "keepends")->truthy();
      Array out;
      size_t pos = 0;
      while (pos < s.size()) {
        budget_check_items(out.size() + 1);
        size_t e = s.find_first_of("\r\n", pos);
        if (e == std::string::npos) { out.push_back(Value(s.substr(pos))); break; }
        size_t len = (s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1;
        out.push_back(Value(s.substr(pos, (keep ? e + len : e) - pos)));
        pos = e + len;
      }
      return Value(out);
    });
  }
  if (name == "startswith" || name == "endswith") {
    bool starts = name == "startswith";
    return fn([s, starts, name](CallArgs& a) {
      const Value* p = a.get(0, "prefix");
      if (!p) throw JinjaError(name + "() needs an argument");
      Array cands = p->is_array() ? p->array() : Array{*p};
      for (const auto& c : cands) {
        if (!c.is_string()) throw JinjaError(name + "() argument must be str or tuple of str");
        const std::string& x = c.str();
        if (x.size() <= s.size() && (starts ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0))
          return Value(true);
      }
      return Value(false);
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return fn([s, name, env](CallArgs&) {
      CallArgs none;
      return apply_filter(env, name, Value(s), none);
    });
  }
  if (name == "replace") {
    return fn([s](CallArgs& a) {
      std::string from = need_str(a, 0, "old", "replace"), to = need_str(a, 1, "new", "replace");
      const Value* c = a.get(2, "count");
      int64_t count = c ? c->as_int() : -1;
      std::string out;
      if (from.empty()) {
        // Python inserts `to` between characters.
        auto cps = utf8_decode(s);
        int64_t done = 0;
        for (size_t i = 0; i <= cps.size(); ++i) {
          if (count < 0 || done < count) { out += to; ++done; }
          if (i < cps.size()) utf8_append(out, cps[i]);
          budget_check_string(out.size());
        }
        return Value(out);
      }
      size_t pos = 0;
      int64_t done = 0;
      while (true) {
        size_t f = s.find(from, pos);
        if (f == std::string::npos || (count >= 0 && done >= count)) { out += s.substr(pos); break; }
        out += s.substr(pos, f - pos) + to;
        budget_check_string(out.size());
        pos = f + from.size();
        ++done;
      }
      return Value(out);
    });
  }
  if (name == "format") return fn([s, env](CallArgs& a) { return Value(py_format(s, a, env.repr)); });
  if (name == "join") {
    return fn([s, env](CallArgs& a) {
      const Value* it = a.get(0, "iterable");
      std::string out;
      bool first = true;
      for (const auto& x : iterate(it ? *it : Value())) {
        if (!x.is_string()) throw JinjaError("str.join: expected str instance, got " + std::string(x.type_name()));
        if (!first) out += s;
        first = false;
        out += x.str();
        budget_check_string(out.size());
      }
      return Value(out);
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    return fn([s, name](CallArgs& a) {
      std::string sub = need_str(a, 0, "sub", name);
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(utf8_decode(s).size() + 1));
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value(n);
      }
      size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (name == "index") throw JinjaError("substring not found");
        return Value(int64_t{-1});
      }
      return Value(static_cast<int64_t>(utf8_decode(s.substr(0, p)).size()));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    return fn([s, name](CallArgs&) {
      if (s.empty()) return Value(false);
      bool cased = false;
      for (char ch : s) {
        unsigned char u = static_cast<unsigned char>(ch);
        if (name == "isdigit" && !std::isdigit(u)) return Value(false);
        if (name == "isalpha" && !std::isalpha(u)) return Value(false);
        if (name == "isalnum" && !std::isalnum(u)) return Value(false);
        if (name == "isspace" && !is_py_space(u)) return Value(false);
        if (name == "islower" && std::isupper(u)) return Value(false);
        if (name == "isupper" && std::islower(u)) return Value(false);
        cased = cased || std::isalpha(u);
      }
      return Value(name == "islower" || name == "isupper" ? cased : true);
    });
  }
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  Value list = self;  // shares the array
  auto fn = [&](auto body) { return Value::function(name, body); };
  // In-place changes re-charge the list to the render's budget (size limits).
  if (name == "append") {
    return fn([list](CallArgs& a) {
      list.array().push_back(a.positional.empty() ? Value() : a.positional[0]);
      list.update_charge();
      return Value::none();
    });
  }
  if (name == "extend") {
    return fn([list](CallArgs& a) {
      Array more = iterate(a.positional.empty() ? Value() : a.positional[0]);  // a copy: x.extend(x) works
      budget_check_items(list.array().size() + more.size());
      list.array().insert(list.array().end(), more.begin(), more.end());
      list.update_charge();
      return Value::none();
    });
  }
  if (name == "insert") {
    return fn([list](CallArgs& a) {
      if (a.positional.size() < 2) throw JinjaError("insert() needs 2 arguments");
      Array& arr = list.array();
      int64_t n = static_cast<int64_t>(arr.size());
      int64_t i = std::clamp<int64_t>(norm_index(a.positional[0].as_int(), n), 0, n);
      arr.insert(arr.begin() + i, a.positional[1]);
      list.update_charge();
      return Value::none();
    });
  }
  if (name == "pop") {
    return fn([list](CallArgs& a) {
      Array& arr = list.array();
      if (arr.empty()) throw JinjaError("pop from empty list");
      int64_t n = static_cast<int64_t>(arr.size());
      int64_t i = a.positional.empty() ? n - 1 : norm_index(a.positional[0].as_int(), n);
      if (i < 0 || i >= n) throw JinjaError("pop index out of range");
      Value v = arr[static_cast<size_t>(i)];
      arr.erase(arr.begin() + i);
      list.update_charge();
      return v;
    });
  }
  if (name == "index" || name == "count") {
    return fn([list, name](CallArgs& a) {
      Value x = a.positional.empty() ? Value() : a.positional[0];
      int64_t n = 0;
      const Array& arr = list.array();
      for (size_t i = 0; i < arr.size(); ++i) {
        if (!arr[i].equals(x)) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") throw JinjaError("value is not in list");
      return Value(n);
    });
  }
  if (name == "remove") {
    return fn([list](CallArgs& a) {
      Array& arr = list.array();
      for (size_t i = 0; i < arr.size(); ++i) {
        if (!a.positional.empty() && arr[i].equals(a.positional[0])) {
          arr.erase(arr.begin() + static_cast<long>(i));
          list.update_charge();
          return Value::none();
        }
      }
      throw JinjaError("list.remove(x): x not in list");
    });
  }
  if (name == "copy") return fn([list](CallArgs&) { return Value(list.array()); });
  if (name == "reverse") return fn([list](CallArgs&) { std::reverse(list.array().begin(), list.array().end()); return Value::none(); });
  return Value();
}

Value dict_method(const Value& self, const std::string& name) {
  Value dict = self;
  auto fn = [&](auto body) { return Value::function(name, body); };
  if (name == "items" || name == "keys" || name == "values") {
    return fn([dict, name](CallArgs&) {
      Array out;
      for (const auto& kv : dict.object().items()) {
        Value key = dict.object().key_value(kv.first);
        if (name == "items") out.push_back(Value::tuple({key, kv.second}));
        else out.push_back(name == "keys" ? key : kv.second);
      }
      return Value(out);
    });
  }
  if (name == "get") {
    return fn([dict](CallArgs& a) {
      if (a.positional.empty()) throw JinjaError("get() needs a key");
      Value v = get_item(dict, a.positional[0]);
      if (!v.is_undefined()) return v;
      return a.positional.size() > 1 ? a.positional[1] : Value::none();
    });
  }
  if (name == "pop") {
    return fn([dict](CallArgs& a) {
      if (a.positional.empty()) throw JinjaError("pop() needs a key");
      std::string k = a.positional[0].to_str();
      Value v = get_item(dict, Value(k));
      if (v.is_undefined()) {
        if (a.positional.size() > 1) return a.positional[1];
        throw JinjaError("KeyError: '" + k + "'");
      }
      dict.object().erase(k);
      dict.update_charge();
      return v;
    });
  }
  if (name == "update") {
    return fn([dict](CallArgs& a) {
      if (!a.positional.empty() && a.positional[0].is_object()) {
        // A copy of the items: d.update(d) must not iterate what it grows.
        const auto items = a.positional[0].object().items();
        for (const auto& kv : items) {
          budget_step(static_cast<int64_t>(dict.object().size()) + 1);  // Object::set searches linearly
          dict.object().set(kv.first, kv.second);
        }
      }
      for (const auto& kv : a.keyword) dict.object().set(kv.first, kv.second);
      dict.update_charge();
      return Value::none();
    });
  }
  if (name == "setdefault") {
    return fn([dict](CallArgs& a) {
      if (a.positional.empty()) throw JinjaError("setdefault() needs a key");
      std::string k = a.positional[0].to_str();
      if (const Value* v = dict.object().find(k)) return *v;
      Value d = a.positional.size() > 1 ? a.positional[1] : Value::none();
      dict.object().set(k, d);
      dict.update_charge();
      return d;
    });
  }
  if (name == "copy") return fn([dict](CallArgs&) { return Value(Object(dict.object())); });
  return Value();
}

std::string strftime_py(const std::string& fmt, const std::tm& tm) {
  char buf[256];
  size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
  return std::string(buf, n);
}

}  // namespace

Value get_method(const BuiltinEnv& env, const Value& self, const std::string& name) {
  if (self.is_string()) return string_method(env, self, name);
  if (self.is_array()) return list_method(self, name);
  if (self.is_object()) return dict_method(self, name);
  return Value();
}

void install_globals(Object& g, const RenderOptions& options) {
  g.set("range", Value::function("range", [](CallArgs& a) {
    int64_t start = 0, stop = 0, step = 1;
    const auto& p = a.positional;
    if (p.empty() || p.size() > 3) throw JinjaError("range expected 1 to 3 arguments");
    for (const auto& v : p) if (!v.is_int() && !v.is_bool()) throw JinjaError(std::string("range() needs integers, got ") + v.type_name());
    if (p.size() == 1) stop = p[0].as_int();
    else { start = p[0].as_int(); stop = p[1].as_int(); }
    if (p.size() == 3) step = p[2].as_int();
    if (step == 0) throw JinjaError("range() arg 3 must not be zero");
    // range(10**12): the length is checked before anything is built, in
    // unsigned arithmetic (stop - start may not fit int64).
    uint64_t span = 0, count = 0;
    if (step > 0 && stop > start) span = static_cast<uint64_t>(stop) - static_cast<uint64_t>(start);
    if (step < 0 && start > stop) span = static_cast<uint64_t>(start) - static_cast<uint64_t>(stop);
    const uint64_t abs_step = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
    if (span > 0) count = (span - 1) / abs_step + 1;
    budget_check_items(count);
    Array out;
    out.reserve(count);
    uint64_t v = static_cast<uint64_t>(start);  // modular: C++20 converts back exactly
    for (uint64_t k = 0; k < count; ++k, v += static_cast<uint64_t>(step)) out.push_back(Value(static_cast<int64_t>(v)));
    return Value(out);
  }));
  g.set("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
    throw TemplateRaised(a.positional.empty() ? "raise_exception called" : a.positional[0].to_str());
  }));
  auto make_dict = [](CallArgs& a, bool ns) {
    Object o;
    o.is_namespace = ns;
    for (const auto& v : a.positional) {
      if (v.is_object()) for (const auto& kv : v.object().items()) o.set(kv.first, kv.second);
    }
    for (const auto& kv : a.keyword) o.set(kv.first, kv.second);
    return Value(std::move(o));
  };
  g.set("namespace", Value::function("namespace", [make_dict](CallArgs& a) { return make_dict(a, true); }));
  g.set("dict", Value::function("dict", [make_dict](CallArgs& a) { return make_dict(a, false); }));
  std::optional<std::tm> fixed = options.now;
  g.set("strftime_now", Value::function("strftime_now", [fixed](CallArgs& a) {
    std::tm tm{};
    if (fixed) {
      tm = *fixed;
    } else {
      std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    return Value(strftime_py(a.positional.empty() ? "" : a.positional[0].to_str(), tm));
  }));
}

}  // namespace ms::jinja
