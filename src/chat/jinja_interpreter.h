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
  // Throws JinjaError on a syntax error.
  explicit Template(const std::string& source);
  // `context` must be an object; its keys become top-level variables.
  // Throws JinjaError (or TemplateRaised) on a render error.
  std::string render(const Value& context, const RenderOptions& options) const;

 private:
  Body body_;
};

}  // namespace ms::jinja
