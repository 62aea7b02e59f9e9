#include "gpu/bench_decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <nlohmann/json.hpp>

#include "core/int_math.h"
#include "gpu/common/bandwidth_probe.h"
#include "gpu/common/cuda_check.h"
#include "gpu/common/device_info.h"

namespace ms::gpu {
namespace {

// Blocks a group needs for `batch` sequences at `context` (+1 for the new token).
int64_t group_blocks(const KvGroupSpec& g, int block_size, int batch, int context) {
  const int64_t per_seq = g.window > 0 ? ceil_div(g.window, block_size) + 1 : ceil_div(context + 1, block_size);
  return per_seq * batch;
}

// Block tables: sequence i owns a contiguous range per group; sliding groups
// map logical block b onto a ring of window/block_size + 1 blocks and mark
// blocks wholly outside the window -1 (as the KV manager does).
Status make_batch(const KvSpec& kv, int batch, int context, std::vector<SeqWork>* out) {
  const int bs = kv.block_size;
  const int64_t need = ceil_div(context + 1, bs);
  out->assign(batch, {});
  for (int i = 0; i < batch; ++i) {
    SeqWork& w = (*out)[i];
    w.seq_id = i;
    w.tokens = {static_cast<int32_t>(1 + i)};
    w.start_pos = context;
    w.block_tables.assign(kv.groups.size(), {});
    for (size_t g = 0; g < kv.groups.size(); ++g) {
      const KvGroupSpec& gs = kv.groups[g];
      if (group_blocks(gs, bs, batch, context) > gs.num_blocks)
        return resource_exhausted("KV cache too small for batch " + std::to_string(batch) + " x context " +
                                  std::to_string(context) + " (group " + std::to_string(g) + " has " +
                                  std::to_string(gs.num_blocks) + " blocks)");
      auto& t = w.block_tables[g];
      if (gs.window > 0) {
        const int64_t ring = ceil_div(gs.window, bs) + 1;
        const int64_t first_live = std::max<int64_t>(0, context - gs.window + 1) / bs;
        for (int64_t b = 0; b < need; ++b) t.push_back(b < first_live ? -1 : static_cast<int32_t>(i * ring + b % ring));
      } else {
        for (int64_t b = 0; b < need; ++b) t.push_back(static_cast<int32_t>(i * need + b));
      }
    }
  }
  return Status::ok();
}

}  // namespace

std::vector<int> kv_blocks_for(const ModelConfig& cfg, int block_size, int batch, int context) {
  const KvSpec kv = make_kv_spec(cfg, block_size, 0, 2);
  std::vector<int> blocks;
  for (const auto& g : kv.groups) blocks.push_back(static_cast<int>(group_blocks(g, block_size, batch, context)));
  return blocks;
}

size_t kv_pool_bytes(const ModelConfig& cfg, int block_size, const std::vector<int>& blocks) {
  size_t total = 0;
  for (const KvGroupSpec& g : make_kv_spec_blocks(cfg, block_size, blocks, 2).groups)
    total += size_t(g.num_blocks) * g.bytes_per_block;
  return total;
}

BenchKvPlan plan_bench_kv(const ModelConfig& cfg, int block_size, const std::vector<int>& batches,
                          const std::vector<int>& contexts, int pad, size_t budget) {
  struct Point {
    int batch, context;
    std::vector<int> blocks;
    size_t bytes;
  };
  std::vector<Point> kept;
  for (int b : batches)
    for (int c : contexts) {
      std::vector<int> blocks = kv_blocks_for(cfg, block_size, b, c + pad);
      const size_t bytes = kv_pool_bytes(cfg, block_size, blocks);
      kept.push_back({b, c, std::move(blocks), bytes});
    }
  // Largest first; stable, so equal points drop in the order given.
  std::stable_sort(kept.begin(), kept.end(), [](const Point& a, const Point& b) { return a.bytes > b.bytes; });
  auto gib = [](size_t x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(x) / double(size_t(1) << 30));
    return std::string(buf);
  };
  BenchKvPlan plan;
  while (!kept.empty()) {
    std::vector<int> pool(kept[0].blocks.size(), 0);
    for (const Point& p : kept)
      for (size_t g = 0; g < pool.size(); ++g) pool[g] = std::max(pool[g], p.blocks[g]);
    const size_t bytes = kv_pool_bytes(cfg, block_size, pool);
    if (bytes <= budget) {
      plan.blocks = std::move(pool);
      break;
    }
    const Point& p = kept.front();
    plan.skipped[{p.batch, p.context}] =
        "its KV cache (" + gib(p.bytes) + (p.bytes <= budget ? ", with the larger points kept " + gib(bytes) : "") +
        ") does not fit the " + gib(budget) + " the device has free for it";
    kept.erase(kept.begin());
  }
  return plan;
}

Result<BenchDecodeResult> bench_decode(GpuBackend& backend, const BenchDecodeOptions& opt) {
  const ModelConfig& cfg = backend.config();
  const KvSpec& kv = backend.kv_spec();
  BenchDecodeResult res;
  MS_ASSIGN_OR_RETURN(DeviceInfo info, device_info());
  res.device = info.name;
  res.nominal_gbs = info.nominal_bw_gbs;
  if (opt.probe) {
    MS_ASSIGN_OR_RETURN(BandwidthProbe p, probe_read_bandwidth());
    res.probe_gbs = p.read_gbs;
  }
  cudaStream_t st = backend.stream();
  MS_RETURN_IF_ERROR(backend.model().fill_kv_random(opt.seed, st));
  const double H = cfg.hidden, qkvw = cfg.q_width() + 2.0 * cfg.kv_width();
  for (int batch : opt.batches) {
    for (int context : opt.contexts) {
      std::vector<SeqWork> work;
      Status s = Status::ok();
      if (auto skip = opt.skip.find({batch, context}); skip != opt.skip.end()) s = resource_exhausted(skip->second);
      if (s.is_ok()) s = make_batch(kv, batch, context, &work);
      if (s.is_ok()) s = validate_batch(kv, cfg, work);
      // Bytes: embedding rows, per layer attention (+ router + distinct experts
      // routed, or the dense FFN), LM head; KV of every visible key. The
      // routed experts are counted on one layered step (both paths read the
      // same random weights and KV).
      std::vector<int> routed;
      if (s.is_ok()) s = backend.layered().enqueue_decode(work);
      if (s.is_ok()) s = backend.layered().routed_experts_per_layer(&routed);
      // Each decode path once; the megakernel once per variant.
      std::vector<std::pair<DecodePath, int>> runs;
      for (DecodePath path : opt.paths) {
        if (path != DecodePath::kMegakernel || opt.mk_variants.empty()) {
          runs.push_back({path, -1});
        } else {
          for (int v = 0; v < static_cast<int>(opt.mk_variants.size()); ++v) runs.push_back({path, v});
        }
      }
      for (const auto& [path, variant] : runs) {
        BenchDecodeRow row;
        row.backend = decode_path_name(path);
        row.batch = batch;
        row.context = context;
        MkExecutor* mk = backend.megakernel();
        if (path == DecodePath::kMegakernel && mk) {
          if (variant >= 0) MS_RETURN_IF_ERROR(mk->set_tuning(opt.mk_variants[variant]));
          row.variant = mk_tuning_name(mk->options().tuning);
        }
        if (!s.is_ok()) {
          row.skipped = s.to_string();
          res.rows.push_back(row);
          continue;
        }
        if (path == DecodePath::kMegakernel && (!mk || !mk->accepts(work))) {
          row.skipped = mk ? "the megakernel does not take this batch" : "no megakernel executor for this model";
          res.rows.push_back(row);
          continue;
        }
        auto enqueue = [&]() -> Status {
          return path == DecodePath::kMegakernel ? mk->enqueue_greedy(work) : backend.layered().enqueue_decode(work);
        };
        std::vector<cudaEvent_t> ev(2 * (opt.warmup + opt.iters));
        for (auto& e : ev) MS_CUDA_RETURN(cudaEventCreate(&e));
        auto run = [&]() -> Status {
          for (int i = 0; i < opt.warmup + opt.iters; ++i) {
            MS_CUDA_RETURN(cudaEventRecord(ev[2 * i], st));
            MS_RETURN_IF_ERROR(enqueue());
            MS_CUDA_RETURN(cudaEventRecord(ev[2 * i + 1], st));
          }
          MS_CUDA_RETURN(cudaStreamSynchronize(st));
          if (path == DecodePath::kMegakernel) MS_RETURN_IF_ERROR(mk->finish());  // a watchdog abort is an error
          return Status::ok();
        };
        Status rs = run();
        std::vector<float> times;
        for (int i = opt.warmup; rs.is_ok() && i < opt.warmup + opt.iters; ++i) {
          float ms = 0;
          rs = cuda_status(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime", __FILE__,
                           __LINE__);
          times.push_back(ms);
        }
        for (auto& e : ev) (void)cudaEventDestroy(e);
        if (!rs.is_ok() && path == DecodePath::kMegakernel) {  // the layered rows still count
          row.skipped = rs.to_string();
          res.rows.push_back(row);
          continue;
        }
        MS_RETURN_IF_ERROR(rs);
        std::sort(times.begin(), times.end());
        row.ms_per_step = times[times.size() / 2];
        row.tok_per_s = batch / (row.ms_per_step * 1e-3);
        double wb = batch * H * 2 + double(cfg.vocab_size) * H * 2;
        double kvb = 0;
        for (int li = 0; li < cfg.n_layers; ++li) {
          wb += (qkvw * H + H * cfg.q_width()) * 2;
          if (cfg.layers[li].moe) {
            wb += double(cfg.n_experts) * H * 2 + double(routed[li]) * 3.0 * cfg.moe_ffn * H * 2;
            if (cfg.n_shared_experts > 0) wb += 3.0 * cfg.shared_ffn * H * 2;
          } else {
            wb += 3.0 * cfg.dense_ffn * H * 2;
          }
          const int window = cfg.layers[li].sliding ? cfg.sliding_window : 0;
          const double keys = window > 0 ? std::min(context + 1, window) : context + 1;
          kvb += batch * keys * cfg.kv_width() * 2.0 * 2.0;
        }
        row.weight_bytes = wb;
        row.kv_bytes = kvb;
        const double bytes = wb + kvb, secs = row.ms_per_step * 1e-3;
        row.achieved_gbs = bytes / secs / 1e9;
        row.sol_tok_per_s_nominal = batch / (bytes / (res.nominal_gbs * 1e9));
        row.pct_sol_nominal = 100.0 * row.tok_per_s / row.sol_tok_per_s_nominal;
        if (res.probe_gbs > 0) {
          row.sol_tok_per_s_probe = batch / (bytes / (res.probe_gbs * 1e9));
          row.pct_sol_probe = 100.0 * row.tok_per_s / row.sol_tok_per_s_probe;
        }
        std::fprintf(stderr, "bench decode: %s%s%s batch %d context %d: %.3f ms/step, %.1f%% of nominal SoL\n",
                     row.backend.c_str(), row.variant.empty() ? "" : " ", row.variant.c_str(), batch, context,
                     row.ms_per_step, row.pct_sol_nominal);
        res.rows.push_back(row);
      }
    }
  }
  return res;
}

Result<std::string> megakernel_timeline_json(GpuBackend& backend, int batch, int context) {
  MkExecutor* mk = backend.megakernel();
  if (!mk || !mk->options().record_timeline) return invalid_argument("timeline: no megakernel recording its timeline");
  std::vector<SeqWork> work;
  MS_RETURN_IF_ERROR(make_batch(backend.kv_spec(), batch, context, &work));
  MS_RETURN_IF_ERROR(mk->enqueue(work));
  MS_RETURN_IF_ERROR(mk->finish());
  std::vector<mk::TimelineEntry> tl;
  MS_RETURN_IF_ERROR(mk->timeline(&tl));
  const ::ms::mk::Schedule& s = *mk->last_schedule();
  // An attention split's stages of 64 keys, from the rows' positions (every
  // row at `context`, make_batch) and the layer's window, as the kernel
  // computes them: the per-stage cost is the slope of a split's time over
  // its stages (tools/plot_timeline.py --summary).
  const std::vector<::ms::mk::LayerInfo> layer_info = ::ms::mk::make_layer_info(backend.config());
  const int window = backend.config().sliding_window;
  auto stages_of = [&](const ::ms::mk::Instruction& in) -> nlohmann::json {
    if (in.op != ::ms::mk::Opcode::kAttention) return nullptr;
    const bool sliding = layer_info[in.layer].sliding != 0;
    const ::ms::mk::SplitRange r =
        ::ms::mk::split_range(work[in.attn.row].start_pos, sliding ? window : 0, in.attn.split, in.attn.n_splits);
    return std::max(0, r.stage_end - r.stage_begin);
  };
  uint64_t t0 = UINT64_MAX;
  for (const auto& e : tl) t0 = std::min(t0, e.start);
  // A time of 0 (not recorded: the instruction reads no ring position) is null.
  auto rel = [&](uint64_t t) { return t == 0 ? nlohmann::json(nullptr) : nlohmann::json(int64_t(t) - int64_t(t0)); };
  nlohmann::json j;
  j["batch"] = batch;
  j["context"] = context;
  j["n_sm"] = s.n_sm();
  j["instructions"] = nlohmann::json::array();
  for (int sm = 0; sm < s.n_sm(); ++sm)
    for (uint32_t i = s.sm_begin[sm]; i < s.sm_begin[sm + 1]; ++i) {
      const auto& e = tl[i];
      j["instructions"].push_back({{"sm", sm},
                                   {"index", i - s.sm_begin[sm]},
                                   {"op", ::ms::mk::opcode_name(s.instrs[i].op)},
                                   {"layer", s.instrs[i].layer},
                                   {"start_ns", e.start - t0},
                                   {"ready_ns", e.ready - t0},
                                   {"data_ns", rel(e.data)},
                                   {"end_ns", e.end - t0},
                                   {"issue_ns", rel(e.issue)},
                                   {"tiles", e.tiles},
                                   {"stages", stages_of(s.instrs[i])},
                                   {"stall_ns", e.stall},
                                   {"signal_ns", e.start + e.presignal - t0},
                                   {"est_start_ns", i < s.est_start_ns.size() ? s.est_start_ns[i] : 0.f},
                                   {"est_end_ns", i < s.est_end_ns.size() ? s.est_end_ns[i] : 0.f}});
    }
  return j.dump();
}

std::string bench_decode_json(const BenchDecodeResult& r) {
  nlohmann::json j;
  j["device"] = r.device;
  j["nominal_gbs"] = r.nominal_gbs;
  j["probe_gbs"] = r.probe_gbs;
  j["rows"] = nlohmann::json::array();
  for (const auto& x : r.rows)
    j["rows"].push_back({{"backend", x.backend},
                         {"variant", x.variant},
                         {"batch", x.batch},
                         {"context", x.context},
                         {"ms_per_step", x.ms_per_step},
                         {"tok_per_s", x.tok_per_s},
                         {"weight_bytes", x.weight_bytes},
                         {"kv_bytes", x.kv_bytes},
                         {"achieved_gbs", x.achieved_gbs},
                         {"sol_tok_per_s_nominal", x.sol_tok_per_s_nominal},
                         {"sol_tok_per_s_probe", x.sol_tok_per_s_probe},
                         {"pct_sol_nominal", x.pct_sol_nominal},
                         {"pct_sol_probe", x.pct_sol_probe},
                         {"skipped", x.skipped}});
  return j.dump(2);
}

std::string bench_decode_table(const BenchDecodeResult& r) {
  char line[256];
  std::string s;
  std::snprintf(line, sizeof line, "%s: nominal %.0f GB/s, probe %.0f GB/s\n", r.device.c_str(), r.nominal_gbs,
                r.probe_gbs);
  s += line;
  s += "backend     batch context  ms/step    tok/s   GB/s  %SoL(nom) %SoL(probe)  variant\n";
  for (const auto& x : r.rows) {
    if (!x.skipped.empty()) {
      std::snprintf(line, sizeof line, "%-10s %5d %7d  skipped: %s  %s\n", x.backend.c_str(), x.batch, x.context,
                    x.skipped.c_str(), x.variant.c_str());
    } else {
      std::snprintf(line, sizeof line, "%-10s %5d %7d %8.3f %8.1f %6.0f %9.1f %10.1f  %s\n", x.backend.c_str(),
                    x.batch, x.context, x.ms_per_step, x.tok_per_s, x.achieved_gbs, x.pct_sol_nominal, x.pct_sol_probe,
                    x.variant.c_str());
    }
    s += line;
  }
  return s;
}

std::vector<int> prefill_kv_blocks_for(const ModelConfig& cfg, int block_size, int tokens) {
  const KvSpec kv = make_kv_spec(cfg, block_size, 0, 2);
  return std::vector<int>(kv.groups.size(), static_cast<int>(ceil_div(tokens, block_size)));
}

Result<BenchPrefillResult> bench_prefill(GpuBackend& backend, const BenchPrefillOptions& opt) {
  const ModelConfig& cfg = backend.config();
  const KvSpec& kv = backend.kv_spec();
  BenchPrefillResult res;
  MS_ASSIGN_OR_RETURN(DeviceInfo info, device_info());
  res.device = info.name;
  res.max_step_tokens = backend.layered().options().max_step_tokens;
  if (cfg.is_moe()) res.moe_prefill = moe_prefill_name(backend.layered().options().moe_prefill);
  // Matmul FLOPs of a prefill: 2 per active parameter per token, the LM head once (last token only).
  const double head = double(cfg.vocab_size) * cfg.hidden;
  const double per_token = 2.0 * (double(cfg.active_param_count()) - head);
  std::mt19937 rng(static_cast<uint32_t>(opt.seed));
  for (int n : opt.tokens) {
    BenchPrefillRow row;
    row.tokens = n;
    SeqWork w;
    w.seq_id = 0;
    w.start_pos = 0;
    w.tokens.resize(n);
    for (auto& t : w.tokens) t = static_cast<int32_t>(rng() % cfg.vocab_size);
    w.block_tables.assign(kv.groups.size(), {});
    const int64_t need = ceil_div(n, kv.block_size);
    for (size_t g = 0; g < kv.groups.size(); ++g) {
      if (need > kv.groups[g].num_blocks) {
        row.skipped = "KV cache too small for " + std::to_string(n) + " tokens (group " + std::to_string(g) + " has " +
                      std::to_string(kv.groups[g].num_blocks) + " blocks)";
        break;
      }
      for (int64_t b = 0; b < need; ++b) w.block_tables[g].push_back(static_cast<int32_t>(b));
    }
    if (row.skipped.empty()) {
      Status s = validate_batch(kv, cfg, {w});
      if (!s.is_ok()) row.skipped = s.to_string();
    }
    if (!row.skipped.empty()) {
      res.rows.push_back(row);
      continue;
    }
    std::vector<double> times;
    for (int i = 0; i < opt.warmup + opt.iters; ++i) {
      StepResult r;
      const auto t0 = std::chrono::steady_clock::now();
      MS_RETURN_IF_ERROR(backend.step({w}, &r));  // returns after the logits are on the host
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i >= opt.warmup) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    row.ms = times[times.size() / 2];
    row.tok_per_s = n / (row.ms * 1e-3);
    row.tflops = (per_token * n + 2.0 * head) / (row.ms * 1e-3) / 1e12;
    std::fprintf(stderr, "bench prefill: %d tokens: %.2f ms\n", n, row.ms);
    if (opt.profile) {
      SeqWork first = w;
      row.profile_tokens = std::min(n, res.max_step_tokens);
      first.tokens.resize(row.profile_tokens);
      MS_RETURN_IF_ERROR(backend.layered().profile_step({first}, &row.profile));
    }
    res.rows.push_back(row);
  }
  return res;
}

std::string bench_prefill_json(const BenchPrefillResult& r) {
  nlohmann::json j;
  j["device"] = r.device;
  j["max_step_tokens"] = r.max_step_tokens;
  if (!r.moe_prefill.empty()) j["moe_prefill"] = r.moe_prefill;
  j["rows"] = nlohmann::json::array();
  for (const auto& x : r.rows) {
    nlohmann::json row = {
        {"tokens", x.tokens}, {"ms", x.ms}, {"tok_per_s", x.tok_per_s}, {"tflops", x.tflops}, {"skipped", x.skipped}};
    if (!x.profile.empty()) {
      row["profile_tokens"] = x.profile_tokens;
      nlohmann::json ops = nlohmann::json::array();
      for (const auto& [op, us] : x.profile) ops.push_back({{"op", op}, {"us", us}});
      row["profile_us"] = ops;
    }
    j["rows"].push_back(row);
  }
  return j.dump(2);
}

std::string bench_prefill_table(const BenchPrefillResult& r) {
  char line[256];
  std::string s;
  std::snprintf(line, sizeof line, "%s: prefill of one sequence, sub-steps of %d tokens%s%s\n", r.device.c_str(),
                r.max_step_tokens, r.moe_prefill.empty() ? "" : ", MoE experts: ", r.moe_prefill.c_str());
  s += line;
  s += " tokens        ms      tok/s  TFLOP/s\n";
  for (const auto& x : r.rows) {
    if (!x.skipped.empty())
      std::snprintf(line, sizeof line, "%7d  skipped: %s\n", x.tokens, x.skipped.c_str());
    else
      std::snprintf(line, sizeof line, "%7d %9.2f %10.0f %8.1f\n", x.tokens, x.ms, x.tok_per_s, x.tflops);
    s += line;
  }
  for (const auto& x : r.rows) {
    if (x.profile.empty()) continue;
    double total = 0;
    for (const auto& [op, us] : x.profile) total += us;
    std::snprintf(line, sizeof line, "profile: first sub-step of the %d-token prefill (%d tokens, %.1f us total)\n",
                  x.tokens, x.profile_tokens, total);
    s += line;
    for (const auto& [op, us] : x.profile) {
      std::snprintf(line, sizeof line, "  %-20s %10.1f us %6.1f%%\n", op.c_str(), us, total > 0 ? 100.0 * us / total : 0.0);
      s += line;
    }
  }
  return s;
}

}  // namespace ms::gpu
