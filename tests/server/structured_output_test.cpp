// response_format parsing and the grammar each request gets
// (server/structured_output.h): json_object / json_schema, strict tools under
// tool_choice required / named (the grammar's sentences are the calls the
// parser reads back), the refusals (400s naming the parameter), the Cohere
// answer opening, and the grammar cache.
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include "sampling/grammar_runtime.h"

namespace ms::server {
namespace {

std::string src(const std::string& rel) { return std::string(MEGASERVE_SOURCE_DIR) + "/" + rel; }

class StructuredOutputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = Tokenizer::load(src("models/north-mini-demo"));
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    tok_ = new Tokenizer(std::move(t.value()));
  }
  static Tokenizer* tok_;
  StructuredOutputCache cache_;
};
Tokenizer* StructuredOutputTest::tok_ = nullptr;

ApiError parse(const std::string& text, ResponseFormat* out) { return parse_response_format(Json::parse(text), out); }

const char* kTools = R"([
  {"type":"function","function":{"name":"get_weather","strict":true,"parameters":{"type":"object",
    "properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}},
  {"type":"function","function":{"name":"calculator","parameters":{"type":"object",
    "properties":{"expression":{"type":"string"}}}}}])";

TEST_F(StructuredOutputTest, ParsesResponseFormat) {
  ResponseFormat rf;
  ASSERT_TRUE(parse(R"({"type":"text"})", &rf).ok());
  EXPECT_EQ(rf.kind, ResponseFormat::Kind::kText);
  ASSERT_TRUE(parse(R"({"type":"json_object"})", &rf).ok());
  EXPECT_EQ(rf.kind, ResponseFormat::Kind::kJsonObject);
  ASSERT_TRUE(parse(R"({"type":"json_schema","json_schema":{"name":"x","strict":true,"description":"d",
    "schema":{"type":"object"}}})", &rf).ok());
  EXPECT_EQ(rf.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_EQ(rf.name, "x");
  EXPECT_TRUE(rf.strict);
  EXPECT_EQ(rf.schema, Json::parse(R"({"type":"object"})"));
  EXPECT_EQ(parse(R"("json")", &rf).param, "response_format");
  EXPECT_EQ(parse(R"({})", &rf).param, "response_format.type");
  EXPECT_EQ(parse(R"({"type":"yaml"})", &rf).param, "response_format.type");
  EXPECT_EQ(parse(R"({"type":"json_schema"})", &rf).param, "response_format.json_schema");
  EXPECT_EQ(parse(R"({"type":"json_schema","json_schema":{"name":"x"}})", &rf).param,
            "response_format.json_schema.schema");
  EXPECT_EQ(parse(R"({"type":"json_schema","json_schema":{"schema":{},"strict":"yes"}})", &rf).param,
            "response_format.json_schema.strict");
  EXPECT_EQ(parse(R"({"type":"json_schema","json_schema":{"schema":{},"extra":1}})", &rf).param,
            "response_format.json_schema.extra");
  EXPECT_EQ(parse(R"({"type":"json_object","foo":1})", &rf).param, "response_format.foo");
}

TEST_F(StructuredOutputTest, JsonSchemaAndJsonObjectGetGrammars) {
  ResponseFormat rf;
  ASSERT_TRUE(parse(R"({"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object",
    "properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}}})", &rf).ok());
  StructuredRequest req;
  req.model_format = ToolCallFormat::kCohere;
  req.response_format = &rf;
  StructuredOutput so;
  ASSERT_TRUE(plan_structured_output(cache_, *tok_, req, &so).ok());
  ASSERT_TRUE(so.grammar);
  EXPECT_TRUE(grammar_accepts(so.grammar->grammar(), R"({"ok": true})"));
  EXPECT_FALSE(grammar_accepts(so.grammar->grammar(), R"({"ok": 1})"));
  EXPECT_EQ(so.prompt_suffix, "<|START_RESPONSE|>");  // Cohere answers open with it
  req.chat = false;                                  // completions: the raw prompt, no envelope
  ASSERT_TRUE(plan_structured_output(cache_, *tok_, req, &so).ok());
  EXPECT_EQ(so.prompt_suffix, "");
  ResponseFormat obj;
  ASSERT_TRUE(parse(R"({"type":"json_object"})", &obj).ok());
  req.response_format = &obj;
  req.model_format = ToolCallFormat::kHermes;
  req.chat = true;
  ASSERT_TRUE(plan_structured_output(cache_, *tok_, req, &so).ok());
  EXPECT_EQ(so.prompt_suffix, "");
  EXPECT_TRUE(grammar_accepts(so.grammar->grammar(), R"({"a":[1,{"b":null}]})"));
  ResponseFormat text;
  req.response_format = &text;
  ASSERT_TRUE(plan_structured_output(cache_, *tok_, req, &so).ok());
  EXPECT_FALSE(so.grammar);
}

TEST_F(StructuredOutputTest, RefusalsAre400sNamingTheParameter) {
  ResponseFormat rf;
  ASSERT_TRUE(parse(R"({"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object",
    "properties":{"zip":{"type":"string","minProperties":1}}}}})", &rf).ok());
  StructuredRequest req;
  req.response_format = &rf;
  StructuredOutput so;
  ApiError e = plan_structured_output(cache_, *tok_, req, &so);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "response_format");
  EXPECT_NE(e.message.find("'minProperties' at /properties/zip"), std::string::npos) << e.message;
  ResponseFormat obj;
  ASSERT_TRUE(parse(R"({"type":"json_object"})", &obj).ok());
  req.response_format = &obj;
  req.tools_parsed = true;  // tools with tool_choice auto / required
  e = plan_structured_output(cache_, *tok_, req, &so);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "response_format");
  const Json tools = Json::parse(R"([{"type":"function","function":{"name":"f","strict":true,
    "parameters":{"type":"object","properties":{"x":{"type":"string","format":"hostname"}}}}}])");
  auto choice = resolve_tool_choice(nlohmann::json::parse(tools.dump()), "required");
  ASSERT_TRUE(choice.is_ok());
  StructuredRequest treq;
  treq.model_format = ToolCallFormat::kCohere;
  treq.tools_parsed = true;
  treq.tool_choice = &*choice;
  treq.tools = &tools;
  e = plan_structured_output(cache_, *tok_, treq, &so);
  EXPECT_EQ(e.param, "tools");
  EXPECT_NE(e.message.find("'format'"), std::string::npos) << e.message;
}

// The grammar of a required / named strict call, read back by the tool-call parser.
TEST_F(StructuredOutputTest, StrictToolsConstrainTheCall) {
  const Json tools = Json::parse(kTools);
  for (ToolCallFormat fmt : {ToolCallFormat::kCohere, ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json}) {
    SCOPED_TRACE(tool_call_format_name(fmt));
    auto required = resolve_tool_choice(nlohmann::json::parse(tools.dump()), "required");
    auto named = resolve_tool_choice(nlohmann::json::parse(tools.dump()),
                                     nlohmann::json::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
    ASSERT_TRUE(required.is_ok() && named.is_ok());
    StructuredRequest req;
    req.model_format = fmt;
    req.tools_parsed = true;
    req.tools = &tools;
    req.tool_choice = &*named;
    StructuredOutput so;
    ASSERT_TRUE(plan_structured_output(cache_, *tok_, req, &so).ok());
    ASSERT_TRUE(so.grammar);
    const std::string named_prefix = forced_call_prefix(fmt, *named);
    const std::string closing = fmt == ToolCallFormat::kCohere   ? "}]"
                                : fmt == ToolCallFormat::kHermes ? "}\n</tool_call>"
                                                                 : "}";
    const std::string args = R"( {"city": "Paris"})";
    EXPECT_TRUE(grammar_accepts(so.grammar->grammar(), args + closing));
    EXPECT_FALSE(grammar_accepts(so.grammar->grammar(), R"( {"town": "Paris"})" + closing));
    ParserOptions po;
    po.allowed_names = named->allowed_names();
    ParsedMessage m = parse_tool_calls(fmt, named_prefix + args + closing, po);
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_EQ(m.tool_calls[0].name, "get_weather");
    EXPECT_EQ(m.tool_calls[0].arguments, R"({"city":"Paris"})");
    EXPECT_EQ(m.content, "");

    req.tool_choice = &*required;  // either tool; calculator is not strict: any object
    ASSERT_TRUE(plan_structured_output(cache_, *tok_, req, &so).ok());
    ASSERT_TRUE(so.grammar);
    const std::string opened = forced_call_prefix(fmt, *required);
    const std::string full = forced_call_prefix(fmt, *named);
    EXPECT_TRUE(grammar_accepts(so.grammar->grammar(), full.substr(opened.size()) + args + closing));
    ToolChoice calc = *named;
    calc.name = "calculator";
    const std::string calc_prefix = forced_call_prefix(fmt, calc).substr(opened.size());
    EXPECT_TRUE(grammar_accepts(so.grammar->grammar(), calc_prefix + R"( {"anything": [1]})" + closing));
    EXPECT_FALSE(grammar_accepts(so.grammar->grammar(), full.substr(opened.size()) + R"( {"city": 1})" + closing));
  }
  // A named non-strict function: no grammar (the prefix alone, as before).
  auto calc = resolve_tool_choice(nlohmann::json::parse(tools.dump()),
                                  nlohmann::json::parse(R"({"type":"function","function":{"name":"calculator"}})"));
  StructuredRequest req;
  req.model_format = ToolCallFormat::kCohere;
  req.tools_parsed = true;
  req.tools = &tools;
  req.tool_choice = &*calc;
  StructuredOutput so;
  ASSERT_TRUE(plan_structured_output(cache_, *tok_, req, &so).ok());
  EXPECT_FALSE(so.grammar);
}

TEST_F(StructuredOutputTest, CacheReusesAndEvicts) {
  StructuredOutputCache small(2);
  const Json a = Json::parse(R"({"type":"string"})"), b = Json::parse(R"({"type":"integer"})"),
             c = Json::parse(R"({"type":"boolean"})");
  auto alt = [](const Json& s) {
    JsonAlternative x;
    x.schema = &s;
    return std::vector<JsonAlternative>{x};
  };
  auto ga = small.get(*tok_, alt(a));
  ASSERT_TRUE(ga.is_ok());
  auto ga2 = small.get(*tok_, alt(a));
  EXPECT_EQ(ga->get(), ga2->get());
  ASSERT_TRUE(small.get(*tok_, alt(b)).is_ok());
  ASSERT_TRUE(small.get(*tok_, alt(c)).is_ok());
  EXPECT_EQ(small.size(), 2u);
  auto ga3 = small.get(*tok_, alt(a));  // evicted: compiled again
  EXPECT_NE(ga->get(), ga3->get());
}

}  // namespace
}  // namespace ms::server
