// jinja_parser.h: recursive-descent parser from tokens to the syntax tree.
// Operator precedence follows Jinja2: ternary < or < and < not < comparison/in
// < ~ < + - < * / // % < ** < unary minus < filters/tests < postfix.
#pragma once

#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace ms::jinja {

// Throws JinjaError naming the construct and line on a syntax error or an
// unsupported tag (extends, include, import, block).
Body parse(const std::vector<Token>& tokens);

}  // namespace ms::jinja
