// jinja_interpreter.h: a parsed template and the tree-walking renderer.
// Scoping follows Jinja2: a for-loop body and a macro body get their own frame
// (so `set` inside a loop does not leak out, which is why templates use
// namespace()), `if` blocks do not. Internal errors are JinjaError exceptions;
// chat_template.h is the exception-free public face.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_limits.h"
#include "chat/jinja_value.h"

namespace ms::jinja {

// raise_exception('msg') in a template: the message is the template's own.
class TemplateRaised : public JinjaError {
 public:
  using JinjaError::JinjaError;
};

struct RenderOptions {
  ReprStyle repr = ReprStyle::kPython;
  // strftime_now() uses this instead of the clock (tests pin it); local time.
  std::optional<std::tm> now;
};

class Template {
 public:
  // Throws JinjaError on a syntax error or a template past `limits`.
  explicit Template(const std::string& source, const ParseLimits& limits = {});
  // `context` must be an object; its keys become top-level variables.
  // Throws JinjaError (or TemplateRaised) on a render error or when `budget`
  // runs out (calls, depth, steps, time, sizes; see jinja_limits.h). Make the
  // budget current (ScopedBudget) before building `context`, so that the
  // context's values are charged to it too.
  std::string render(const Value& context, const RenderOptions& options, RenderBudget& budget) const;

 private:
  Body body_;
};

}  // namespace ms::jinja
