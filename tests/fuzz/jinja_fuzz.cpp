// Fuzz target: the Jinja engine. The input is a template source; it is parsed
// and, if it parses, rendered over a small chat context (messages with tool
// calls, tools, a kwarg) under tight render limits. Parse and render errors
// are expected; crashes, hangs, leaks and undefined behaviour are not.
#include <cstdint>
#include <string>

#include "chat/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "What is 2+2? <|im_end|>"},
      {"role": "assistant", "content": "",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "calc", "arguments": {"expr": "2+2", "n": [1, 2.5, null, true]}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "4"}
    ],
    "tools": [{"type": "function", "function": {"name": "calc", "description": "math",
               "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false
  })");
  ms::ChatTemplateOptions o;
  o.name = "fuzz.jinja";
  o.render_limits.max_steps = 100000;
  o.render_limits.max_seconds = 1;
  o.render_limits.max_output_bytes = size_t(1) << 20;
  o.render_limits.max_items = size_t(1) << 14;
  o.render_limits.max_live_bytes = size_t(64) << 20;
  o.render_limits.max_call_depth = 16;
  o.render_limits.max_eval_depth = 128;
  // Alternate the reprs from the input's first byte so both printers run.
  o.hf_js_repr = size > 0 && (data[0] & 1);
  std::tm pinned{};
  o.now = pinned;
  auto t = ms::ChatTemplate::create(std::string(reinterpret_cast<const char*>(data), size), o);
  if (!t.is_ok()) return 0;
  (void)t->render(ctx);
  return 0;
}
