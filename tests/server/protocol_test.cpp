// Request validation, error objects, stop-string matching, flag parsing.
#include <gtest/gtest.h>

#include "server/http_server.h"
#include "server/openai_protocol.h"
#include "server/serve_command.h"
#include "server/stop_matcher.h"

namespace ms::server {
namespace {

ProtocolLimits limits() {
  ProtocolLimits l;
  l.vocab_size = 1000;
  return l;
}

Json chat_body(Json extra = Json::object()) {
  Json b = {{"model", "m"}, {"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

ApiError chat(Json extra, GenRequest* r = nullptr) {
  GenRequest tmp;
  return parse_chat_request(chat_body(std::move(extra)), limits(), r ? r : &tmp);
}

TEST(Protocol, AcceptsTheFullParameterSet) {
  GenRequest r;
  Json extra = Json::parse(R"({"max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
    "min_p": 0.1, "seed": 42, "stop": ["a", "bc"], "n": 2, "logprobs": true, "top_logprobs": 3,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2, "ignore_eos": true,
    "stream": true, "stream_options": {"include_usage": true}, "user": "u", "tool_choice": "none",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})");
  ApiError e = chat(extra, &r);
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(*r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.sampling.logprobs, 3);
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FALSE(r.tool_choice.parse());
}

TEST(Protocol, UnknownParametersAreNamed) {
  ApiError e = chat({{"frobnicate", 1}});
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "frobnicate");
  EXPECT_NE(e.message.find("frobnicate"), std::string::npos);
  EXPECT_EQ(chat({{"response_format", {{"type", "xml"}}}}).param, "response_format.type");
  EXPECT_TRUE(chat({{"response_format", {{"type", "text"}}}}).ok());
  EXPECT_EQ(chat({{"stream", true}, {"stream_options", {{"foo", true}}}}).param, "stream_options.foo");
}

// Item 3 of issue 12: documented fields that change nothing are accepted;
// those whose meaning would be dropped stay 400s naming them.
TEST(Protocol, DocumentedFieldsAcceptedOrRefusedWithAReason) {
  GenRequest r;
  Json ok = Json::parse(R"({"metadata": {"k": "v"}, "store": false, "reasoning_effort": "low",
    "service_tier": "auto", "prompt_cache_key": "abc", "prompt_cache_retention": "24h", "safety_identifier": "u1",
    "verbosity": "low", "modalities": ["text"], "prediction": {"type": "content", "content": "x"}, "user": "u",
    "audio": null, "functions": null, "function_call": null, "web_search_options": null, "parallel_tool_calls": false,
    "stream": true, "stream_options": {"include_usage": true, "include_obfuscation": false}})");
  ApiError e = chat(ok, &r);
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(r.chat_template_kwargs["reasoning_effort"], "low");  // templates that know it read it
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(chat({{"audio", {{"voice", "alloy"}, {"format", "mp3"}}}}).param, "audio");
  EXPECT_EQ(chat({{"modalities", Json::array({"text", "audio"})}}).param, "modalities");
  EXPECT_EQ(chat({{"functions", Json::array({{{"name", "f"}}})}}).param, "functions");
  EXPECT_EQ(chat({{"web_search_options", Json::object()}}).param, "web_search_options");
  EXPECT_EQ(chat({{"metadata", "x"}}).param, "metadata");
  EXPECT_EQ(chat({{"store", "yes"}}).param, "store");
  EXPECT_EQ(chat({{"service_tier", 3}}).param, "service_tier");
  EXPECT_EQ(chat({{"frobnicate", nullptr}}).param, "frobnicate");  // unknown stays unknown, even as null
  GenRequest c;
  EXPECT_EQ(parse_completion_request(Json::parse(R"({"prompt": "x", "store": true})"), limits(), &c).param, "store");
}

TEST(Protocol, LogitBias) {
  GenRequest r;
  ASSERT_TRUE(chat({{"logit_bias", {{"50", -100}, {"7", 2.5}}}}, &r).ok());
  ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.sampling.logit_bias[0], (std::pair<int32_t, float>{7, 2.5f}));  // sorted by token
  EXPECT_EQ(r.sampling.logit_bias[1], (std::pair<int32_t, float>{50, -100.f}));
  EXPECT_TRUE(chat({{"logit_bias", Json::object()}}).ok());
  EXPECT_TRUE(chat({{"logit_bias", nullptr}}).ok());
  EXPECT_EQ(chat({{"logit_bias", {{"5", 101}}}}).param, "logit_bias.5");
  EXPECT_EQ(chat({{"logit_bias", {{"5", "x"}}}}).param, "logit_bias.5");
  EXPECT_EQ(chat({{"logit_bias", {{"1000", 1}}}}).param, "logit_bias");  // vocab 1000
  EXPECT_EQ(chat({{"logit_bias", {{"a", 1}}}}).param, "logit_bias");
  EXPECT_EQ(chat({{"logit_bias", {{"-1", 1}}}}).param, "logit_bias");
  EXPECT_EQ(chat({{"logit_bias", {{"05", 1}, {"5", 1}}}}).param, "logit_bias");  // the same token twice
  EXPECT_EQ(chat({{"logit_bias", Json::array()}}).param, "logit_bias");
  GenRequest c;
  ASSERT_TRUE(parse_completion_request(Json::parse(R"({"prompt": "x", "logit_bias": {"3": 1}})"), limits(), &c).ok());
  EXPECT_EQ(c.sampling.logit_bias.size(), 1u);
}

TEST(Protocol, TypesAndRanges) {
  EXPECT_EQ(chat({{"temperature", "hot"}}).param, "temperature");
  EXPECT_EQ(chat({{"temperature", 2.5}}).param, "temperature");
  EXPECT_EQ(chat({{"top_p", 0}}).param, "top_p");
  EXPECT_EQ(chat({{"max_tokens", 0}}).param, "max_tokens");
  EXPECT_EQ(chat({{"max_tokens", 1.5}}).param, "max_tokens");
  EXPECT_EQ(chat({{"n", 0}}).param, "n");
  EXPECT_EQ(chat({{"n", 17}}).param, "n");
  EXPECT_EQ(chat({{"stop", 3}}).param, "stop");
  EXPECT_EQ(chat({{"stop", Json::array({""})}}).param, "stop");
  EXPECT_EQ(chat({{"top_logprobs", 2}}).param, "top_logprobs");  // needs logprobs
  EXPECT_EQ(chat({{"stream_options", {{"include_usage", true}}}}).param, "stream_options");  // needs stream
  EXPECT_EQ(chat({{"ignore_eos", 1}}).param, "ignore_eos");
  EXPECT_EQ(chat({{"stop_token_ids", Json::array({5000})}}).param, "stop_token_ids[0]");
  EXPECT_TRUE(chat({{"temperature", nullptr}}).ok());  // null means default
  EXPECT_EQ(chat({{"top_k", -1}}).status, 0);
}

TEST(Protocol, Messages) {
  GenRequest r;
  Json body = Json::parse(R"({"messages": [
    {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"}]})");
  ASSERT_TRUE(parse_chat_request(body, limits(), &r).ok());
  EXPECT_EQ(r.messages[0]["content"], "ab");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"]["x"], 1);  // decoded for templates
  EXPECT_EQ(r.messages[3]["tool_call_id"], "c1");

  auto err = [&](const char* text) {
    GenRequest g;
    return parse_chat_request(Json::parse(text), limits(), &g);
  };
  EXPECT_EQ(err(R"({"messages": []})").param, "messages");
  EXPECT_EQ(err(R"({"messages": "hi"})").param, "messages");
  EXPECT_EQ(err(R"({"messages": [{"role": "wizard", "content": "x"}]})").param, "messages[0].role");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").param,
            "messages[0].content[0].type");
  EXPECT_EQ(err(R"({"messages": [{"role": "tool", "content": "x"}]})").param, "messages[0].tool_call_id");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x", "audio": 1}]})").param, "messages[0].audio");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x", "reasoning_content": "r"}]})").param,
            "messages[0].reasoning_content");
  EXPECT_EQ(err(R"({"messages": [{"role": "assistant", "content": "x", "reasoning": 3}]})").param,
            "messages[0].reasoning");
  EXPECT_EQ(err(R"([1])").status, 400);
}

// Earlier assistant turns come back as clients got them: reasoning under
// either name, null audio / function_call / refusal, annotations, refusal
// parts, and the legacy function_call as a tool call.
TEST(Protocol, AssistantHistoryAsReturned) {
  GenRequest r;
  Json body = Json::parse(R"({"messages": [
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "a", "reasoning_content": "thought 1", "audio": null, "function_call": null,
     "refusal": null, "annotations": []},
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "reasoning": "thought 2"},
    {"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{\"a\": 1}"}}]})");
  ApiError e = parse_chat_request(body, limits(), &r);
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(r.messages[1]["reasoning_content"], "thought 1");
  EXPECT_EQ(r.messages[2]["reasoning_content"], "thought 2");
  EXPECT_EQ(r.messages[2]["content"], "no");
  EXPECT_EQ(r.messages[3]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(r.messages[3]["tool_calls"][0]["function"]["arguments"]["a"], 1);
}

TEST(Protocol, Tools) {
  GenRequest r;
  Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}])");
  ASSERT_TRUE(chat({{"tools", tools}}, &r).ok());
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kAuto);
  ASSERT_TRUE(chat({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}}, &r).ok());
  EXPECT_EQ(r.tool_choice.allowed_names(), std::vector<std::string>{"g"});
  EXPECT_EQ(chat({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "h"}}}}}}).status, 400);
  EXPECT_EQ(chat({{"tools", Json::array({{{"type", "function"}}})}}).param, "tools");
  EXPECT_EQ(chat({{"tool_choice", "sometimes"}}).status, 400);
}

TEST(Protocol, CompletionPrompts) {
  auto parse = [](const char* text, GenRequest* r) { return parse_completion_request(Json::parse(text), limits(), r); };
  GenRequest a, b, c, d, e;
  ASSERT_TRUE(parse(R"({"prompt": "hi"})", &a).ok());
  EXPECT_EQ(a.prompts.size(), 1u);
  ASSERT_TRUE(parse(R"({"prompt": ["x", "y"], "echo": true, "logprobs": 2})", &b).ok());
  EXPECT_EQ(b.prompts.size(), 2u);
  EXPECT_EQ(b.sampling.logprobs, 2);
  EXPECT_TRUE(b.echo);
  ASSERT_TRUE(parse(R"({"prompt": [1, 2, 3]})", &c).ok());
  EXPECT_TRUE(c.prompts[0].is_tokens);
  EXPECT_EQ(c.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_TRUE(parse(R"({"prompt": [[1], [2, 3]]})", &d).ok());
  EXPECT_EQ(d.prompts.size(), 2u);
  EXPECT_EQ(parse(R"({"prompt": [1, "a"]})", &e).param, "prompt[1]");
  GenRequest f;
  EXPECT_EQ(parse(R"({"prompt": [1000]})", &f).param, "prompt[0]");
  GenRequest g;
  EXPECT_EQ(parse(R"({"prompt": []})", &g).param, "prompt");
  GenRequest h;
  EXPECT_EQ(parse(R"({})", &h).param, "prompt");
  GenRequest i;
  EXPECT_EQ(parse(R"({"prompt": "x", "messages": []})", &i).param, "messages");
  GenRequest j;
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": true})", &j).param, "logprobs");
}

TEST(Protocol, ContextFitClampsMaxTokensUnlessStrict) {
  int mt = 0;
  ASSERT_TRUE(fit_context(10, 20, 16, 100, false, "messages", "max_tokens", &mt).ok());
  EXPECT_EQ(mt, 20);
  // The prompt fits, max_tokens does not: clamped to the room left.
  ASSERT_TRUE(fit_context(90, 32000, 16, 100, false, "messages", "max_tokens", &mt).ok());
  EXPECT_EQ(mt, 10);
  ASSERT_TRUE(fit_context(90, std::nullopt, 100, 100, true, "messages", "max_tokens", &mt).ok());  // default: all that fits
  EXPECT_EQ(mt, 10);
  // strict: a 400 naming the max_tokens field, with vLLM's numbers.
  ApiError e = fit_context(90, 20, 16, 100, true, "messages", "max_completion_tokens", &mt);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "max_completion_tokens");
  EXPECT_NE(e.message.find("maximum context length is 100 tokens"), std::string::npos);
  EXPECT_NE(e.message.find("110 tokens (90 in the messages, 20 in the completion)"), std::string::npos);
  // A prompt that leaves no room is a 400 naming the prompt, strict or not.
  EXPECT_EQ(fit_context(100, 1, 16, 100, false, "messages", "max_tokens", &mt).param, "messages");
  EXPECT_EQ(fit_context(150, std::nullopt, 16, 100, false, "prompt", "max_tokens", &mt).param, "prompt");
  GenRequest r;
  ASSERT_TRUE(chat({{"strict_max_tokens", true}, {"max_completion_tokens", 5}}, &r).ok());
  EXPECT_TRUE(r.strict_max_tokens);
  EXPECT_EQ(r.max_tokens_param, "max_completion_tokens");
}

TEST(ApiErrors, ShapeAndStatusMapping) {
  Json j = bad_request("nope", "temperature", "invalid_value").to_json();
  EXPECT_EQ(j.dump(), R"({"error":{"message":"nope","type":"invalid_request_error","param":"temperature","code":"invalid_value"}})");
  EXPECT_TRUE(bad_request("x").to_json()["error"]["param"].is_null());
  EXPECT_EQ(api_error_from_status(invalid_argument("x")).status, 400);
  EXPECT_EQ(api_error_from_status(out_of_range("x")).status, 400);
  EXPECT_EQ(api_error_from_status(not_found("x")).status, 404);
  ApiError q = api_error_from_status(resource_exhausted("full"));
  EXPECT_EQ(q.status, 429);
  EXPECT_GT(q.retry_after_s, 0);
  EXPECT_EQ(api_error_from_status(unavailable("x")).status, 503);
  EXPECT_EQ(api_error_from_status(internal_error("x")).status, 500);
}

TEST(StopMatcher, HoldsBackPartialMatches) {
  StopMatcher m({"STOP"});
  bool stopped = false;
  EXPECT_EQ(m.feed("hello S", &stopped), "hello ");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.feed("T", &stopped), "");
  EXPECT_EQ(m.feed("x", &stopped), "STx");  // not a stop after all
  EXPECT_EQ(m.feed(" and ST", &stopped), " and ");
  EXPECT_EQ(m.feed("OP tail", &stopped), "");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(m.feed("more", &stopped), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, EarliestOfSeveralAndFlush) {
  StopMatcher m({"world", "lo w"});
  bool stopped = false;
  EXPECT_EQ(m.feed("hello world", &stopped), "hel");
  EXPECT_TRUE(stopped);
  StopMatcher n({"abc"});
  EXPECT_EQ(n.feed("xxab", &stopped), "xx");
  EXPECT_EQ(n.flush(), "ab");  // generation ended: the held text is real output
  StopMatcher none({});
  EXPECT_EQ(none.feed("anything", &stopped), "anything");
  StopMatcher inside({"\n\n"});
  EXPECT_EQ(inside.feed("a\n", &stopped), "a");
  EXPECT_EQ(inside.feed("\nb", &stopped), "");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcher, MultiByteText) {
  StopMatcher m({"é!"});
  bool stopped = false;
  EXPECT_EQ(m.feed("caf\xC3\xA9", &stopped), "caf");
  EXPECT_EQ(m.feed("?", &stopped), "\xC3\xA9?");
}

TEST(Auth, BearerCheck) {
  const Secret k1 = Secret::create("k1").value();
  EXPECT_TRUE(check_bearer("Bearer k1", k1));
  EXPECT_FALSE(check_bearer("Bearer k2", k1));
  EXPECT_FALSE(check_bearer("Bearer k1x", k1));
  EXPECT_FALSE(check_bearer("Bearer k", k1));
  EXPECT_FALSE(check_bearer("k1", k1));
  EXPECT_FALSE(check_bearer("", k1));
}

TEST(ServeFlags, ValidatesAndNamesTheFlag) {
  bool help = false;
  std::string model = std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo";
  auto ok = parse_serve_args({"--model", model, "--max-batch", "3", "--api-key", "k"}, &help);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok->max_batch, 3);
  EXPECT_EQ(ok->http.host, "127.0.0.1");
  EXPECT_EQ(ok->served_model_name, "north-mini-demo");
  EXPECT_EQ(ok->summary().find("k "), std::string::npos);  // key not logged
  auto bad = parse_serve_args({"--model", model, "--max-batch", "9"}, &help);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("max-batch"), std::string::npos);
  auto unknown = parse_serve_args({"--model", model, "--bogus", "1"}, &help);
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("bogus"), std::string::npos);
  EXPECT_FALSE(parse_serve_args({}, &help).is_ok());
  auto parser = parse_serve_args({"--model", model, "--tool-call-parser", "xml"}, &help);
  ASSERT_FALSE(parser.is_ok());
  EXPECT_NE(parser.status().message().find("tool-call-parser"), std::string::npos);
}

}  // namespace
}  // namespace ms::server
