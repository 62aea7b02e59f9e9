// JSON Schema -> Grammar (grammar.h), for structured outputs and strict tool
// arguments. The subset is what SDKs emit (openai's zod / pydantic helpers,
// zod-to-json-schema, zod 4, pydantic 2, the Vercel AI SDK):
//   type (a name or a list such as ["string", "null"]), nullable,
//   object: properties (generated in declared order), required,
//           additionalProperties (false / true / absent: only declared
//           properties are generated, which is valid either way; a schema with
//           no properties: a map from any key to that schema, or any object),
//   array: items (a schema; absent or true: any value), prefixItems, minItems, maxItems,
//   string: minLength, maxLength (in characters), pattern (json_regex.h:
//           an ECMA-262 subset), format date / time / date-time / uuid / email
//           (as patterns; several constraints: the product of their automata),
//   integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum (bounds
//            that are integers or not), number: no bounds,
//   enum, const (any JSON values), anyOf, oneOf (as anyOf: alternatives that
//   overlap can produce a value matching more than one), allOf with one
//   member, $ref to "#" or a JSON pointer under it ($defs, definitions or any
//   path: zod-to-json-schema's "#/properties/a"); recursive $refs become
//   recursive grammar rules;
//   ignored annotations: title, description, default, examples, $comment,
//   $schema, $id, deprecated, readOnly, writeOnly, discriminator.
// Anything else (other formats, multipleOf, uniqueItems, propertyNames,
// minProperties, if/then/else, not, ...) is InvalidArgument naming the keyword
// and where it is ("keyword 'multipleOf' at /properties/n is not supported").
// The walk over the schema is bounded: nesting depth, $ref inlining and the
// grammar's state budget all end in an error, never in unbounded recursion.
//
// Whitespace and number policies: json_emitters.h.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "sampling/grammar.h"

namespace ms {

struct JsonSchemaOptions {
  int max_schema_depth = 64;   // nesting of the schema document itself
  int max_ref_inlining = 256;  // $ref expansions (non-recursive refs are inlined)
  GrammarLimits limits;
};

// What a grammar generates: one of several alternatives, each literal text,
// then a JSON value, then literal text. The value is the schema (null pointer:
// any JSON object, i.e. json_object mode); ws_before_value allows whitespace
// between the prefix and the value (tool arguments after `"parameters":`).
struct JsonAlternative {
  std::string prefix;
  const nlohmann::ordered_json* schema = nullptr;
  bool ws_before_value = false;
  std::string suffix;
};

Result<Grammar> compile_json_alternatives(const std::vector<JsonAlternative>& alts, const JsonSchemaOptions& opt = {});
// One value of `schema`, nothing around it.
Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opt = {});
// Any JSON object (response_format json_object).
Result<Grammar> compile_any_json_object(const JsonSchemaOptions& opt = {});

}  // namespace ms
