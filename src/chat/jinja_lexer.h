// jinja_lexer.h: turns template source into tokens (text, tag delimiters, names,
// literals, operators). Applies whitespace control here: `{%-`/`-%}` markers,
// and HF's trim_blocks/lstrip_blocks (transformers renders chat templates with
// both on), plus dropping one trailing newline (keep_trailing_newline=False).
// `{% raw %}` bodies and comments are resolved here too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/jinja_value.h"

namespace ms::jinja {

enum class TokenKind { kText, kExprOpen, kExprClose, kStmtOpen, kStmtClose, kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  TokenKind kind;
  std::string text;  // text, name, operator, or decoded string literal
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws JinjaError (with line) on malformed input.
std::vector<Token> tokenize(const std::string& source, const LexOptions& options = {});

}  // namespace ms::jinja
