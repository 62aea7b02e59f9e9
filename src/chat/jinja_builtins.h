// jinja_builtins.h: the library the interpreter calls into: filters, tests,
// methods of str/list/dict values, and global functions (range, namespace,
// dict, raise_exception, strftime_now). Implemented across jinja_filters.cpp,
// jinja_tests.cpp, jinja_methods.cpp.
#pragma once

#include <string>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_value.h"

namespace ms::jinja {

struct BuiltinEnv {
  ReprStyle repr = ReprStyle::kPython;
};

// Throws JinjaError("unknown filter 'x'") for filters it does not have.
Value apply_filter(const BuiltinEnv& env, const std::string& name, const Value& input, CallArgs& args);
// Throws JinjaError("unknown test 'x'").
bool apply_test(const BuiltinEnv& env, const std::string& name, const Value& input, CallArgs& args);
bool has_test(const std::string& name);
// Method `name` of a str/list/dict value, bound to it; undefined if none.
Value get_method(const BuiltinEnv& env, const Value& self, const std::string& name);
void install_globals(Object& globals, const RenderOptions& options);

// Shared helpers.
// Dotted attribute path ("function.name", "0") of a value, as filters' attribute=.
Value get_attribute_path(const Value& v, const std::string& path);
// Python-like item access used by `x[k]` and attribute lookups; undefined if absent.
Value get_item(const Value& container, const Value& key);
// Iteration as Python does it: list items, dict keys, string characters.
Array iterate(const Value& v);
// Python str.strip family with an optional character set.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
int64_t py_length(const Value& v);
// & < > " ' as jinja2's escape (markupsafe) writes them.
std::string html_escape(const std::string& s);

}  // namespace ms::jinja
