// The JSON-schema compiler (sampling/json_schema.h): for each supported
// keyword, strings the grammar must accept and strings it must reject, with
// the byte at which a rejected string dies; integer ranges against a
// brute-force check; the refusals that must name their keyword.
#include "sampling/json_schema.h"

#include <gtest/gtest.h>

#include <random>

#include "sampling/grammar_runtime.h"

namespace ms {
namespace {

using Json = nlohmann::ordered_json;

Grammar compile(const std::string& schema_text) {
  auto g = compile_json_schema(Json::parse(schema_text));
  EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << schema_text;
  return g.is_ok() ? std::move(g).value() : Grammar{};
}

// Index of the first byte after which no configuration is left (-1: the
// whole text was read; complete tells whether it may end there).
struct Walk {
  int dead_at = -1;
  bool complete = false;
};
Walk walk(const Grammar& g, const std::string& text) {
  StackPool pool;
  ConfigStepper stepper(g, pool, 64);
  ConfigSet cur = stepper.initial(), nxt;
  for (size_t i = 0; i < text.size(); ++i) {
    stepper.step(cur, static_cast<uint8_t>(text[i]), &nxt);
    std::swap(cur, nxt);
    if (cur.configs.empty() && !cur.can_end) return {static_cast<int>(i), false};
    if (cur.configs.empty() && i + 1 < text.size()) return {static_cast<int>(i + 1), false};
  }
  return {-1, cur.can_end};
}

void expect_accepts(const Grammar& g, const std::string& text) {
  Walk w = walk(g, text);
  EXPECT_EQ(w.dead_at, -1) << "rejected at byte " << w.dead_at << ": " << text;
  EXPECT_TRUE(w.complete) << "incomplete: " << text;
  EXPECT_TRUE(grammar_accepts(g, text)) << text;
}

// dead_at: the byte index that must kill it, or -1 for "reads to the end but is incomplete".
void expect_rejects(const Grammar& g, const std::string& text, int dead_at) {
  Walk w = walk(g, text);
  EXPECT_FALSE(grammar_accepts(g, text)) << text;
  EXPECT_EQ(w.dead_at, dead_at) << text;
  if (dead_at < 0) {
    EXPECT_FALSE(w.complete) << text;
  }
}

std::string error_of(const std::string& schema_text) {
  auto g = compile_json_schema(Json::parse(schema_text));
  EXPECT_FALSE(g.is_ok()) << schema_text;
  return g.is_ok() ? "" : g.status().message();
}

const char* kPerson = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
  "required":["name","age"],"additionalProperties":false})";

TEST(JsonSchema, ObjectInDeclaredOrderWithWhitespacePolicy) {
  Grammar g = compile(kPerson);
  expect_accepts(g, R"({"name":"Bo","age":3})");
  expect_accepts(g, R"({"name": "Bo", "age": -3})");
  expect_accepts(g, "{\n  \"name\": \"Bo\",\n  \"age\": 3\n}");
  expect_accepts(g, "{\n\t\"name\":\"\",\n\t\"age\":0}");
  expect_rejects(g, R"({"age":3,"name":"Bo"})", 2);           // declared order
  expect_rejects(g, R"({"name":"Bo"})", 12);                   // age is required
  expect_rejects(g, R"({"name":"Bo","age":3.5})", 20);         // integer
  expect_rejects(g, R"({"name":"Bo","age":3,"x":1})", 20);     // no extra properties
  expect_rejects(g, R"( {"name":"Bo","age":3})", 0);           // nothing before the value
  expect_rejects(g, R"({"name":"Bo","age":3} )", 21);          // nor after it
  expect_rejects(g, R"({"name" :"Bo","age":3})", 7);           // no space before ':'
  expect_rejects(g, R"({"name":"Bo","age":03})", 20);          // no leading zeros
  expect_rejects(g, R"({"name":"Bo","age":3)", -1);            // unfinished
  expect_rejects(g, "{\n" + std::string(21, ' ') + "\"name\"", 22);  // at most 20 indent characters
  expect_accepts(g, "{\n" + std::string(20, ' ') + "\"name\":\"\",\"age\":1}");
}

TEST(JsonSchema, StringContentIsStrictJsonInValidUtf8) {
  Grammar g = compile(R"({"type":"string"})");
  expect_accepts(g, R"("")");
  expect_accepts(g, R"("a \"quoted\" \\ \/ \b\f\n\r\t \u00e9 \uFFFF")");
  expect_accepts(g, "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e \xf4\x8f\xbf\xbf\"");
  expect_rejects(g, "\"a\x01\"", 2);               // raw control character
  expect_rejects(g, R"("\q")", 2);                 // unknown escape
  expect_rejects(g, R"("\ud800")", 3);             // no surrogate escapes
  expect_rejects(g, R"("\u12G4")", 5);
  expect_rejects(g, "\"\xc0\x80\"", 1);            // overlong
  expect_rejects(g, "\"\xed\xa0\x80\"", 2);        // UTF-8-encoded surrogate
  expect_rejects(g, "\"\xf4\x90\x80\x80\"", 2);    // above U+10FFFF
  expect_rejects(g, "\"\xe2\x82\"", 3);            // truncated character
  expect_rejects(g, "\"\x80\"", 1);                // stray continuation byte
}

TEST(JsonSchema, StringLengthCountsCharactersAndEscapes) {
  Grammar g = compile(R"({"type":"string","minLength":2,"maxLength":4})");
  expect_accepts(g, R"("ab")");
  expect_accepts(g, R"("abcd")");
  expect_accepts(g, "\"\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\"");  // 3 characters, 9 bytes
  expect_accepts(g, R"("\n\u00e9")");                            // 2 characters
  expect_rejects(g, R"("a")", 2);
  expect_rejects(g, R"("abcde")", 5);
  expect_rejects(g, R"("abc\n\t")", 6);
  Grammar one = compile(R"({"type":"string","minLength":1})");
  expect_rejects(one, R"("")", 1);
  expect_accepts(one, R"("x")");
  expect_accepts(one, R"("a very long string indeed")");
}

TEST(JsonSchema, StringFormats) {
  Grammar date = compile(R"({"type":"string","format":"date"})");
  for (const char* ok : {R"("2024-01-31")", R"("1999-02-28")", R"("0001-04-30")", R"("2030-12-01")"})
    expect_accepts(date, ok);
  expect_rejects(date, R"("2024-02-29")", 10);  // no leap-year arithmetic: never generated
  expect_rejects(date, R"("2024-04-31")", 10);
  expect_rejects(date, R"("2024-13-01")", 7);
  expect_rejects(date, R"("2024-1-01")", 7);
  Grammar time = compile(R"({"type":"string","format":"time"})");
  expect_accepts(time, R"("23:59:59Z")");
  expect_accepts(time, R"("08:30:00.123+02:00")");
  expect_rejects(time, R"("24:00:00Z")", 2);
  expect_rejects(time, R"("12:60:00Z")", 4);
  expect_rejects(time, R"("12:00:00")", 9);  // RFC 3339 needs the offset
  Grammar dt = compile(R"({"type":"string","format":"date-time"})");
  expect_accepts(dt, R"("2024-06-01T12:00:00Z")");
  expect_accepts(dt, R"("2024-06-01T12:00:00.250Z")");
  expect_rejects(dt, R"("2024-06-01T12:00:00+02:00")", 20);  // UTC only (zod's default datetime())
  expect_rejects(dt, R"("2024-06-01 12:00:00Z")", 11);
  Grammar uuid = compile(R"({"type":"string","format":"uuid"})");
  expect_accepts(uuid, R"("123e4567-e89b-12d3-a456-426614174000")");
  expect_accepts(uuid, R"("123E4567-E89B-12D3-A456-426614174000")");
  expect_rejects(uuid, R"("123e4567-e89b-02d3-a456-426614174000")", 15);  // RFC 9562 versions 1-8
  expect_rejects(uuid, R"("123e4567e89b12d3a456426614174000")", 9);
  Grammar email = compile(R"({"format":"email"})");  // no type: a string in the format
  for (const char* ok : {R"("a@b.co")", R"("first.last+tag@mail.example.org")", R"("x_y-z@sub-1.a.io")"})
    expect_accepts(email, ok);
  expect_rejects(email, R"("@b.co")", 1);
  expect_rejects(email, R"("a..b@c.de")", 3);
  expect_rejects(email, R"("a@-b.co")", 3);
  expect_rejects(email, R"("a@b.c")", 6);
  expect_rejects(email, R"("a@b")", 4);
  Grammar on_number = compile(R"({"type":"integer","format":"int64"})");  // formats describe strings only
  expect_accepts(on_number, "12");
}

TEST(JsonSchema, Patterns) {
  Grammar zip = compile(R"({"type":"string","pattern":"^[0-9]{5}(-[0-9]{4})?$"})");
  expect_accepts(zip, R"("12345")");
  expect_accepts(zip, R"("12345-6789")");
  expect_rejects(zip, R"("1234")", 5);
  expect_rejects(zip, R"("12345-")", 7);
  Grammar alt = compile(R"({"pattern":"^(?:red|gr[ae]y)$|^x+\\.y*$"})");  // no type: a string
  for (const char* ok : {R"("red")", R"("grey")", R"("gray")", R"("xx.")", R"("x.yy")"}) expect_accepts(alt, ok);
  expect_rejects(alt, R"("green")", 4);
  // Unanchored: any (printable ASCII) characters around the match.
  Grammar contains = compile(R"({"type":"string","pattern":"ab+c"})");
  expect_accepts(contains, R"("abc")");
  expect_accepts(contains, R"("xx abbbc yy")");
  expect_rejects(contains, R"("ac")", 3);
  // Characters JSON escapes are generated escaped; UTF-8 literals and \u escapes.
  // (the regex is ^"[\\\n]\u00e9é$: a quote, a backslash or a newline, two é)
  Grammar esc = compile(R"({"type":"string","pattern":"^\"[\\\\\\n]\\u00e9é$"})");
  expect_accepts(esc, R"("\"\\éé")");
  expect_accepts(esc, R"("\"\néé")");
  expect_rejects(esc, R"(""")", 1);
  // With length bounds and with a format (zod 4 emits both format and pattern): the product.
  Grammar bounded = compile(R"({"type":"string","pattern":"^[a-z]+$","minLength":2,"maxLength":3})");
  expect_accepts(bounded, R"("ab")");
  expect_accepts(bounded, R"("abc")");
  expect_rejects(bounded, R"("a")", 2);
  expect_rejects(bounded, R"("abcd")", 4);
  Grammar zod_email = compile(R"({"type":"string","format":"email",
    "pattern":"^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"})");
  expect_accepts(zod_email, R"("first.last@mail.example.org")");
  expect_rejects(zod_email, R"("o'neil@x.io")", 2);  // the pattern allows it, the format subset does not
  Grammar zod_uuid = compile(R"({"type":"string","format":"uuid",
    "pattern":"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000)$"})");
  expect_accepts(zod_uuid, R"("123e4567-e89b-42d3-a456-426614174000")");
  expect_rejects(zod_uuid, R"("123e4567-e89b-92d3-a456-426614174000")", 15);  // version 9
}

TEST(JsonSchema, OptionalPropertiesKeepOrderAndCommas) {
  Grammar g = compile(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},
    "c":{"type":"integer"}},"required":["a"]})");
  expect_accepts(g, R"({"a":1})");
  expect_accepts(g, R"({"a":1,"c":2})");
  expect_accepts(g, R"({"a":1, "b":2, "c":3})");
  expect_rejects(g, R"({"b":2})", 2);
  expect_rejects(g, R"({"a":1,"c":2,"b":3})", 12);
  expect_rejects(g, R"({,"a":1})", 1);
  expect_rejects(g, R"({"a":1,})", 7);
  Grammar all_optional = compile(R"({"type":"object","properties":{"x":{"type":"boolean"},"y":{"type":"null"}}})");
  expect_accepts(all_optional, "{}");
  expect_accepts(all_optional, "{ }");
  expect_accepts(all_optional, R"({"y":null})");
  expect_accepts(all_optional, R"({"x":true,"y":null})");
  expect_rejects(all_optional, R"({"x":true,})", 10);
}

TEST(JsonSchema, EnumConstAndTypeLists) {
  Grammar e = compile(R"({"enum":["red","green",3,null,{"k":[1]}]})");
  for (const char* ok : {R"("red")", R"("green")", "3", "null", R"({"k":[1]})"}) expect_accepts(e, ok);
  expect_rejects(e, R"("blue")", 1);
  expect_rejects(e, R"("re")", 3);
  expect_rejects(e, "30", 1);
  Grammar typed = compile(R"({"type":"string","enum":["a","b",1]})");  // 1 is not a string: never produced
  expect_accepts(typed, R"("a")");
  expect_rejects(typed, "1", 0);
  Grammar c = compile(R"({"const":"only"})");
  expect_accepts(c, R"("only")");
  expect_rejects(c, R"("onl")", 4);
  Grammar nullable = compile(R"({"type":["string","null"]})");
  expect_accepts(nullable, R"("x")");
  expect_accepts(nullable, "null");
  expect_rejects(nullable, "1", 0);
  Grammar openapi = compile(R"({"type":"integer","nullable":true})");
  expect_accepts(openapi, "null");
  expect_accepts(openapi, "12");
}

TEST(JsonSchema, NumbersAndIntegers) {
  Grammar n = compile(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "12", "-0.5", "1.25e+10", "3E-2", "1e5", "123456789.000001"}) expect_accepts(n, ok);
  expect_rejects(n, "1.", -1);
  expect_rejects(n, ".5", 0);
  expect_rejects(n, "1e", -1);
  expect_rejects(n, "01", 1);
  expect_rejects(n, "+1", 0);
  expect_rejects(n, "1" + std::string(20, '0'), 20);  // at most 20 integer digits
  Grammar i = compile(R"({"type":"integer"})");
  expect_accepts(i, "-42");
  expect_rejects(i, "4.0", 1);
  expect_rejects(i, "4e2", 1);
}

TEST(JsonSchema, IntegerRangesMatchBruteForce) {
  struct Case {
    const char* bounds;
    int64_t lo, hi;
  };
  const Case cases[] = {
      {R"("minimum":5,"maximum":120)", 5, 120},
      {R"("minimum":-15,"maximum":7)", -15, 7},
      {R"("exclusiveMinimum":0,"maximum":10)", 1, 10},
      {R"("minimum":-250,"exclusiveMaximum":-99)", -250, -100},
      {R"("minimum":0)", 0, INT64_MAX},
      {R"("maximum":-3)", INT64_MIN, -3},
      {R"("minimum":1.5,"maximum":99.5)", 2, 99},
      {R"("minimum":100,"maximum":100)", 100, 100},
      {R"("minimum":9,"maximum":1000)", 9, 1000},
  };
  for (const Case& c : cases) {
    Grammar g = compile(std::string(R"({"type":"integer",)") + c.bounds + "}");
    for (int64_t v = -1100; v <= 1100; ++v) {
      const bool want = v >= c.lo && v <= c.hi;
      EXPECT_EQ(grammar_accepts(g, std::to_string(v)), want) << c.bounds << " value " << v;
    }
    EXPECT_FALSE(grammar_accepts(g, "-0")) << c.bounds;
    EXPECT_FALSE(grammar_accepts(g, "007")) << c.bounds;
  }
  Grammar safe = compile(R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})");
  expect_accepts(safe, "9007199254740991");
  expect_accepts(safe, "-9007199254740991");
  expect_rejects(safe, "9007199254740992", 15);
  expect_accepts(safe, "0");
}

TEST(JsonSchema, ArraysWithBounds) {
  Grammar g = compile(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})");
  expect_accepts(g, "[1]");
  expect_accepts(g, "[1, 2, 3]");
  expect_accepts(g, "[\n  1,\n  2\n]");
  expect_rejects(g, "[]", 1);
  expect_rejects(g, "[1,2,3,4]", 6);
  Grammar any = compile(R"({"type":"array","items":{"type":"string"}})");
  expect_accepts(any, "[]");
  expect_accepts(any, R"(["a","b","c","d","e"])");
  expect_rejects(any, "[1]", 1);
  Grammar untyped = compile(R"({"type":"array"})");
  expect_accepts(untyped, R"([1,"x",{"a":[null]},[]])");
  Grammar tuple = compile(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})");
  expect_accepts(tuple, R"([1,"x"])");
  expect_rejects(tuple, R"([1])", 2);
  expect_rejects(tuple, R"([1,"x",2])", 6);
}

TEST(JsonSchema, AnyOfRefsAndPydanticDefs) {
  // pydantic 2: nested model in $defs, Optional[...] as anyOf with null, an enum class.
  Grammar g = compile(R"({"$defs":{"Address":{"properties":{"city":{"title":"City","type":"string"},
      "zip":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null,"title":"Zip"}},"required":["city","zip"],
      "title":"Address","type":"object"},"Color":{"enum":["red","blue"],"title":"Color","type":"string"}},
    "properties":{"home":{"$ref":"#/$defs/Address"},"color":{"$ref":"#/$defs/Color"},
      "tags":{"items":{"type":"string"},"title":"Tags","type":"array"}},
    "required":["home","color","tags"],"title":"Person","type":"object"})");
  expect_accepts(g, R"({"home":{"city":"Oslo","zip":null},"color":"red","tags":[]})");
  expect_accepts(g, R"({"home":{"city":"Oslo","zip":"0150"},"color":"blue","tags":["a"]})");
  expect_rejects(g, R"({"home":{"city":"Oslo","zip":1},"color":"red","tags":[]})", 29);
  expect_rejects(g, R"({"home":{"city":"Oslo","zip":null},"color":"green","tags":[]})", 44);
  // zod-to-json-schema reuses a schema by pointing at its first occurrence.
  Grammar zod = compile(R"({"type":"object","properties":{"a":{"type":"object","properties":{"x":{"type":"string"}},
      "required":["x"],"additionalProperties":false},"b":{"$ref":"#/properties/a"}},"required":["a","b"],
      "additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"})");
  expect_accepts(zod, R"({"a":{"x":"1"},"b":{"x":"2"}})");
  expect_rejects(zod, R"({"a":{"x":"1"},"b":{}})", 20);
  Grammar one_of = compile(R"({"oneOf":[{"type":"boolean"},{"type":"object","properties":{"k":{"const":1}},
      "required":["k"],"additionalProperties":false}]})");
  expect_accepts(one_of, "true");
  expect_accepts(one_of, R"({"k":1})");
  expect_rejects(one_of, R"({"k":2})", 5);
  Grammar all_of = compile(R"({"allOf":[{"type":"string"}],"description":"wrapped"})");
  expect_accepts(all_of, R"("x")");
  expect_rejects(all_of, "1", 0);
}

TEST(JsonSchema, RecursiveRefsNestWithoutBound) {
  Grammar g = compile(R"({"$defs":{"Node":{"type":"object","properties":{"name":{"type":"string"},
      "children":{"type":"array","items":{"$ref":"#/$defs/Node"}}},"required":["name","children"],
      "additionalProperties":false}},"$ref":"#/$defs/Node"})");
  expect_accepts(g, R"({"name":"r","children":[]})");
  expect_accepts(g, R"({"name":"r","children":[{"name":"a","children":[{"name":"b","children":[]}]},
    {"name":"c","children":[]}]})");
  expect_rejects(g, R"({"name":"r","children":[{"name":"a"}]})", 35);
  Grammar self = compile(R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},
      "required":["next"],"additionalProperties":false})");
  expect_accepts(self, R"({"next":{"next":{"next":null}}})");
  expect_rejects(self, R"({"next":{"next":1}})", 16);
}

TEST(JsonSchema, AnyJsonObject) {
  auto g = compile_any_json_object();
  ASSERT_TRUE(g.is_ok());
  expect_accepts(*g, "{}");
  expect_accepts(*g, R"({"a":[1,2.5,{"b":null}],"c":"x","d":true,"e":{"f":[[[]]]}})");
  expect_accepts(*g, "{\n  \"a\": [\n    1\n  ]\n}");
  expect_rejects(*g, "[1]", 0);
  expect_rejects(*g, R"({"a":})", 5);
  expect_rejects(*g, R"({"a":1]})", 6);
  expect_rejects(*g, R"({a:1})", 1);
  // An object schema without properties is any object as well; {} is any value.
  Grammar obj = compile(R"({"type":"object"})");
  expect_accepts(obj, R"({"x":{"y":[]}})");
  Grammar anything = compile("{}");
  expect_accepts(anything, "[1]");
  expect_accepts(anything, R"("s")");
  Grammar map = compile(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  expect_accepts(map, R"({"a":1,"b":2})");
  expect_rejects(map, R"({"a":"x"})", 5);
}

TEST(JsonSchema, RefusalsNameTheKeyword) {
  EXPECT_NE(error_of(R"({"type":"string","pattern":"^(a)\\1$"})").find("'pattern' at /: backreferences"),
            std::string::npos);
  EXPECT_NE(error_of(R"js({"type":"string","pattern":"^(?=a)"})js").find("lookaround"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","pattern":"\\bword"})").find("word boundary"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","pattern":"a{2000}"})").find("above 1000"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","pattern":"^[0-9]+$","maxLength":0})").find("no string"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"object","properties":{"site":{"type":"string","format":"uri"}}})")
                .find("'format' (\"uri\") at /properties/site"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"integer","multipleOf":2})").find("'multipleOf'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"array","uniqueItems":true})").find("'uniqueItems'"), std::string::npos);
  EXPECT_NE(error_of(R"({"not":{"type":"string"}})").find("'not'"), std::string::npos);
  EXPECT_NE(error_of(R"({"if":{},"then":{}})").find("'if'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"object","minProperties":1})").find("'minProperties'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"number","minimum":0})").find("'minimum' on a number"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"http://example.com/s.json"})").find("only local references"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"#/$defs/Missing"})").find("points to nothing"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"strin"})").find("'type'"), std::string::npos);
  EXPECT_NE(error_of(R"({"allOf":[{"type":"string"},{"maxLength":3}]})").find("'allOf'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"object","properties":{"a":{}},"required":["b"]})").find("'b'"), std::string::npos);
  EXPECT_NE(error_of(R"({"enum":[]})").find("'enum'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"integer","minimum":5,"maximum":4})").find("admit no value"), std::string::npos);
  EXPECT_NE(error_of(R"({"$defs":{"A":{"anyOf":[{"$ref":"#/$defs/A"},{"type":"null"}]}},"$ref":"#/$defs/A"})")
                .find("recursive"),
            std::string::npos);
  // Nesting deeper than the limit: an error, not a stack overflow.
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += R"({"type":"array","items":)";
  deep += "{}";
  for (int i = 0; i < 100; ++i) deep += "}";
  EXPECT_NE(error_of(deep).find("deeper than"), std::string::npos);
}

// Random schema documents built from the keywords (valid, invalid and
// self-referencing ones mixed): compiling returns a grammar or an error,
// never crashes or runs away.
Json random_schema(std::mt19937& g, int depth) {
  auto pick = [&](int n) { return static_cast<int>(g() % n); };
  static const char* types[] = {"string", "number", "integer", "boolean", "null", "object", "array", "bogus"};
  if (depth > 4 || pick(4) == 0) {
    switch (pick(6)) {
      case 0: return Json{{"type", types[pick(8)]}};
      case 1: return Json{{"enum", Json::array({"a", 1, nullptr})}};
      case 2: return Json{{"$ref", pick(2) ? "#" : "#/$defs/X"}};
      case 3: return Json{{"type", "string"}, {"maxLength", pick(5)}, {"minLength", pick(3)}};
      case 4: return Json{{"type", "integer"}, {"minimum", pick(50) - 25}, {"maximum", pick(50) - 10}};
      default: return pick(2) ? Json(true) : Json(false);
    }
  }
  Json s = Json::object();
  switch (pick(5)) {
    case 0: {
      s["type"] = "object";
      Json props = Json::object();
      for (int i = 0, n = pick(4); i < n; ++i) props["p" + std::to_string(i)] = random_schema(g, depth + 1);
      s["properties"] = props;
      if (pick(2)) s["required"] = Json::array({"p0"});
      if (pick(2)) s["additionalProperties"] = pick(2) ? Json(false) : random_schema(g, depth + 1);
      break;
    }
    case 1:
      s["type"] = "array";
      s["items"] = random_schema(g, depth + 1);
      if (pick(2)) s["maxItems"] = pick(4);
      if (pick(2)) s["minItems"] = pick(3);
      break;
    case 2: {
      Json alts = Json::array();
      for (int i = 0, n = 1 + pick(3); i < n; ++i) alts.push_back(random_schema(g, depth + 1));
      s[pick(2) ? "anyOf" : "oneOf"] = alts;
      break;
    }
    case 3:
      s["$defs"] = {{"X", random_schema(g, depth + 1)}};
      s["$ref"] = "#/$defs/X";
      break;
    default:
      s["type"] = Json::array({types[pick(8)], "null"});
      if (pick(3) == 0) s["pattern"] = "x";
  }
  return s;
}

TEST(JsonSchema, RandomSchemasCompileOrFailCleanly) {
  std::mt19937 g(2026);
  int ok = 0;
  for (int i = 0; i < 1500; ++i) {
    Json s = random_schema(g, 0);
    auto r = compile_json_schema(s);
    if (!r.is_ok()) {
      EXPECT_FALSE(r.status().message().empty());
      continue;
    }
    ++ok;
    EXPECT_GT(r->num_states(), 0) << s.dump();
  }
  EXPECT_GT(ok, 300);
}

TEST(JsonSchema, AlternativesWithAffixes) {
  Json args = Json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],
    "additionalProperties":false})");
  std::vector<JsonAlternative> alts(2);
  alts[0].prefix = R"([{"name": "weather", "arguments":)";
  alts[0].schema = &args;
  alts[0].ws_before_value = true;
  alts[0].suffix = "}]";
  alts[1].prefix = R"([{"name": "anything", "arguments":)";
  alts[1].ws_before_value = true;
  alts[1].suffix = "}]";
  auto g = compile_json_alternatives(alts);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  expect_accepts(*g, R"([{"name": "weather", "arguments": {"city":"Rome"}}])");
  expect_accepts(*g, R"([{"name": "anything", "arguments":{"k":[1]}}])");
  expect_rejects(*g, R"([{"name": "weather", "arguments": {"town":"Rome"}}])", 36);
}

}  // namespace
}  // namespace ms
