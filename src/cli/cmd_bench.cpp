// megaserve bench: `bench decode` (decode tok/s per batch size and context,
// % of speed of light), `bench prefill` (time to prefill one prompt of N
// tokens) and `bench serve` (a load generator against any OpenAI-compatible
// server).
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>

#include "cli/commands.h"
#include "core/flags.h"
#include "model/model_loader.h"
#include "server/serve_command.h"
#ifdef MEGASERVE_WITH_CUDA
#include "gpu/bench_decode.h"
#include "gpu/common/device_info.h"
#include "gpu/gpu_backend.h"
#endif

namespace ms::cli {

namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "megaserve bench: %s\n", s.message().c_str());
  return 2;
}

// "--random nmc-full" -> (arch, size)
Result<ModelConfig> random_config(const std::string& spec) {
  auto dash = spec.rfind('-');
  if (dash == std::string::npos)
    return invalid_argument("flag --random: expected ARCH-SIZE such as nmc-full or qwen3_moe-tiny, got '" + spec + "'");
  MS_ASSIGN_OR_RETURN(Arch arch, parse_arch(spec.substr(0, dash)));
  return preset_config(arch, spec.substr(dash + 1));
}

// Flags every GPU benchmark shares: where the weights come from, the backend,
// KV block size, seed, JSON output.
void add_model_flags(Flags& f) {
  f.add("model", "checkpoint directory", "")
      .add("random", "random weights of a preset shape built on the GPU: nmc-full, qwen3_moe-full, ...", "")
      .add("backend", "cuda (the GPU backend; 'layered' is accepted as its old name)", "cuda")
      .add("block-size", "KV block size", "64")
      .add("seed", "random seed", "1")
      .add("json", "also write the result as JSON to this file", "");
}

// Parses args; usage on errors and --help. Returns -1 to go on, else the exit code.
int parse_bench_flags(Flags& f, const std::vector<std::string>& args, const char* name) {
  if (Status s = f.parse(args); !s.is_ok()) {
    std::fprintf(stderr, "%s", f.usage(name).c_str());
    return fail(s);
  }
  if (f.help_requested()) {
    std::printf("%s", f.usage(name).c_str());
    return 0;
  }
  if (f.str("model").empty() == f.str("random").empty()) return fail(invalid_argument("give exactly one of --model and --random"));
  if (f.str("backend") != "cuda" && f.str("backend") != "layered")
    return fail(invalid_argument("flag --backend: unknown backend '" + f.str("backend") + "' (available: cuda)"));
  return -1;
}

Status write_json_file(const std::string& path, const std::string& text) {
  if (path.empty()) return Status::ok();
  std::ofstream out(path);
  out << text << "\n";
  if (!out) return internal_error(path + ": write failed");
  return Status::ok();
}

#ifdef MEGASERVE_WITH_CUDA
// The GPU backend on --model's checkpoint or --random's preset shape (random
// weights built on the GPU), with `o` (block size set from the flags) and the
// KV blocks per group `blocks_for` gives for the model, or, when
// blocks_within is set, that it gives for the bytes the device has free for
// the pool once the weights and executors are allocated.
Result<std::unique_ptr<gpu::GpuBackend>> make_bench_backend(
    const Flags& f, const char* what, uint64_t seed, gpu::GpuBackendOptions o,
    const std::function<std::vector<int>(const ModelConfig&, int block_size)>& blocks_for,
    const std::function<std::vector<int>(const ModelConfig&, int block_size, size_t budget)>& blocks_within = {}) {
  std::unique_ptr<LoadedModel> model;
  ModelConfig cfg;
  if (!f.str("model").empty()) {
    MS_ASSIGN_OR_RETURN(model, load_model(f.str("model"), [](const std::string& s) {
                          std::fprintf(stderr, "load: %s\n", s.c_str());
                        }));
    cfg = model->config;
  } else {
    MS_ASSIGN_OR_RETURN(cfg, random_config(f.str("random")));
  }
  if (blocks_within) {
    o.kv_blocks_within = [blocks_within, cfg, bs = o.block_size](size_t budget) {
      return blocks_within(cfg, bs, budget);
    };
  } else {
    o.kv_blocks = blocks_for(cfg, o.block_size);
  }
  std::fprintf(stderr, "%s: %s\n", what, cfg.summary().c_str());
  return model ? gpu::GpuBackend::create(cfg, model->weights, o) : gpu::GpuBackend::create_random(cfg, seed, o);
}
#endif

int bench_decode_cmd(const std::vector<std::string>& args) {
  Flags f;
  add_model_flags(f);
  f.add("batch", "batch sizes, comma-separated (1..8)", "1,2,4,8")
      .add("context", "context lengths, comma-separated (K = 1024)", "1K,8K")
      .add("iters", "timed decode steps per point (median reported)", "30")
      .add("warmup", "untimed steps per point", "5")
      .add("decode-backend", "decode paths timed side by side, comma-separated: layered, megakernel",
           "layered,megakernel")
      .add("watchdog-ms", "megakernel: a dependency wait longer than this abandons the step", "2000")
      .add("barrier-ablation", "megakernel: grid-wide barriers between the phases of every layer (ablation)", "",
           true)
      .add("mk-variants",
           "megakernel: tunings timed one after another in this process, ';'-separated; each 'default' or "
           "comma-separated settings (order=oproj_first|claims_first|oproj_between, gu_batch=N, down_batch=N, "
           "gu_gate=N, down_gate=N, qkv_run=N, o_run=N, costs=0|1|2, attn_pct=N, attn_wave=-1|0|1, route_fast=0|1, head_sms=N, o_sms=N, local_route=0|1, async_signal=0|1, gemv_warps=0|1, static_pct=0..100, down_window=0|1, attn_pack=0|1, attn_ablate=0..3, poll_ns=0..4096, norm_direct=0|1)",
           "")
      .add("timeline", "megakernel: also write one step's per-instruction times (first batch and context) as JSON", "");
  if (int rc = parse_bench_flags(f, args, "bench decode"); rc >= 0) return rc;
  std::vector<std::string> path_names;
  for (size_t at = 0; at <= f.str("decode-backend").size();) {
    const size_t comma = std::min(f.str("decode-backend").find(',', at), f.str("decode-backend").size());
    path_names.push_back(f.str("decode-backend").substr(at, comma - at));
    at = comma + 1;
  }
  auto batches = parse_int_list("batch", f.str("batch"));
  auto contexts = parse_int_list("context", f.str("context"));
  if (!batches.is_ok()) return fail(batches.status());
  if (!contexts.is_ok()) return fail(contexts.status());
  for (int64_t b : *batches)
    if (b < 1 || b > 8) return fail(invalid_argument("flag --batch: " + std::to_string(b) + " is outside 1..8"));
  for (int64_t c : *contexts)
    if (c < 1) return fail(invalid_argument("flag --context: must be positive"));
  auto iters = f.integer("iters", 1, 100000);
  auto warmup = f.integer("warmup", 0, 100000);
  auto block = f.integer("block-size", 1, 1024);
  auto seed = f.integer("seed", 0, INT64_MAX);
  auto watchdog = f.integer("watchdog-ms", 1, 600000);
  for (const auto* r : {&iters, &warmup, &block, &seed, &watchdog})
    if (!r->is_ok()) return fail(r->status());
#ifdef MEGASERVE_WITH_CUDA
  std::vector<gpu::DecodePath> paths;
  for (const std::string& n : path_names) {
    auto p = gpu::parse_decode_path(n);
    if (!p.is_ok()) return fail(invalid_argument("flag --decode-backend: " + p.status().message()));
    if (*p == gpu::DecodePath::kAuto)
      return fail(invalid_argument("flag --decode-backend: bench decode times each path on its own; 'auto' is for "
                                   "serve and generate"));
    paths.push_back(*p);
  }
  std::vector<gpu::MkTuning> variants;
  for (size_t at = 0; !f.str("mk-variants").empty() && at <= f.str("mk-variants").size();) {
    const std::string& all = f.str("mk-variants");
    const size_t semi = std::min(all.find(';', at), all.size());
    auto t = gpu::parse_mk_tuning(all.substr(at, semi - at));
    if (!t.is_ok()) return fail(invalid_argument("flag --mk-variants: " + t.status().message()));
    variants.push_back(*t);
    at = semi + 1;
  }
  if (!gpu::has_gpu()) return fail(unavailable("bench decode needs a CUDA GPU; none is available"));
  int max_c = 1;
  for (int64_t c : *contexts) max_c = std::max<int>(max_c, static_cast<int>(c));
  gpu::GpuBackendOptions o;
  o.block_size = static_cast<int>(*block);
  o.max_context = max_c + 64;
  o.decode = gpu::DecodePath::kLayered;
  for (gpu::DecodePath p : paths)
    if (p == gpu::DecodePath::kMegakernel) o.decode = p;  // the executor is created; each row picks its path
  o.mk.watchdog_ms = *watchdog;
  o.mk.barrier_between_phases = f.boolean("barrier-ablation");
  if (!variants.empty()) o.mk.tuning = variants[0];
  o.mk.record_timeline = !f.str("timeline").empty();
  std::vector<int> batch_list, context_list;
  for (int64_t b : *batches) batch_list.push_back(static_cast<int>(b));
  for (int64_t c : *contexts) context_list.push_back(static_cast<int>(c));
  // The KV pool holds every point when the device has room (the largest
  // point's blocks); otherwise the points that fit, the others skipped and
  // said so (an 80 GB card does not hold 8 rows of 128K keys beside NMC).
  std::map<std::pair<int, int>, std::string> skip;
  auto backend = make_bench_backend(
      f, "bench decode", static_cast<uint64_t>(*seed), o, nullptr,
      [&](const ModelConfig& cfg, int bs, size_t budget) {
        gpu::BenchKvPlan plan = gpu::plan_bench_kv(cfg, bs, batch_list, context_list, 64, budget);
        for (const auto& [point, why] : plan.skipped)
          std::fprintf(stderr, "bench decode: batch %d context %d skipped: %s\n", point.first, point.second,
                       why.c_str());
        skip = std::move(plan.skipped);
        return plan.blocks;
      });
  if (!backend.is_ok()) return fail(backend.status());
  gpu::BenchDecodeOptions bo;
  bo.skip = skip;
  bo.paths = paths;
  bo.batches.clear();
  for (int64_t b : *batches) bo.batches.push_back(static_cast<int>(b));
  bo.contexts.clear();
  for (int64_t c : *contexts) bo.contexts.push_back(static_cast<int>(c));
  bo.iters = static_cast<int>(*iters);
  bo.warmup = static_cast<int>(*warmup);
  bo.seed = static_cast<uint64_t>(*seed);
  bo.mk_variants = variants;
  auto r = gpu::bench_decode(**backend, bo);
  if (!r.is_ok()) return fail(r.status());
  std::printf("%s", gpu::bench_decode_table(*r).c_str());
  if (Status s = write_json_file(f.str("json"), gpu::bench_decode_json(*r)); !s.is_ok()) return fail(s);
  if (!f.str("timeline").empty()) {
    auto tl = gpu::megakernel_timeline_json(**backend, bo.batches[0], bo.contexts[0]);
    if (!tl.is_ok()) return fail(tl.status());
    if (Status s = write_json_file(f.str("timeline"), *tl); !s.is_ok()) return fail(s);
  }
  return 0;
#else
  return fail(unavailable("bench decode needs CUDA; this build has none (no nvcc at configure time)"));
#endif
}

int bench_prefill_cmd(const std::vector<std::string>& args) {
  Flags f;
  add_model_flags(f);
  f.add("tokens", "prompt lengths, comma-separated (K = 1024)", "512,2K,8K")
      .add("iters", "timed prefills per length (median reported)", "5")
      .add("warmup", "untimed prefills per length", "1")
      .add("max-step-tokens", "tokens per forward sub-step (a longer prompt runs as consecutive chunks)", "2048")
      .add("profile", "also time every op of each length's first sub-step (per-op table)", "", true);
  if (int rc = parse_bench_flags(f, args, "bench prefill"); rc >= 0) return rc;
  auto tokens = parse_int_list("tokens", f.str("tokens"));
  if (!tokens.is_ok()) return fail(tokens.status());
  for (int64_t t : *tokens)
    if (t < 1 || t > 1048576) return fail(invalid_argument("flag --tokens: " + std::to_string(t) + " is outside 1..1M"));
  auto iters = f.integer("iters", 1, 100000);
  auto warmup = f.integer("warmup", 0, 100000);
  auto block = f.integer("block-size", 1, 1024);
  auto step_tokens = f.integer("max-step-tokens", 8, 65536);
  auto seed = f.integer("seed", 0, INT64_MAX);
  for (const auto* r : {&iters, &warmup, &block, &step_tokens, &seed})
    if (!r->is_ok()) return fail(r->status());
#ifdef MEGASERVE_WITH_CUDA
  if (!gpu::has_gpu()) return fail(unavailable("bench prefill needs a CUDA GPU; none is available"));
  int max_t = 1;
  for (int64_t t : *tokens) max_t = std::max<int>(max_t, static_cast<int>(t));
  gpu::GpuBackendOptions o;
  o.block_size = static_cast<int>(*block);
  o.max_context = max_t + o.block_size;
  o.layered.max_step_tokens = static_cast<int>(*step_tokens);
  auto backend = make_bench_backend(f, "bench prefill", static_cast<uint64_t>(*seed), o,
                                    [&](const ModelConfig& cfg, int bs) {
                                      return gpu::prefill_kv_blocks_for(cfg, bs, max_t);
                                    });
  if (!backend.is_ok()) return fail(backend.status());
  gpu::BenchPrefillOptions bo;
  bo.tokens.clear();
  for (int64_t t : *tokens) bo.tokens.push_back(static_cast<int>(t));
  bo.iters = static_cast<int>(*iters);
  bo.warmup = static_cast<int>(*warmup);
  bo.seed = static_cast<uint64_t>(*seed);
  bo.profile = f.boolean("profile");
  auto r = gpu::bench_prefill(**backend, bo);
  if (!r.is_ok()) return fail(r.status());
  std::printf("%s", gpu::bench_prefill_table(*r).c_str());
  if (Status s = write_json_file(f.str("json"), gpu::bench_prefill_json(*r)); !s.is_ok()) return fail(s);
  return 0;
#else
  return fail(unavailable("bench prefill needs CUDA; this build has none (no nvcc at configure time)"));
#endif
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help") {
    std::fprintf(stderr, "usage: megaserve bench decode|prefill|serve [flags]\n");
    return args.empty() ? 2 : 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "decode") return bench_decode_cmd(rest);
  if (args[0] == "prefill") return bench_prefill_cmd(rest);
  if (args[0] == "serve") return server::run_bench_serve(rest);
  return fail(invalid_argument("unknown bench '" + args[0] + "' (decode, prefill, serve)"));
}

}  // namespace ms::cli
