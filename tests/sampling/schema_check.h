// A small JSON-schema validator for the subset the compiler supports, used
// by the tests as an oracle independent of the grammar: what a constrained
// walk produced must parse and validate here.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ms::test {

using OJson = nlohmann::ordered_json;

inline size_t utf8_chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline const OJson* resolve_ref(const OJson& root, const std::string& ref) {
  if (ref == "#") return &root;
  try {
    return &root.at(OJson::json_pointer(ref.substr(1)));
  } catch (...) {
    return nullptr;
  }
}

// True when `v` is valid against `s` (root: the document $refs resolve in).
inline bool schema_valid(const OJson& v, const OJson& s, const OJson& root, int depth = 0) {
  if (depth > 200) return false;
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const OJson* t = resolve_ref(root, s["$ref"].get<std::string>());
    return t && schema_valid(v, *t, root, depth + 1);
  }
  for (const char* comb : {"anyOf", "oneOf"})
    if (s.contains(comb)) {
      for (const OJson& alt : s[comb])
        if (schema_valid(v, alt, root, depth + 1)) return true;
      return s.value("nullable", false) && v.is_null();
    }
  if (s.contains("allOf"))
    for (const OJson& alt : s["allOf"])
      if (!schema_valid(v, alt, root, depth + 1)) return false;
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
  if (s.contains("type")) {
    std::vector<OJson> types = s["type"].is_array() ? std::vector<OJson>(s["type"].begin(), s["type"].end())
                                                    : std::vector<OJson>{s["type"]};
    if (s.value("nullable", false)) types.push_back("null");
    bool ok = false;
    for (const OJson& t : types) {
      const std::string n = t.get<std::string>();
      ok = ok || (n == "string" && v.is_string()) || (n == "boolean" && v.is_boolean()) ||
           (n == "null" && v.is_null()) || (n == "object" && v.is_object()) || (n == "array" && v.is_array()) ||
           (n == "number" && v.is_number()) || (n == "integer" && v.is_number_integer());
    }
    if (!ok) return false;
  }
  if (v.is_string()) {
    const size_t n = utf8_chars(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const OJson& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    const OJson props = s.value("properties", OJson::object());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (!schema_valid(it.value(), props[it.key()], root, depth + 1)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!schema_valid(it.value(), s["additionalProperties"], root, depth + 1)) return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    size_t start = 0;
    if (s.contains("prefixItems")) {
      const OJson& pre = s["prefixItems"];
      for (; start < pre.size() && start < v.size(); ++start)
        if (!schema_valid(v[start], pre[start], root, depth + 1)) return false;
    }
    if (s.contains("items"))
      for (size_t i = start; i < v.size(); ++i)
        if (!schema_valid(v[i], s["items"], root, depth + 1)) return false;
  }
  return true;
}

}  // namespace ms::test
