// The JSON-schema walk; see json_schema.h for the subset.
#include "sampling/json_schema.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "sampling/json_emitters.h"
#include "sampling/json_regex.h"

namespace ms {
namespace {

using Json = nlohmann::ordered_json;

// Longest array a schema may demand or allow by minItems / maxItems when
// the bound has to be unrolled into states.
constexpr int64_t kMaxItemsBound = 1024;

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"title",     "description", "default",    "examples",
                                          "$comment",  "$schema",     "$id",        "deprecated",
                                          "readOnly",  "writeOnly",   "discriminator", "$defs",
                                          "definitions"};
  return k;
}

const std::set<std::string>& constraint_keywords() {
  static const std::set<std::string> k = {
      "type",      "nullable",  "enum",        "const",    "anyOf",      "oneOf",      "allOf",
      "$ref",      "properties", "required",   "additionalProperties",   "items",      "prefixItems",
      "minItems",  "maxItems",  "uniqueItems", "minLength", "maxLength", "minimum",    "maximum",
      "exclusiveMinimum", "exclusiveMaximum", "format", "pattern"};
  return k;
}

std::string where(const std::string& path) { return path.empty() ? "/" : path; }

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

bool value_has_type(const Json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    const double d = v.get<double>();
    return std::isfinite(d) && d == std::floor(d);
  }
  return false;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& opt, JsonEmitter& e)
      : root_(root), opt_(opt), e_(e), b_(e.builder()) {}

  Status emit(const Json& node, const std::string& path, int from, int to, int depth);

 private:
  Status check_keywords(const Json& node, const std::string& path);
  Result<std::vector<std::string>> types_of(const Json& node, const std::string& path);
  Result<const Json*> resolve(const std::string& ref, const std::string& path);
  Status emit_ref(const std::string& ref, const std::string& path, int from, int to, int depth);
  Status emit_typed(const Json& node, const std::string& type, const std::string& path, int from, int to, int depth);
  Status emit_object(const Json& node, const std::string& path, int from, int to, int depth);
  Status emit_array(const Json& node, const std::string& path, int from, int to, int depth);
  Status emit_items(const Json* item, const std::string& item_path, int64_t min, int64_t max, int from, int to,
                    int depth);
  Status emit_integer(const Json& node, const std::string& path, int from, int to);
  Result<int64_t> bound(const Json& node, const char* key, const std::string& path, int64_t unset);
  int st(int from) { return e_.state(b_.rule_of_state(from)); }

  const Json& root_;
  const JsonSchemaOptions& opt_;
  JsonEmitter& e_;
  GrammarBuilder& b_;
  std::vector<std::string> active_refs_;  // $refs being inlined (outermost first)
  std::map<std::string, int> ref_rules_;  // recursive $ref -> its rule
  int inlined_ = 0;
};

Status SchemaCompiler::check_keywords(const Json& node, const std::string& path) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string& k = it.key();
    if (annotation_keywords().count(k) || constraint_keywords().count(k)) continue;
    return invalid_argument("keyword '" + k + "' at " + where(path) + " is not supported");
  }
  if (node.contains("uniqueItems") && node["uniqueItems"] != false)
    return invalid_argument("keyword 'uniqueItems' at " + where(path) + " is not supported");
  return Status::ok();
}

Result<std::vector<std::string>> SchemaCompiler::types_of(const Json& node, const std::string& path) {
  static const std::set<std::string> known = {"string", "number", "integer", "boolean", "null", "object", "array"};
  std::vector<std::string> types;
  if (auto t = node.find("type"); t != node.end()) {
    std::vector<Json> list = t->is_array() ? std::vector<Json>(t->begin(), t->end()) : std::vector<Json>{*t};
    if (list.empty()) return invalid_argument("'type' at " + where(path) + " is an empty list");
    for (const Json& x : list) {
      if (!x.is_string() || !known.count(x.get<std::string>()))
        return invalid_argument("'type' at " + where(path) + " must name JSON types, got " + x.dump());
      if (std::find(types.begin(), types.end(), x.get<std::string>()) == types.end())
        types.push_back(x.get<std::string>());
    }
  } else {
    auto has = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys)
        if (node.contains(k)) return true;
      return false;
    };
    if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (has({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
    if (has({"minLength", "maxLength", "format", "pattern"})) types.push_back("string");
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
      return invalid_argument("numeric bounds without 'type' at " + where(path) + " are not supported");
  }
  if (auto n = node.find("nullable"); n != node.end()) {
    if (!n->is_boolean()) return invalid_argument("'nullable' at " + where(path) + " must be a boolean");
    if (n->get<bool>() && !types.empty() && std::find(types.begin(), types.end(), "null") == types.end())
      types.push_back("null");
  }
  return types;
}

Status SchemaCompiler::emit(const Json& node, const std::string& path, int from, int to, int depth) {
  if (depth > opt_.max_schema_depth)
    return invalid_argument("the schema nests deeper than " + std::to_string(opt_.max_schema_depth) + " levels at " +
                            where(path));
  if (b_.over_budget(opt_.limits)) return invalid_argument("the schema is too large to compile into a grammar");
  if (node.is_boolean()) {
    if (!node.get<bool>()) return invalid_argument("the schema at " + where(path) + " is 'false': no value is valid");
    e_.any_value(from, to);
    return Status::ok();
  }
  if (!node.is_object()) return invalid_argument("the schema at " + where(path) + " must be an object or a boolean");
  MS_RETURN_IF_ERROR(check_keywords(node, path));
  auto siblings_except = [&](std::initializer_list<const char*> allowed) -> std::string {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (annotation_keywords().count(it.key())) continue;
      if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return it.key() == a; }) != allowed.end())
        continue;
      return it.key();
    }
    return "";
  };
  if (auto r = node.find("$ref"); r != node.end()) {
    if (!r->is_string()) return invalid_argument("'$ref' at " + where(path) + " must be a string");
    if (std::string k = siblings_except({"$ref"}); !k.empty())
      return invalid_argument("keyword '" + k + "' next to '$ref' at " + where(path) + " is not supported");
    return emit_ref(r->get<std::string>(), path, from, to, depth);
  }
  if (auto a = node.find("allOf"); a != node.end()) {
    if (!a->is_array() || a->size() != 1)
      return invalid_argument("'allOf' at " + where(path) + " is supported only with exactly one schema");
    if (std::string k = siblings_except({"allOf"}); !k.empty())
      return invalid_argument("keyword '" + k + "' next to 'allOf' at " + where(path) + " is not supported");
    return emit((*a)[0], path + "/allOf/0", from, to, depth + 1);
  }
  for (const char* comb : {"anyOf", "oneOf"}) {
    auto a = node.find(comb);
    if (a == node.end()) continue;
    if (!a->is_array() || a->empty())
      return invalid_argument("'" + std::string(comb) + "' at " + where(path) + " must be a non-empty array");
    if (std::string k = siblings_except({comb, "nullable"}); !k.empty())
      return invalid_argument("keyword '" + k + "' next to '" + comb + "' at " + where(path) + " is not supported");
    for (size_t i = 0; i < a->size(); ++i)
      MS_RETURN_IF_ERROR(emit((*a)[i], path + "/" + comb + "/" + std::to_string(i), from, to, depth + 1));
    if (node.value("nullable", false)) e_.null(from, to);
    return Status::ok();
  }
  MS_ASSIGN_OR_RETURN(std::vector<std::string> types, types_of(node, path));
  auto type_ok = [&](const Json& v) {
    return types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) {
             return value_has_type(v, t);
           });
  };
  if (node.contains("const") || node.contains("enum")) {
    if (std::string k = siblings_except({"const", "enum", "type", "nullable"}); !k.empty())
      return invalid_argument("keyword '" + k + "' next to 'enum' / 'const' at " + where(path) + " is not supported");
    std::vector<Json> values;
    if (auto c = node.find("const"); c != node.end()) values.push_back(*c);
    if (auto en = node.find("enum"); en != node.end()) {
      if (!en->is_array() || en->empty())
        return invalid_argument("'enum' at " + where(path) + " must be a non-empty array");
      if (node.contains("const")) {  // both: the const, if the enum lists it
        if (std::find(en->begin(), en->end(), values[0]) == en->end()) values.clear();
      } else {
        values.assign(en->begin(), en->end());
      }
    }
    int emitted = 0;
    for (const Json& v : values) {
      if (!type_ok(v) && !(v.is_null() && node.value("nullable", false))) continue;
      e_.lit(from, v.dump(), to);
      ++emitted;
    }
    if (emitted == 0) return invalid_argument("'enum' / 'const' at " + where(path) + " admits no value of its type");
    return Status::ok();
  }
  if (types.empty()) {
    e_.any_value(from, to);
    return Status::ok();
  }
  for (const std::string& t : types) MS_RETURN_IF_ERROR(emit_typed(node, t, path, from, to, depth));
  return Status::ok();
}

Result<const Json*> SchemaCompiler::resolve(const std::string& ref, const std::string& path) {
  const std::string ptr = ref.substr(1);
  const Json* cur = &root_;
  size_t pos = 0;
  while (pos < ptr.size()) {
    if (ptr[pos] != '/') return invalid_argument("bad '$ref' \"" + ref + "\" at " + where(path));
    const size_t next = ptr.find('/', pos + 1);
    const std::string tok = ptr.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    pos = next == std::string::npos ? ptr.size() : next;
    std::string key;  // ~1 -> '/', ~0 -> '~'
    for (size_t i = 0; i < tok.size(); ++i) {
      if (tok[i] == '~' && i + 1 < tok.size() && (tok[i + 1] == '0' || tok[i + 1] == '1')) {
        key += tok[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        key += tok[i];
      }
    }
    const bool index = !key.empty() && key.size() < 10 && key.find_first_not_of("0123456789") == std::string::npos;
    if (cur->is_object() && cur->contains(key))
      cur = &(*cur)[key];
    else if (cur->is_array() && index && std::stoul(key) < cur->size())
      cur = &(*cur)[std::stoul(key)];
    else
      return invalid_argument("'$ref' \"" + ref + "\" at " + where(path) + " points to nothing");
  }
  return cur;
}

Status SchemaCompiler::emit_ref(const std::string& ref, const std::string& path, int from, int to, int depth) {
  if (ref.empty() || ref[0] != '#')
    return invalid_argument("'$ref' \"" + ref + "\" at " + where(path) + ": only local references (#...) are supported");
  const std::string ptr = ref.substr(1);
  MS_ASSIGN_OR_RETURN(const Json* target, resolve(ref, path));
  if (std::find(active_refs_.begin(), active_refs_.end(), ptr) != active_refs_.end()) {
    // Recursion: the target becomes a rule of its own, called from here
    // (its body is emitted once, when the rule is created).
    auto it = ref_rules_.find(ptr);
    if (it == ref_rules_.end()) {
      const int r = b_.add_rule();
      it = ref_rules_.emplace(ptr, r).first;
      MS_RETURN_IF_ERROR(emit(*target, ptr, b_.rule_start(r), b_.rule_end(r), depth + 1));
    }
    b_.call(from, it->second, to);
    return Status::ok();
  }
  if (++inlined_ > opt_.max_ref_inlining)
    return invalid_argument("the schema expands more than " + std::to_string(opt_.max_ref_inlining) +
                            " '$ref's; it is too large to compile");
  active_refs_.push_back(ptr);
  Status st = emit(*target, ptr, from, to, depth + 1);
  active_refs_.pop_back();
  return st;
}

Result<int64_t> SchemaCompiler::bound(const Json& node, const char* key, const std::string& path, int64_t unset) {
  auto it = node.find(key);
  if (it == node.end()) return unset;
  if (!it->is_number_integer() || it->get<int64_t>() < 0)
    return invalid_argument("'" + std::string(key) + "' at " + where(path) + " must be a non-negative integer");
  return it->get<int64_t>();
}

Status SchemaCompiler::emit_typed(const Json& node, const std::string& type, const std::string& path, int from,
                                  int to, int depth) {
  if (type == "object") return emit_object(node, path, from, to, depth);
  if (type == "array") return emit_array(node, path, from, to, depth);
  if (type == "string") {
    MS_ASSIGN_OR_RETURN(int64_t lo, bound(node, "minLength", path, 0));
    MS_ASSIGN_OR_RETURN(int64_t hi, bound(node, "maxLength", path, -1));
    if (lo > kMaxStringLengthBound || hi > kMaxStringLengthBound)
      return invalid_argument("'minLength' / 'maxLength' at " + where(path) + " above " +
                              std::to_string(kMaxStringLengthBound) + " are not supported");
    if (hi >= 0 && hi < lo) return invalid_argument("'maxLength' < 'minLength' at " + where(path));
    std::vector<StringPart> parts;
    if (auto f = node.find("format"); f != node.end()) {
      const char* fp = f->is_string() ? format_pattern(f->get<std::string>()) : nullptr;
      if (!fp)
        return invalid_argument("keyword 'format' (" + f->dump() + ") at " + where(path) +
                                " is not supported; supported: date, time, date-time, uuid, email");
      parts.push_back({"'format' at " + where(path), [fp](GrammarBuilder& b, int a, int z) {
                         return emit_pattern(b, a, z, fp);
                       }});
    }
    if (auto pt = node.find("pattern"); pt != node.end()) {
      if (!pt->is_string()) return invalid_argument("'pattern' at " + where(path) + " must be a string");
      const std::string pattern = pt->get<std::string>();
      parts.push_back({"'pattern' at " + where(path), [pattern](GrammarBuilder& b, int a, int z) {
                         return emit_pattern(b, a, z, pattern);
                       }});
    }
    if (parts.empty()) {
      e_.string(from, to, static_cast<int>(lo), static_cast<int>(hi));
      return Status::ok();
    }
    if (lo > 0 || hi >= 0)
      parts.push_back({"'minLength' / 'maxLength' at " + where(path), [lo, hi](GrammarBuilder& b, int a, int z) {
                         JsonEmitter(b).string_content(a, z, static_cast<int>(lo), static_cast<int>(hi));
                         return Status::ok();
                       }});
    if (parts.size() == 1) {  // one pattern or format: straight into this grammar
      const int a = st(from), z = st(from);
      e_.lit(from, "\"", a);
      Status s = parts[0].emit(b_, a, z);
      if (!s.is_ok()) return invalid_argument(parts[0].what + ": " + s.message());
      e_.lit(z, "\"", to);
      return Status::ok();
    }
    return emit_string_product(b_, from, to, parts, opt_.limits);
  }
  if (type == "integer") return emit_integer(node, path, from, to);
  if (type == "number") {
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (node.contains(k))
        return invalid_argument("keyword '" + std::string(k) + "' on a number at " + where(path) +
                                " is not supported (it is on integers)");
    e_.number(from, to);
    return Status::ok();
  }
  if (type == "boolean") {
    e_.boolean(from, to);
    return Status::ok();
  }
  e_.null(from, to);
  return Status::ok();
}

Status SchemaCompiler::emit_integer(const Json& node, const std::string& path, int from, int to) {
  constexpr double kLo = -9.2e18, kHi = 9.2e18;  // inside int64 with margin
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool bounded = false;
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    auto it = node.find(k);
    if (it == node.end()) continue;
    if (it->is_boolean())
      return invalid_argument("boolean '" + std::string(k) + "' at " + where(path) +
                              " (draft 4) is not supported; use a number");
    if (!it->is_number()) return invalid_argument("'" + std::string(k) + "' at " + where(path) + " must be a number");
    const double v = it->get<double>();
    const std::string key = k;
    if (key == "minimum") lo = std::max(lo, std::ceil(v));
    if (key == "exclusiveMinimum") lo = std::max(lo, std::floor(v) + 1);
    if (key == "maximum") hi = std::min(hi, std::floor(v));
    if (key == "exclusiveMaximum") hi = std::min(hi, std::ceil(v) - 1);
    bounded = true;
  }
  if (!bounded) {
    e_.integer(from, to);
    return Status::ok();
  }
  if (lo > hi) return invalid_argument("the integer bounds at " + where(path) + " admit no value");
  // A side beyond int64 is clamped: JSON integers that large are out of
  // reach of int64 and double consumers anyway.
  lo = std::max(lo, kLo);
  hi = std::min(hi, kHi);
  e_.integer_range(from, to, static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  return Status::ok();
}

Status SchemaCompiler::emit_object(const Json& node, const std::string& path, int from, int to, int depth) {
  const Json* props = nullptr;
  if (auto p = node.find("properties"); p != node.end()) {
    if (!p->is_object()) return invalid_argument("'properties' at " + where(path) + " must be an object");
    props = &*p;
  }
  std::vector<std::string> required;
  if (auto r = node.find("required"); r != node.end()) {
    if (!r->is_array()) return invalid_argument("'required' at " + where(path) + " must be an array of names");
    for (const Json& x : *r) {
      if (!x.is_string()) return invalid_argument("'required' at " + where(path) + " must be an array of names");
      required.push_back(x.get<std::string>());
    }
  }
  const Json* addl = nullptr;
  if (auto a = node.find("additionalProperties"); a != node.end()) {
    if (!a->is_boolean() && !a->is_object())
      return invalid_argument("'additionalProperties' at " + where(path) + " must be a boolean or a schema");
    addl = &*a;
  }
  if (!props && !(addl && addl->is_object()) && !(addl && !addl->get<bool>())) {
    if (!required.empty())
      return invalid_argument("'required' without 'properties' at " + where(path) + " is not supported");
    e_.any_object(from, to);
    return Status::ok();
  }
  if (!props && addl && addl->is_object()) {  // a map: any keys, values of one schema
    if (!required.empty())
      return invalid_argument("'required' without 'properties' at " + where(path) + " is not supported");
    return e_.object_of(from, to, [&](int a, int b) { return emit(*addl, path + "/additionalProperties", a, b, depth + 1); });
  }
  const int open = st(from), first = st(from);
  e_.lit(from, "{", open);
  e_.ws(open, first);
  if (!props) {
    if (!required.empty())
      return invalid_argument("'required' without 'properties' at " + where(path) + " is not supported");
    e_.lit(first, "}", to);  // additionalProperties: false and no properties: {}
    return Status::ok();
  }
  if (addl && addl->is_object())
    return invalid_argument("'additionalProperties' as a schema next to 'properties' at " + where(path) +
                            " is not supported");
  for (const std::string& r : required)
    if (!props->contains(r))
      return invalid_argument("required property '" + r + "' at " + where(path) + " is not in 'properties'");
  // States per property i: none[i] = no member written yet, some[i] = at
  // least one written; ready[i] = about to write key i (after '{' ws, or ',' ws).
  const size_t n = props->size();
  std::vector<int> none(n + 1), some(n + 1);
  none[0] = first;
  some[0] = st(from);
  for (size_t i = 1; i <= n; ++i) {
    none[i] = st(from);
    some[i] = st(from);
  }
  size_t i = 0;
  for (auto it = props->begin(); it != props->end(); ++it, ++i) {
    const std::string& name = it.key();
    const bool req = std::find(required.begin(), required.end(), name) != required.end();
    const int ready = st(from), key = st(from), value = st(from);
    b_.eps(none[i], ready);
    if (i > 0) {
      const int comma = st(from);
      e_.lit(some[i], ",", comma);
      e_.ws(comma, ready);
    }
    e_.lit(ready, Json(name).dump() + ":", key);
    e_.ws(key, value);
    MS_RETURN_IF_ERROR(emit(it.value(), path + "/properties/" + escape_pointer(name), value, some[i + 1], depth + 1));
    if (!req) {
      b_.eps(none[i], none[i + 1]);
      b_.eps(some[i], some[i + 1]);
    }
  }
  e_.lit(none[n], "}", to);
  const int close = st(from);
  e_.ws(some[n], close);
  e_.lit(close, "}", to);
  return Status::ok();
}

Status SchemaCompiler::emit_items(const Json* item, const std::string& item_path, int64_t min, int64_t max, int from,
                                  int to, int depth) {
  // from: after '[' ws. count[k]: k items written.
  auto emit_item = [&](int a, int b) -> Status {
    if (!item) {
      e_.any_value(a, b);
      return Status::ok();
    }
    return emit(*item, item_path, a, b, depth + 1);
  };
  if (min == 0) e_.lit(from, "]", to);
  if (max == 0) return Status::ok();
  const int close = st(from);
  e_.lit(close, "]", to);
  int cur = st(from);
  MS_RETURN_IF_ERROR(emit_item(from, cur));
  for (int64_t k = 1;; ++k) {
    if (k >= min) e_.ws(cur, close);
    if (max >= 0 && k == max) break;
    const int comma = st(from), next_item = st(from);
    e_.lit(cur, ",", comma);
    e_.ws(comma, next_item);
    if (max < 0 && k >= std::max<int64_t>(min, 1)) {
      MS_RETURN_IF_ERROR(emit_item(next_item, cur));  // loop
      break;
    }
    const int nxt = st(from);
    MS_RETURN_IF_ERROR(emit_item(next_item, nxt));
    cur = nxt;
  }
  return Status::ok();
}

Status SchemaCompiler::emit_array(const Json& node, const std::string& path, int from, int to, int depth) {
  MS_ASSIGN_OR_RETURN(int64_t min, bound(node, "minItems", path, 0));
  MS_ASSIGN_OR_RETURN(int64_t max, bound(node, "maxItems", path, -1));
  if (max >= 0 && max < min) return invalid_argument("'maxItems' < 'minItems' at " + where(path));
  if (min > kMaxItemsBound || max > kMaxItemsBound)
    return invalid_argument("'minItems' / 'maxItems' at " + where(path) + " above " + std::to_string(kMaxItemsBound) +
                            " are not supported");
  const Json* items = nullptr;
  bool items_false = false;
  if (auto it = node.find("items"); it != node.end()) {
    if (it->is_boolean())
      items_false = !it->get<bool>();
    else if (it->is_object())
      items = &*it;
    else
      return invalid_argument("'items' at " + where(path) + " must be a schema (tuple 'items' arrays: use prefixItems)");
  }
  const int open = st(from), first = st(from);
  e_.lit(from, "[", open);
  e_.ws(open, first);
  if (auto pre = node.find("prefixItems"); pre != node.end()) {
    if (!pre->is_array()) return invalid_argument("'prefixItems' at " + where(path) + " must be an array");
    const int64_t n = static_cast<int64_t>(pre->size());
    if (n < min || (max >= 0 && n > max))
      return invalid_argument("'prefixItems' at " + where(path) + " with minItems / maxItems beyond the tuple" +
                              " is not supported");
    if (items && !items_false)
      return invalid_argument("'items' next to 'prefixItems' at " + where(path) + " is not supported");
    if (n == 0) {
      e_.lit(first, "]", to);
      return Status::ok();
    }
    int cur = first;
    for (int64_t k = 0; k < n; ++k) {
      if (k > 0) {
        const int comma = st(from), next = st(from);
        e_.lit(cur, ",", comma);
        e_.ws(comma, next);
        cur = next;
      }
      const int done = st(from);
      MS_RETURN_IF_ERROR(emit((*pre)[k], path + "/prefixItems/" + std::to_string(k), cur, done, depth + 1));
      cur = done;
    }
    const int close = st(from);
    e_.ws(cur, close);
    e_.lit(close, "]", to);
    return Status::ok();
  }
  if (items_false) max = 0;
  if (max == 0 && min > 0) return invalid_argument("'items: false' with 'minItems' > 0 at " + where(path));
  return emit_items(items, path + "/items", min, max, first, to, depth);
}

}  // namespace

Result<Grammar> compile_json_alternatives(const std::vector<JsonAlternative>& alts, const JsonSchemaOptions& opt) {
  if (alts.empty()) return invalid_argument("no alternatives to compile");
  GrammarBuilder b;
  JsonEmitter e(b);
  const int start = b.rule_start(0), end = b.rule_end(0);
  for (const JsonAlternative& a : alts) {
    const int p = b.new_state(0), v = b.new_state(0), s = b.new_state(0);
    b.literal(start, a.prefix, p);
    int value_from = p;
    if (a.ws_before_value) {
      value_from = b.new_state(0);
      e.ws(p, value_from);
    }
    if (a.schema) {
      SchemaCompiler c(*a.schema, opt, e);
      MS_RETURN_IF_ERROR(c.emit(*a.schema, "", value_from, v, 0));
    } else {
      e.any_object(value_from, v);
    }
    b.literal(v, a.suffix, s);
    b.eps(s, end);
  }
  return b.build(opt.limits);
}

Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opt) {
  JsonAlternative a;
  a.schema = &schema;
  return compile_json_alternatives({a}, opt);
}

Result<Grammar> compile_any_json_object(const JsonSchemaOptions& opt) { return compile_json_alternatives({{}}, opt); }

}  // namespace ms
