// megaserve inspect: loads and validates a checkpoint, prints its config and
// tensor inventory. Exit code 0 only when the model would load for serving:
// weights (shapes, dtypes, finite values), and when the directory has a
// tokenizer, the tokenizer (ids inside the model's vocabulary) and its chat
// template (it parses, and a one-message chat renders inside the limits).
#include <cstdio>
#include <filesystem>

#include "chat/chat_prompt.h"
#include "cli/commands.h"
#include "core/flags.h"
#include "model/model_loader.h"

namespace ms::cli {
namespace {

// 0: fine or nothing to check; 1: the tokenizer or template would stop `serve`.
int inspect_tokenizer(const std::string& dir, const ModelConfig& config) {
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
    std::printf("tokenizer: none (serve needs tokenizer.json)\n");
    return 0;
  }
  auto tok = Tokenizer::load(dir);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "megaserve inspect: %s\n", tok.status().message().c_str());
    return 1;
  }
  if (Status s = tok->check_fits_vocab(config.vocab_size, dir + "/config.json"); !s.is_ok()) {
    std::fprintf(stderr, "megaserve inspect: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("tokenizer: %d ids, %zu added tokens\n", tok->vocab_size(), tok->added_tokens().size());
  if (tok->chat_template().empty()) {
    std::printf("chat template: none (/v1/chat/completions would answer 400)\n");
    return 0;
  }
  ChatTemplateOptions o;
  o.name = tok->chat_template_source();
  auto t = ChatTemplate::create(tok->chat_template(), o);
  if (!t.is_ok()) {
    std::fprintf(stderr, "megaserve inspect: %s\n", t.status().message().c_str());
    return 1;
  }
  auto p = render_sample_chat(*t, *tok);
  if (!p.is_ok()) {
    const bool limit = p.status().code() == StatusCode::kResourceExhausted;
    std::fprintf(stderr, "%s: a one-message chat does not render: %s\n", limit ? "megaserve inspect" : "warning",
                 p.status().message().c_str());
    if (limit) return 1;
    std::printf("chat template: %s parses\n", o.name.c_str());
    return 0;
  }
  std::printf("chat template: %s parses; a one-message chat renders to %zu tokens\n", o.name.c_str(), p->ids.size());
  return 0;
}

}  // namespace

int cmd_inspect(const std::vector<std::string>& args) {
  Flags f;
  f.add("model", "checkpoint directory", "").add("tensors", "list every tensor", "", true);
  if (Status s = f.parse(args); !s.is_ok() || f.str("model").empty()) {
    std::fprintf(stderr, "megaserve inspect: %s\n%s", s.is_ok() ? "flag --model is required" : s.message().c_str(),
                 f.usage("inspect").c_str());
    return 2;
  }
  auto m = load_model(f.str("model"), [](const std::string& msg) { std::fprintf(stderr, "load: %s\n", msg.c_str()); });
  if (!m.is_ok()) {
    std::fprintf(stderr, "megaserve inspect: %s\n", m.status().message().c_str());
    return 1;
  }
  const ModelConfig& c = (*m)->config;
  std::printf("%s\n", c.summary().c_str());
  std::printf("tensors: %zu, %.3f GB\n", (*m)->checkpoint->tensors().size(), (*m)->checkpoint->total_bytes() / 1e9);
  std::printf("layers:");
  for (int i = 0; i < c.n_layers; ++i)
    std::printf(" %d:%s%s%s", i, c.layers[i].sliding ? "swa" : "full", c.layers[i].rope ? "" : "-nope",
                c.layers[i].moe ? "-moe" : "-dense");
  std::printf("\n");
  if (f.boolean("tensors"))
    for (const auto& [name, t] : (*m)->checkpoint->tensors())
      std::printf("%-64s %-5s %s\n", name.c_str(), dtype_name(t.dtype), t.shape_str().c_str());
  return inspect_tokenizer(f.str("model"), c);
}

}  // namespace ms::cli
