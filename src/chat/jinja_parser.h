// jinja_parser.h: recursive-descent parser from tokens to the syntax tree.
// Operator precedence follows Jinja2: ternary < or < and < not < comparison/in
// < ~ < + - < * / // % < ** < unary minus < filters/tests < postfix.
#pragma once

#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_limits.h"

namespace ms::jinja {

// Throws JinjaError naming the construct and line on a syntax error, an
// unsupported tag (extends, include, import, block), or nesting past `limits`
// (so neither this parser nor the tree's users recurse without bound).
Body parse(const std::vector<Token>& tokens, const ParseLimits& limits = {});

}  // namespace ms::jinja
