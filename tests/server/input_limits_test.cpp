// Server-side checks of issue 14: request fields nested too deeply, the
// context-length check near INT32_MAX, and where the API key comes from.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "server/openai_protocol.h"
#include "server/serve_command.h"

namespace ms::server {
namespace {

const std::string kModel = std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo";

TEST(InputLimits, ContextLengthDoesNotOverflowNearInt32Max) {
  int mt = 0;
  // strict: the request is refused, the total counted in 64 bits.
  ApiError e = fit_context(5, INT32_MAX, 16, 4096, /*strict=*/true, "messages", "max_tokens", &mt);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_NE(e.message.find("you requested 2147483652 tokens (5 in the messages, 2147483647 in the completion)"),
            std::string::npos)
      << e.message;
  // Not strict: clamped to what fits.
  ASSERT_TRUE(fit_context(5, INT32_MAX, 16, 4096, false, "messages", "max_tokens", &mt).ok());
  EXPECT_EQ(mt, 4091);
  EXPECT_FALSE(fit_context(INT32_MAX, INT32_MAX, 16, INT32_MAX, true, "messages", "max_tokens", &mt).ok());
  ASSERT_TRUE(fit_context(1, INT32_MAX - 1, 16, INT32_MAX, true, "messages", "max_tokens", &mt).ok());
  EXPECT_EQ(mt, INT32_MAX - 1);
}

// A tool call's `arguments` string is JSON the template walks: parsed with
// the same depth bound as the body, a 400 naming the field past it.
TEST(InputLimits, DeepToolCallArgumentsAreA400NamingTheField) {
  auto body = [](int depth) {
    Json call = {{"id", "c1"},
                 {"type", "function"},
                 {"function", {{"name", "f"}, {"arguments", std::string(depth, '[') + std::string(depth, ']')}}}};
    return Json{{"messages", Json::array({{{"role", "user"}, {"content", "hi"}},
                                          {{"role", "assistant"}, {"content", ""}, {"tool_calls", {call}}}})}};
  };
  GenRequest r;
  ApiError e = parse_chat_request(body(40000), {}, &r);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "json_too_deep");
  EXPECT_EQ(e.param, "messages[1].tool_calls[0].function.arguments");
  EXPECT_NE(e.message.find("limit of 128 levels"), std::string::npos) << e.message;
  GenRequest ok;
  EXPECT_TRUE(parse_chat_request(body(100), {}, &ok).ok());
}

class ApiKeyFlags : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("MEGASERVE_API_KEY"); }
  void TearDown() override {
    unsetenv("MEGASERVE_API_KEY");
    if (!file_.empty()) std::filesystem::remove(file_);
  }
  std::string write_key(const std::string& text) {
    file_ = (std::filesystem::temp_directory_path() / ("ms_key_" + std::to_string(::getpid()))).string();
    std::ofstream(file_) << text;
    return file_;
  }
  Result<ServeConfig> parse(std::vector<std::string> args) {
    args.insert(args.begin(), {"--model", kModel});
    bool help = false;
    return parse_serve_args(args, &help);
  }
  std::string file_;
};

TEST_F(ApiKeyFlags, FileEnvironmentAndFlag) {
  auto c = parse({"--api-key-file", write_key("s3cret\n")});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->http.api_key, "s3cret");
  setenv("MEGASERVE_API_KEY", "from-env", 1);
  c = parse({});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->http.api_key, "from-env");
  c = parse({"--api-key", "flag"});  // an explicit flag wins over the environment
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->http.api_key, "flag");
  EXPECT_EQ(c->summary().find("flag"), std::string::npos);
}

TEST_F(ApiKeyFlags, BadKeysAreErrorsNamingTheFlag) {
  auto c = parse({"--api-key", "a", "--api-key-file", write_key("b")});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("one of --api-key and --api-key-file"), std::string::npos);
  c = parse({"--api-key-file", write_key("\n")});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("is empty"), std::string::npos) << c.status().message();
  c = parse({"--api-key-file", "/nonexistent/key"});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("--api-key-file"), std::string::npos) << c.status().message();
  c = parse({"--api-key", std::string(5000, 'k')});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("over the limit of 4096"), std::string::npos) << c.status().message();
}

TEST_F(ApiKeyFlags, SpecialTokensInContentIsOffByDefault) {
  auto c = parse({});
  ASSERT_TRUE(c.is_ok());
  EXPECT_FALSE(c->special_tokens_in_content);
  c = parse({"--special-tokens-in-content"});
  ASSERT_TRUE(c.is_ok());
  EXPECT_TRUE(c->special_tokens_in_content);
}

}  // namespace
}  // namespace ms::server
