// megaserve inspect: loads and validates a checkpoint, prints its config and
// tensor inventory. Exit code 0 only when the model would load for serving.
#include <cstdio>

#include "cli/commands.h"
#include "core/flags.h"
#include "model/model_loader.h"

namespace ms::cli {

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
  return 0;
}

}  // namespace ms::cli
