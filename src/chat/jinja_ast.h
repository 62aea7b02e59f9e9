// jinja_ast.h: the syntax tree the parser builds and the interpreter walks.
// One Expr and one Stmt struct, each tagged by kind (templates are small and
// the tree is immutable once parsed; shared_ptr lets macros keep their bodies).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace ms::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::shared_ptr<Expr>;
using StmtPtr = std::shared_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // items
    kTuple,     // items
    kDict,      // items as key,value pairs: items[2i], items[2i+1]
    kAttr,      // items[0].name
    kItem,      // items[0][items[1]]
    kSlice,     // items[0][items[1]:items[2]:items[3]] (nullptr = omitted)
    kCall,      // items[0](items[1..], kwargs)
    kFilter,    // items[0] | name(items[1..], kwargs)
    kTest,      // items[0] is [not] name(items[1..]); negate
    kUnary,     // name in {"-", "+", "not"}, items[0]
    kBinary,    // items[0] name items[1]; name is the operator ("and", "or", "in", "not in", "==", ...)
    kCond,      // items[1] if items[0] else items[2] (items[2] may be nullptr)
  };
  Kind kind;
  int line = 0;
  int depth = 1;  // of the subtree rooted here; bounded by ParseLimits::max_expr_depth
  Value value;
  std::string name;
  bool negate = false;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // nullptr: required
};

struct Stmt {
  enum class Kind {
    kText,     // text
    kOutput,   // {{ expr }}
    kIf,       // conds[i] -> bodies[i]; bodies.back() is else when bodies.size() > conds.size()
    kFor,      // targets in expr [if cond]: bodies[0], else bodies[1]
    kSet,      // targets (or target_object.attr) = expr; block form: bodies[0] filtered by filters
    kMacro,    // name(params): bodies[0]
    kCallBlock,// {% call(params) expr %} bodies[0] {% endcall %}
    kFilterBlock, // {% filter f %} bodies[0]: expr is the filter chain over a kName "__body__"
    kBreak,
    kContinue,
    kDo,       // {% do expr %}
    kScope,    // bodies[0] rendered inline ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  std::string attr;  // kSet: `set ns.attr = ...` sets targets[0].attr
  std::vector<MacroParam> params;
  bool recursive = false;
};

}  // namespace ms::jinja
