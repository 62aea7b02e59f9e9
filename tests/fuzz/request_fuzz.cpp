// Fuzz target: an HTTP request body, as the server handles it before the
// engine sees it: bounded JSON parse, the OpenAI chat and completions
// parsers, and for a valid chat request the prompt (demo model's chat
// template + tokenizer, client text guarded). Nothing may crash, hang or
// leak; every id produced must be inside the vocabulary.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "chat/chat_prompt.h"
#include "core/json_parse.h"
#include "server/openai_protocol.h"

namespace {

struct Demo {
  ms::Tokenizer tok;
  ms::ChatTemplate tmpl;
};

const Demo& demo() {
  static const Demo* d = [] {
    const std::string dir = std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo";
    auto tok = ms::Tokenizer::load(dir);
    if (!tok.is_ok()) std::abort();
    ms::ChatTemplateOptions o;
    o.render_limits.max_steps = 200000;  // keep each input fast; the limits are tested elsewhere
    o.render_limits.max_seconds = 2;
    auto t = ms::ChatTemplate::create(tok->chat_template(), o);
    if (!t.is_ok()) std::abort();
    return new Demo{std::move(tok.value()), std::move(t.value())};
  }();
  return *d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Demo& d = demo();
  auto body = ms::parse_ordered_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!body.is_ok()) return 0;
  ms::server::ProtocolLimits limits;
  limits.vocab_size = d.tok.vocab_size();
  ms::server::GenRequest completion;
  (void)ms::server::parse_completion_request(*body, limits, &completion);
  ms::server::GenRequest chat;
  if (!ms::server::parse_chat_request(*body, limits, &chat).ok()) return 0;
  int fitted = 0;
  (void)ms::server::fit_context(static_cast<int>(chat.messages.size()), chat.max_tokens, 16, 4096,
                                chat.strict_max_tokens, "messages", "max_tokens", &fitted);
  nlohmann::ordered_json ctx = chat.chat_template_kwargs;
  ctx["messages"] = chat.messages;
  if (!chat.tools.is_null()) ctx["tools"] = chat.tools;
  ctx["add_generation_prompt"] = chat.add_generation_prompt;
  ctx["bos_token"] = d.tok.bos_token();
  ctx["eos_token"] = d.tok.eos_token();
  auto prompt = ms::render_chat_prompt(d.tmpl, d.tok, std::move(ctx));
  if (prompt.is_ok()) {
    for (int32_t id : prompt->ids)
      if (id < 0 || id >= d.tok.vocab_size()) std::abort();
  }
  return 0;
}
