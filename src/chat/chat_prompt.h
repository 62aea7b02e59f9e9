// chat_prompt.h: a chat request's context -> the prompt's text and token ids.
// The template's markup is tokenized with its control tokens; control-token
// text that came from the client is tokenized as text (content_marker.h), so
// a user message cannot inject <|im_end|><|im_start|>system ... . The old
// behaviour (client text may contain control tokens) is an explicit option
// (`megaserve serve --special-tokens-in-content`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace ms {

struct ChatPrompt {
  std::string text;           // the rendered prompt, as the model sees it
  std::vector<int32_t> ids;
  int text_only_tokens = 0;   // special-token texts from the client kept as text
};

struct ChatPromptOptions {
  // true: control-token text in client strings becomes control tokens (the
  // behaviour before issue 14; allows role injection).
  bool special_tokens_in_content = false;
};

// `context`: the template variables. Every string in it is client data
// except the top-level bos_token and eos_token, which the server sets.
// Render errors come back as the template's Status (InvalidArgument).
Result<ChatPrompt> render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                      nlohmann::ordered_json context, const ChatPromptOptions& options = {});

// Renders a one-message chat ("Hello", with the generation prompt), as
// `serve` and `inspect` do before trusting a template: ResourceExhausted
// means a render limit was hit (the template is broken: endless recursion,
// loops, sizes); InvalidArgument may only mean the template wants variables
// a real request brings.
Result<ChatPrompt> render_sample_chat(const ChatTemplate& chat_template, const Tokenizer& tokenizer);

}  // namespace ms
