// megaserve init-random: writes a random-weight checkpoint of a known shape.
#include <cstdio>

#include "cli/commands.h"
#include "core/flags.h"
#include "model/init_random.h"

namespace ms::cli {

int cmd_init_random(const std::vector<std::string>& args) {
  Flags f;
  f.add("arch", "nmc (= cohere2_moe) | qwen3_moe | llama | qwen3", "nmc")
      .add("size", "tiny | full (full nmc = the exact North Mini Code shape, ~61 GB)", "tiny")
      .add("seed", "random seed", "0")
      .add("vocab", "override the vocabulary size (e.g. to match a tokenizer)", "")
      .add("layers", "keep only the first N layers of the shape (a cut of the full shape, e.g. to time loading from a disk "
                     "too small for all of it)",
           "")
      .add("stddev", "standard deviation of matrix entries", "0.02")
      .add("out", "output directory", "");
  if (Status s = f.parse(args); !s.is_ok()) {
    std::fprintf(stderr, "megaserve init-random: %s\n%s", s.message().c_str(), f.usage("init-random").c_str());
    return 2;
  }
  if (f.help_requested()) {
    std::printf("%s", f.usage("init-random").c_str());
    return 0;
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "megaserve init-random: %s\n", s.message().c_str());
    return 2;
  };
  if (f.str("out").empty()) return fail(invalid_argument("flag --out is required"));
  auto arch = parse_arch(f.str("arch"));
  if (!arch.is_ok()) return fail(arch.status().with_context("flag --arch"));
  auto cfg = preset_config(*arch, f.str("size"));
  if (!cfg.is_ok()) return fail(cfg.status());
  auto seed = f.integer("seed", 0, INT64_MAX);
  if (!seed.is_ok()) return fail(seed.status());
  auto stddev = f.number("stddev", 0.0, 10.0);
  if (!stddev.is_ok()) return fail(stddev.status());
  if (f.has("vocab")) {
    auto v = f.integer("vocab", 16, 1 << 22);
    if (!v.is_ok()) return fail(v.status());
    cfg->vocab_size = static_cast<int>(*v);
    for (int& e : cfg->eos_ids) e %= cfg->vocab_size;
    if (cfg->bos_id >= 0) cfg->bos_id %= cfg->vocab_size;
  }
  if (f.has("layers")) {
    auto n = f.integer("layers", 1, cfg->n_layers);
    if (!n.is_ok()) return fail(n.status());
    cfg->n_layers = static_cast<int>(*n);
    cfg->layers.resize(static_cast<size_t>(*n));
  }
  std::fprintf(stderr, "init-random: %s\n", cfg->summary().c_str());
  InitRandomOptions opt;
  opt.seed = static_cast<uint64_t>(*seed);
  opt.stddev = static_cast<float>(*stddev);
  int last_pct = -1;
  opt.progress = [&](uint64_t done, uint64_t total) {
    int pct = static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total));
    if (pct != last_pct && total > (64u << 20)) {
      std::fprintf(stderr, "\rinit-random: %3d%% of %.1f GB", pct, static_cast<double>(total) / 1e9);
      last_pct = pct;
    }
  };
  Status s = write_random_checkpoint(*cfg, f.str("out"), opt);
  if (last_pct >= 0) std::fprintf(stderr, "\n");
  if (!s.is_ok()) return fail(s);
  std::fprintf(stderr, "init-random: wrote %s\n", f.str("out").c_str());
  return 0;
}

}  // namespace ms::cli
