// chat_prompt.cpp: see chat_prompt.h.
#include "chat/chat_prompt.h"

#include "chat/content_marker.h"

namespace ms {

Result<ChatPrompt> render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                      nlohmann::ordered_json context, const ChatPromptOptions& options) {
  ChatPrompt p;
  if (options.special_tokens_in_content) {
    MS_ASSIGN_OR_RETURN(p.text, chat_template.render(context));
    p.ids = tokenizer.encode(p.text, /*add_special_tokens=*/false, /*parse_special=*/true);
    return p;
  }
  const ContentMarker marker(tokenizer);
  const size_t marked = marker.mark(context, {"bos_token", "eos_token"});
  MS_ASSIGN_OR_RETURN(std::string rendered, chat_template.render(context));
  if (marked == 0) {  // nothing to protect: the common case costs one scan of the strings
    p.text = std::move(rendered);
    p.ids = tokenizer.encode(p.text, /*add_special_tokens=*/false, /*parse_special=*/true);
    return p;
  }
  ContentMarker::Unmarked u = marker.unmark(rendered);
  p.text = std::move(u.text);
  p.text_only_tokens = static_cast<int>(u.text_only.size());
  p.ids = tokenizer.encode_with_text_ranges(p.text, u.text_only, /*add_special_tokens=*/false);
  return p;
}

Result<ChatPrompt> render_sample_chat(const ChatTemplate& chat_template, const Tokenizer& tokenizer) {
  nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                {"add_generation_prompt", true},
                                {"bos_token", tokenizer.bos_token()},
                                {"eos_token", tokenizer.eos_token()}};
  return render_chat_prompt(chat_template, tokenizer, std::move(ctx));
}

}  // namespace ms
