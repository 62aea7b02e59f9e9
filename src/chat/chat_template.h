// chat_template.h: the public, exception-free face of the Jinja engine.
// ChatTemplate::create parses an HF chat template once; render() fills it
// with a JSON context (messages, tools, documents, add_generation_prompt,
// bos_token, eos_token, any extra kwargs), the way transformers'
// apply_chat_template does with trim_blocks=True, lstrip_blocks=True.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/jinja_limits.h"
#include "core/status.h"

namespace ms {

namespace jinja {
class Template;
}

struct ChatTemplateOptions {
  // Where the template came from ("DIR/tokenizer_config.json", the
  // --chat-template file): every error names it.
  std::string name = "chat template";
  // Print lists/dicts/bools like @huggingface/jinja (JSON-ish) instead of
  // Python's str(); only for byte comparison against that reference.
  bool hf_js_repr = false;
  // Pin strftime_now() (tests); otherwise the local clock.
  std::optional<std::tm> now;
  // What parsing and each render may cost (jinja_limits.h).
  jinja::ParseLimits parse_limits;
  jinja::RenderLimits render_limits;
};

class ChatTemplate {
 public:
  // Parse errors come back as InvalidArgument naming the template, the
  // construct and the line.
  static Result<ChatTemplate> create(const std::string& source, ChatTemplateOptions options = {});
  // Render errors come back naming the template and line: InvalidArgument
  // for a mistake (a type error; the template's own raise_exception('msg'),
  // whose message is kept verbatim and alone), ResourceExhausted for a render
  // limit (recursion, time, steps, sizes: jinja_limits.h).
  // Prefer the ordered_json overload: nlohmann::json sorts object keys, so
  // `{{ tools | tojson }}` would not keep the request's key order as Python does.
  Result<std::string> render(const nlohmann::json& context) const;
  Result<std::string> render(const nlohmann::ordered_json& context) const;

 private:
  template <typename Json>
  Result<std::string> render_impl(const Json& context) const;

  std::shared_ptr<const jinja::Template> template_;
  ChatTemplateOptions options_;
};

}  // namespace ms
