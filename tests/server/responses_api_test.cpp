// The Responses API without a model: request parsing into chat messages and
// tools, the typed event sequence and output items built from deltas, and
// the bounded response store.
#include <gtest/gtest.h>

#include "server/responses_api.h"
#include "server/responses_stream.h"

namespace ms::server {
namespace {

ProtocolLimits limits() {
  ProtocolLimits l;
  l.vocab_size = 1000;
  return l;
}

ApiError parse(const std::string& body, GenRequest* r, ResponsesRequest* rq, const ResponseStore& store = ResponseStore()) {
  return parse_responses_request(Json::parse(body), limits(), store, r, rq);
}

TEST(ResponsesParse, InputItemsBecomeChatTurns) {
  GenRequest r;
  ResponsesRequest rq;
  ApiError e = parse(R"({"model": "m", "instructions": "Be brief.", "max_output_tokens": 9, "temperature": 0.5,
    "input": [
      {"role": "developer", "content": "dev"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is "}, {"type": "input_text", "text": "2+2?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "sum"}], "content": [{"type": "reasoning_text", "text": "Add."}]},
      {"role": "assistant", "content": [{"type": "output_text", "text": "Let me add.", "annotations": []}]},
      {"type": "function_call", "call_id": "c1", "name": "calculator", "arguments": "{\"expression\": \"2+2\"}"},
      {"type": "function_call", "call_id": "c2", "name": "calculator", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "4"},
      {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "?"}]}]})",
                     &r, &rq);
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(r.endpoint, Endpoint::kResponses);
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.max_tokens_param, "max_output_tokens");
  ASSERT_EQ(r.messages.size(), 6u);
  EXPECT_EQ(r.messages[0], (Json{{"role", "system"}, {"content", "Be brief."}}));  // instructions first
  EXPECT_EQ(r.messages[1]["role"], "system");                                        // developer
  EXPECT_EQ(r.messages[2]["content"], "What is 2+2?");
  const Json& turn = r.messages[3];  // reasoning + text + two calls: one assistant turn
  EXPECT_EQ(turn["role"], "assistant");
  EXPECT_EQ(turn["content"], "Let me add.");
  EXPECT_EQ(turn["reasoning_content"], "Add.");
  ASSERT_EQ(turn["tool_calls"].size(), 2u);
  EXPECT_EQ(turn["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(turn["tool_calls"][0]["function"]["arguments"]["expression"], "2+2");  // decoded for templates
  EXPECT_EQ(r.messages[4], (Json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "4"}}));
  EXPECT_EQ(r.messages[5]["content"], "?");
  EXPECT_EQ(rq.history.size(), 5u);  // the instructions are not carried to the next turn
  EXPECT_EQ(rq.echo["instructions"], "Be brief.");
  EXPECT_TRUE(rq.store);
}

TEST(ResponsesParse, ToolsAndToolChoice) {
  const std::string tools = R"("tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": true},
                                         {"type": "function", "name": "g", "description": "d"}])";
  GenRequest r;
  ResponsesRequest rq;
  ASSERT_TRUE(parse(R"({"input": "x", )" + tools + "}", &r, &rq).ok());
  EXPECT_EQ(r.tools[0]["function"]["name"], "f");  // chat shape for the template
  EXPECT_EQ(r.tools[1]["function"]["description"], "d");
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kAuto);
  GenRequest n;
  ResponsesRequest nq;
  ASSERT_TRUE(parse(R"({"input": "x", "tool_choice": {"type": "function", "name": "g"}, )" + tools + "}", &n, &nq).ok());
  EXPECT_EQ(n.tool_choice.allowed_names(), std::vector<std::string>{"g"});
  GenRequest a;
  ResponsesRequest aq;
  ASSERT_TRUE(parse(R"({"input": "x", "parallel_tool_calls": false, "tool_choice": {"type": "allowed_tools", "mode": "required",
      "tools": [{"type": "function", "name": "f"}]}, )" + tools + "}", &a, &aq).ok());
  EXPECT_TRUE(a.tool_choice.required());
  EXPECT_EQ(a.tool_choice.allowed_names(), std::vector<std::string>{"f"});
  EXPECT_FALSE(a.parallel_tool_calls);
  auto param = [](const std::string& body) {
    GenRequest g;
    ResponsesRequest q;
    return parse(body, &g, &q).param;
  };
  EXPECT_EQ(param(R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools[0].type");
  EXPECT_EQ(param(R"({"input": "x", "tool_choice": {"type": "file_search"}})"), "tool_choice.type");
  EXPECT_EQ(param(R"({"input": "x", "tool_choice": {"type": "function", "name": "h"}, )" + tools + "}"), "tool_choice");
}

TEST(ResponsesParse, FieldsAcceptedIgnoredOrRefused) {
  GenRequest r;
  ResponsesRequest rq;
  ApiError e = parse(R"({"input": "x", "store": false, "metadata": {"k": "v"}, "user": "u", "safety_identifier": "s",
    "prompt_cache_key": "p", "service_tier": "auto", "truncation": "auto", "max_tool_calls": 3, "background": false,
    "include": ["reasoning.encrypted_content", "message.output_text.logprobs"], "top_logprobs": 2,
    "reasoning": {"effort": "low", "summary": "auto"}, "text": {"format": {"type": "text"}, "verbosity": "low"},
    "stream": true, "stream_options": {"include_obfuscation": false}, "top_k": 5, "seed": 7, "logit_bias": {"3": -100}})",
                     &r, &rq);
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_FALSE(rq.store);
  EXPECT_TRUE(rq.logprobs);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_EQ(r.chat_template_kwargs["reasoning_effort"], "low");
  EXPECT_EQ(rq.echo["metadata"]["k"], "v");
  EXPECT_EQ(r.sampling.logit_bias.size(), 1u);
  auto param = [](const std::string& body) {
    GenRequest g;
    ResponsesRequest q;
    return parse(body, &g, &q).param;
  };
  EXPECT_EQ(param(R"({})"), "input");
  EXPECT_EQ(param(R"({"input": []})"), "input");
  EXPECT_EQ(param(R"({"input": 3})"), "input");
  EXPECT_EQ(param(R"({"input": "x", "frobnicate": 1})"), "frobnicate");
  EXPECT_EQ(param(R"({"input": "x", "background": true})"), "background");
  EXPECT_EQ(param(R"({"input": "x", "conversation": "conv_1"})"), "conversation");
  EXPECT_EQ(param(R"({"input": "x", "include": ["everything"]})"), "include[0]");
  EXPECT_EQ(param(R"({"input": "x", "max_output_tokens": 0})"), "max_output_tokens");
  // Structured outputs: accepted, parsed by the chat path (errors name text.format).
  EXPECT_EQ(param(R"({"input": "x", "text": {"format": {"type": "json_object"}}})"), "");
  EXPECT_EQ(param(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {}}}})"), "");
  EXPECT_EQ(param(R"({"input": "x", "text": {"format": {"type": "xml"}}})"), "text.format.type");
  EXPECT_EQ(param(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})"),
            "input[0].content[0].type");
  EXPECT_EQ(param(R"({"input": [{"role": "tool", "content": "x"}]})"), "input[0].role");
  EXPECT_EQ(param(R"({"input": [{"type": "function_call", "name": "f"}]})"), "input[0].call_id");
  EXPECT_EQ(param(R"({"input": [{"type": "item_reference", "id": "msg_x"}]})"), "input[0].id");
  EXPECT_EQ(param(R"({"input": "x", "previous_response_id": "resp_x"})"), "previous_response_id");
}

// Deltas as a ChoiceStream gives them: plan text, then content, then a call.
std::vector<ChoiceDelta> deltas() {
  std::vector<ChoiceDelta> ds(5);
  ds[0].reasoning = "Plan.";
  ds[1].content = "Hi";
  ds[2].content = " there";
  ds[3].tool_calls.push_back(ToolCallDelta{0, "call_1", "f", "{\"a\""});
  ds[4].tool_calls.push_back(ToolCallDelta{0, "", "", ":1}"});
  return ds;
}

class ResponseBuilderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = Tokenizer::load(std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo");
    ASSERT_TRUE(t.is_ok());
    tok_ = new Tokenizer(std::move(t.value()));
  }
  static Tokenizer* tok_;
};
Tokenizer* ResponseBuilderTest::tok_ = nullptr;

TEST_F(ResponseBuilderTest, EventsInOpenAIsOrderWithSequenceNumbers) {
  ResponsesRequest rq;
  std::vector<Json> ev;
  ResponseBuilder b("resp_1", 100, "m", rq, *tok_, [&](const Json& e) { ev.push_back(e); });
  b.start();
  for (const auto& d : deltas()) b.add(d);
  Json r = b.finish("stop", responses_usage(5, 7, 2, 1), "");
  std::vector<std::string> types;
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["sequence_number"], i);
    types.push_back(ev[i]["type"]);
  }
  const std::vector<std::string> want = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(r["status"], "completed");
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Plan.");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Hi there");
  EXPECT_EQ(r["output"][1]["content"][0]["type"], "output_text");
  EXPECT_EQ(r["output"][2]["type"], "function_call");
  EXPECT_EQ(r["output"][2]["call_id"], "call_1");
  EXPECT_EQ(r["output"][2]["arguments"], "{\"a\":1}");
  EXPECT_EQ(ev.back()["response"], r);
  EXPECT_EQ(ev[0]["response"]["status"], "in_progress");
  EXPECT_TRUE(ev[0]["response"]["usage"].is_null());
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 2);
  // Events name the item they belong to.
  EXPECT_EQ(ev[16]["item_id"], r["output"][2]["id"]);
  EXPECT_EQ(ev[18]["arguments"], "{\"a\":1}");
}

TEST_F(ResponseBuilderTest, LengthIsIncompleteAndErrorsFail) {
  ResponsesRequest rq;
  std::vector<Json> ev;
  ResponseBuilder b("resp_2", 100, "m", rq, *tok_, [&](const Json& e) { ev.push_back(e); });
  b.start();
  b.add(deltas()[1]);
  Json r = b.finish("length", responses_usage(1, 1, 0, 0), "");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(ev.back()["type"], "response.incomplete");
  ResponseBuilder f("resp_3", 100, "m", rq, *tok_, nullptr);  // no sink: the object only
  f.start();
  Json failed = f.finish("error", nullptr, "boom");
  EXPECT_EQ(failed["status"], "failed");
  EXPECT_EQ(failed["error"]["code"], "server_error");
}

TEST_F(ResponseBuilderTest, StoredConversationContinuesWithTheOutput) {
  GenRequest r;
  ResponsesRequest rq;
  ASSERT_TRUE(parse(R"({"input": "What is 2+2?", "instructions": "Be brief."})", &r, &rq).ok());
  ResponseBuilder b("resp_4", 100, "m", rq, *tok_, nullptr);
  b.start();
  for (const auto& d : deltas()) b.add(d);
  Json out = b.finish("stop", responses_usage(1, 1, 0, 0), "");
  ResponseStore store;
  store.put("resp_4", stored_response(out, rq));
  GenRequest next;
  ResponsesRequest nq;
  ApiError e = parse(R"({"previous_response_id": "resp_4", "input": [{"type": "function_call_output", "call_id": "call_1", "output": "4"}]})",
                     &next, &nq, store);
  ASSERT_TRUE(e.ok()) << e.message;
  ASSERT_EQ(next.messages.size(), 3u);  // user, the assistant turn (plan, text, call), the tool result
  EXPECT_EQ(next.messages[0]["content"], "What is 2+2?");
  EXPECT_EQ(next.messages[1]["reasoning_content"], "Plan.");
  EXPECT_EQ(next.messages[1]["content"], "Hi there");
  EXPECT_EQ(next.messages[1]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(next.messages[2]["role"], "tool");
  // An item_reference to the stored call resolves the same way.
  GenRequest ref;
  ResponsesRequest refq;
  std::string id = out["output"][2]["id"];
  ASSERT_TRUE(parse(R"({"input": [{"type": "item_reference", "id": ")" + id + R"("}]})", &ref, &refq, store).ok());
  EXPECT_EQ(ref.messages[0]["tool_calls"][0]["function"]["name"], "f");
}

TEST(ResponseStore, BoundedByCountAndBytesOldestFirst) {
  ResponseStore s(3, 1 << 20);
  for (int i = 0; i < 5; ++i) {
    StoredResponse r;
    r.response = Json{{"id", "r" + std::to_string(i)}};
    r.items["item" + std::to_string(i)] = Json{{"type", "message"}};
    s.put("r" + std::to_string(i), std::move(r));
  }
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.get("r0"), nullptr);
  EXPECT_EQ(s.get("r1"), nullptr);
  ASSERT_NE(s.get("r4"), nullptr);
  EXPECT_FALSE(s.item("item1").has_value());
  EXPECT_TRUE(s.item("item3").has_value());
  EXPECT_TRUE(s.erase("r3"));
  EXPECT_FALSE(s.erase("r3"));
  EXPECT_FALSE(s.item("item3").has_value());
  ResponseStore small(100, 300);
  StoredResponse big;
  big.response = Json{{"text", std::string(400, 'x')}};
  small.put("big", big);  // over the whole budget: not kept
  EXPECT_EQ(small.size(), 0u);
  for (int i = 0; i < 10; ++i) {
    StoredResponse r;
    r.response = Json{{"text", std::string(60, 'y')}};
    small.put("s" + std::to_string(i), std::move(r));
    EXPECT_LE(small.bytes(), 300u);
  }
  EXPECT_LT(small.size(), 10u);
  EXPECT_NE(small.get("s9"), nullptr);
}

}  // namespace
}  // namespace ms::server
