// megaserve generate: runs a prompt through a model (greedy) and prints the
// continuation, as token ids and, when the model directory has a tokenizer,
// as text.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "server/backend_factory.h"
#include "cli/commands.h"
#include "core/flags.h"
#include "engine/generate.h"
#include "tokenizer/tokenizer.h"

namespace ms::cli {

int cmd_generate(const std::vector<std::string>& args) {
  Flags f;
  f.add("model", "checkpoint directory (config.json + safetensors)", "")
      .add("prompt", "prompt text (needs tokenizer.json in the model directory)", "")
      .add("prompt-ids", "prompt as comma-separated token ids", "")
      .add("max-tokens", "tokens to generate", "32");
  add_backend_flags(f);
  f.add("decode-backend", "cuda: decode steps on the megakernel, the layered kernels, or auto", "layered")
      .add("prefill-chunk", "prompt tokens per step (0: whole prompt)", "0")
      .add("block-size", "KV block size in tokens", "64")
      .add("threads", "CPU threads for the ref backend (0: all)", "0")
      .add("ignore-eos", "do not stop at the end-of-sequence token", "", true);
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "megaserve generate: %s\n", s.message().c_str());
    return 2;
  };
  if (Status s = f.parse(args); !s.is_ok()) {
    std::fprintf(stderr, "%s", f.usage("generate").c_str());
    return fail(s);
  }
  if (f.help_requested()) {
    std::printf("%s", f.usage("generate").c_str());
    return 0;
  }
  if (f.str("model").empty()) return fail(invalid_argument("flag --model is required"));
  if (f.str("prompt").empty() == f.str("prompt-ids").empty())
    return fail(invalid_argument("give exactly one of --prompt and --prompt-ids"));
  auto max_tokens = f.integer("max-tokens", 1, 1 << 20);
  auto chunk = f.integer("prefill-chunk", 0, 1 << 20);
  auto block = f.integer("block-size", 1, 4096);
  auto threads = f.integer("threads", 0, 1024);
  auto device = f.has("device") ? f.integer("device", 0, 1023) : Result<int64_t>(int64_t(-1));
  auto seed = f.integer("seed", 0, INT64_MAX);
  for (const auto* r : {&max_tokens, &chunk, &block, &threads, &device, &seed})
    if (!r->is_ok()) return fail(r->status());
  auto format = parse_load_format(f.str("load-format"));
  if (!format.is_ok()) return fail(format.status());
  auto decision = resolve_backend(f.str("backend"), static_cast<int>(*device), probe_gpus());
  if (!decision.is_ok()) return fail(decision.status());
  std::fprintf(stderr, "%s\n", decision->log_line.c_str());

  const std::string dir = f.str("model");
  auto model = load_for_backend(dir, *format, decision->name, static_cast<uint64_t>(*seed),
                                [](const std::string& m) { std::fprintf(stderr, "load: %s\n", m.c_str()); });
  if (!model.is_ok()) return fail(model.status());
  std::fprintf(stderr, "model: %s\n", (*model)->config.summary().c_str());

  std::optional<Tokenizer> tok;
  if (std::filesystem::exists(dir + "/tokenizer.json")) {
    auto t = Tokenizer::load(dir);
    if (!t.is_ok()) return fail(t.status());
    if (Status s = t->check_fits_vocab((*model)->config.vocab_size, dir + "/config.json"); !s.is_ok()) return fail(s);
    tok = std::move(*t);
  }
  std::vector<int32_t> prompt;
  if (!f.str("prompt").empty()) {
    if (!tok) return fail(not_found(dir + "/tokenizer.json: needed for --prompt (or use --prompt-ids)"));
    prompt = tok->encode(f.str("prompt"), /*add_special_tokens=*/true);
  } else {
    auto ids = parse_int_list("prompt-ids", f.str("prompt-ids"));
    if (!ids.is_ok()) return fail(ids.status());
    for (int64_t id : *ids) {
      if (id < 0 || id >= (*model)->config.vocab_size)
        return fail(invalid_argument("flag --prompt-ids: token id " + std::to_string(id) + " is out of range [0, " +
                                     std::to_string((*model)->config.vocab_size) + ")"));
      prompt.push_back(static_cast<int32_t>(id));
    }
  }
  BackendChoice bc;
  bc.name = decision->name;
  bc.device = decision->device;
  bc.random_weights = *format == LoadFormat::kDummy && decision->name == "cuda";
  bc.seed = static_cast<uint64_t>(*seed);
  bc.decode = f.str("decode-backend");
  bc.block_size = static_cast<int>(*block);
  bc.threads = static_cast<int>(*threads);
  size_t per_token = size_t(2) * (*model)->config.n_kv_heads * (*model)->config.head_dim * 4 * (*model)->config.n_layers;
  bc.kv_bytes = per_token * (prompt.size() + *max_tokens + 2 * *block) + (size_t(1) << 20);
  auto backend = make_backend(**model, bc);
  if (!backend.is_ok()) return fail(backend.status());

  GenerateOptions go;
  go.max_new_tokens = static_cast<int>(*max_tokens);
  go.prefill_chunk = static_cast<int>(*chunk);
  go.stop_at_eos = !f.boolean("ignore-eos");
  std::optional<StreamingDetokenizer> detok;
  if (tok) detok.emplace(*tok, /*skip_special=*/true);
  go.on_token = [&](int32_t t) {
    if (detok) {
      std::string d = detok->push(t);
      std::fwrite(d.data(), 1, d.size(), stderr);
    }
    return true;
  };
  auto t0 = std::chrono::steady_clock::now();
  auto out = generate_greedy(**backend, prompt, go);
  auto t1 = std::chrono::steady_clock::now();
  if (detok) {
    std::string d = detok->flush();
    std::fprintf(stderr, "%s\n", d.c_str());
  }
  if (!out.is_ok()) return fail(out.status());
  for (size_t i = 0; i < out->size(); ++i) std::printf("%s%d", i ? "," : "", (*out)[i]);
  std::printf("\n");
  if (tok) std::printf("%s\n", tok->decode(*out, true).c_str());
  double s = std::chrono::duration<double>(t1 - t0).count();
  std::fprintf(stderr, "generate: %zu prompt + %zu new tokens in %.3f s (%s backend)\n", prompt.size(), out->size(), s,
               (*backend)->name());
  return 0;
}

}  // namespace ms::cli
