// The GPU backend (layered decode path) end to end, on all five HF fixture dirs and the trained
// demo model.
//
// The real correctness test of the GPU math is LayeredVsBf16Ref: the CPU
// reference in emulate_bf16_activations mode rounds to bf16 exactly where the
// GPU stores bf16, so the two may differ only by fp32 summation order, which
// now and then moves a value across a bf16 rounding boundary (one bf16 ulp is
// 2^-8 = 3.9e-3 relative); measured on the H200 2026-11-29: 5e-4..6.1e-3.
// Gate: logits within a relative L2 error of kBf16RefTol = 1e-2 and identical routed
// expert ids at every (token, layer).
//
// Against the HF goldens (fp32 transformers) the GPU's bf16 activations give
// ~1e-2 .. 2.5e-2 (dense families), so logits rows must be within 3e-2 and
// greedy tokens must equal the goldens except at a bf16 near-tie (top-2 margin
// under 2% of the row's max |logit|: the first such divergence ends the
// comparison). On the tiny random MoE fixtures (8 experts top-2) the bf16
// activations can flip an expert choice; after a flip the model is a different
// function, so HF is compared only at positions before the first (token, layer)
// whose GPU routing differs from the fp32 reference's (which matches HF to
// 1e-4: tests/ref/hf_golden_test.cpp). The flip position comes from a
// teacher-forced run on the golden tokens and is printed.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "gpu/bench_decode.h"
#include "gpu/gpu_backend.h"
#include "gpu/ops/moe.h"
#include "gpu_test_util.h"
#include "model/model_loader.h"
#include "ref/ref_backend.h"

namespace ms::gpu::test {
namespace {

constexpr double kLogitsTol = 3e-2;     // vs HF fp32
constexpr double kBf16RefTol = 1e-2;    // vs the bf16-emulating CPU reference (bf16 operands: 1e-3..1e-2)
constexpr double kTieFrac = 0.02;

std::string fixture_dir(const std::string& family) {
  return std::string(MEGASERVE_SOURCE_DIR) + "/tests/fixtures/hf/" + family;
}

nlohmann::json load_golden(const std::string& family) {
  std::ifstream in(fixture_dir(family) + "/golden.json");
  return nlohmann::json::parse(in);
}

std::vector<float> json_row(const nlohmann::json& j) { return j.get<std::vector<float>>(); }

// True when the top-2 margin of `row` is small relative to its scale.
bool near_tie(const std::vector<float>& row) {
  float a = -INFINITY, b = -INFINITY, mx = 0;
  for (float v : row) {
    mx = std::max(mx, std::fabs(v));
    if (v > a) {
      b = a;
      a = v;
    } else if (v > b) {
      b = v;
    }
  }
  return a - b < kTieFrac * mx;
}


// One backend run over `seq`, one token per step (decode steps: the GPU's
// graph path), keeping each step's logits and routed expert ids per layer.
struct Trace {
  std::vector<std::vector<float>> logits;                  // (positions, V)
  std::vector<std::vector<std::vector<int32_t>>> routing;  // (positions, layers, top_k)
};

using RoutingFn = std::function<Status(int layer, std::vector<int32_t>* ids)>;

Status trace_decode(Backend& b, const std::vector<int32_t>& seq, int block_size, const RoutingFn& routing,
                    Trace* out) {
  SeqWork w;
  w.block_tables.assign(b.kv_spec().groups.size(), {});
  const int L = b.config().n_layers;
  for (size_t t = 0; t < seq.size(); ++t) {
    w.tokens = {seq[t]};
    w.start_pos = static_cast<int32_t>(t);
    for (auto& table : w.block_tables)
      while (static_cast<int>(table.size()) * block_size < static_cast<int>(t) + 1)
        table.push_back(static_cast<int32_t>(table.size()));
    StepResult r;
    MS_RETURN_IF_ERROR(b.step({w}, &r));
    out->logits.push_back(std::move(r.logits[0]));
    out->routing.emplace_back(L);
    for (int li = 0; li < L; ++li) MS_RETURN_IF_ERROR(routing(li, &out->routing.back()[li]));
  }
  return Status::ok();
}

RoutingFn gpu_routing(GpuBackend& b) {
  return [&b](int li, std::vector<int32_t>* ids) { return b.layered().last_routing(li, ids); };
}
RoutingFn ref_routing(RefBackend& b) {
  return [&b](int li, std::vector<int32_t>* ids) {
    *ids = b.last_routing(li);
    return Status::ok();
  };
}

// First position whose routing differs at any layer (INT_MAX: none); counts
// the (position, layer) decisions and disagreements.
int first_flip(const Trace& a, const Trace& b, int* decisions = nullptr, int* differ = nullptr) {
  int first = INT_MAX, n = 0, d = 0;
  for (size_t t = 0; t < a.routing.size() && t < b.routing.size(); ++t)
    for (size_t li = 0; li < a.routing[t].size(); ++li) {
      if (a.routing[t][li].empty() && b.routing[t][li].empty()) continue;
      ++n;
      if (a.routing[t][li] != b.routing[t][li]) {
        ++d;
        first = std::min(first, static_cast<int>(t));
      }
    }
  if (decisions) *decisions = n;
  if (differ) *differ = d;
  return first;
}

// The golden's teacher-forcing sequence: the prompt, then the greedy tokens
// (step s's logits are those of position prompt.size() - 1 + s).
std::vector<int32_t> golden_sequence(const nlohmann::json& g) {
  std::vector<int32_t> seq = g["prompt"].get<std::vector<int32_t>>();
  const auto greedy = g["greedy"].get<std::vector<int32_t>>();
  seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
  return seq;
}

// Position of the first routing disagreement between the GPU and the fp32
// reference on the golden tokens (INT_MAX for dense families / none).
int golden_flip_position(const std::string& family) {
  auto model = load_model(fixture_dir(family));
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  if (!model.is_ok() || !(*model)->config.is_moe()) return INT_MAX;
  GpuBackendOptions opt;
  opt.block_size = 8;
  opt.kv_bytes = 4 << 20;
  opt.max_context = 4096;
  auto gpu = GpuBackend::create((*model)->config, (*model)->weights, opt);
  EXPECT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  RefBackendOptions ro;
  ro.block_size = 8;
  ro.kv_bytes = 4 << 20;
  ro.threads = 2;
  auto ref = RefBackend::create((*model)->config, (*model)->weights, ro);
  EXPECT_TRUE(ref.is_ok()) << ref.status().to_string();
  if (!gpu.is_ok() || !ref.is_ok()) return 0;
  const std::vector<int32_t> seq = golden_sequence(load_golden(family));
  Trace tg, tr;
  Status s1 = trace_decode(**gpu, seq, 8, gpu_routing(**gpu), &tg);
  Status s2 = trace_decode(**ref, seq, 8, ref_routing(**ref), &tr);
  EXPECT_TRUE(s1.is_ok()) << s1.to_string();
  EXPECT_TRUE(s2.is_ok()) << s2.to_string();
  if (!s1.is_ok() || !s2.is_ok()) return 0;
  int n = 0, d = 0;
  const int flip = first_flip(tg, tr, &n, &d);
  std::printf("%s: GPU vs fp32 ref routing on the golden tokens: %d of %d (token, layer) decisions differ, "
              "first at position %d of %zu\n",
              family.c_str(), d, n, flip == INT_MAX ? -1 : flip, seq.size());
  return flip;
}

struct Case {
  std::string family;
  int block_size;
  int prefill_chunk;
  bool graphs;
};

class LayeredGolden : public ::testing::TestWithParam<Case> {};

TEST_P(LayeredGolden, GreedyDecodeMatchesTransformers) {
  MS_GPU_TEST_GUARD();
  const Case& c = GetParam();
  auto model = load_model(fixture_dir(c.family));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  GpuBackendOptions opt;
  opt.block_size = c.block_size;
  opt.kv_bytes = 4 << 20;
  opt.max_context = 4096;
  opt.layered.use_graphs = c.graphs;
  opt.layered.max_step_tokens = 16;  // forces sub-steps on the 21-token prompt
  auto backend = GpuBackend::create((*model)->config, (*model)->weights, opt);
  ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
  nlohmann::json g = load_golden(c.family);
  std::vector<int32_t> prompt = g["prompt"].get<std::vector<int32_t>>();
  const auto want = g["greedy"].get<std::vector<int32_t>>();
  // Steps at or after the first routing flip are not compared with HF.
  const int flip = golden_flip_position(c.family);
  const int last_step = flip == INT_MAX ? INT_MAX : flip - (static_cast<int>(prompt.size()) - 1);
  GenerateOptions go;
  go.max_new_tokens = static_cast<int>(want.size());
  go.prefill_chunk = c.prefill_chunk;
  go.stop_at_eos = false;
  double worst = 0;
  int diverged_at = -1;
  std::vector<int32_t> got;
  go.on_logits = [&](int step, const std::vector<float>& logits) {
    if (diverged_at >= 0 || step >= last_step) return;
    auto ref = json_row(g["step_logits"][step]);
    double e = rel_err(logits, ref);
    worst = std::max(worst, e);
    EXPECT_LT(e, kLogitsTol) << "step " << step;
  };
  go.on_token = [&](int32_t tok) {
    const int step = static_cast<int>(got.size());
    got.push_back(tok);
    if (diverged_at < 0 && step < last_step && tok != want[step]) {
      auto ref = json_row(g["step_logits"][step]);
      EXPECT_TRUE(near_tie(ref)) << "token " << step << ": got " << tok << ", want " << want[step]
                                 << " and the golden has no near-tie";
      diverged_at = step;
    }
    return true;
  };
  auto out = generate_greedy(**backend, prompt, go);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  const int compared = std::min<int>(static_cast<int>(want.size()), std::max(0, last_step));
  std::printf("%s bs%d chunk%d graphs%d: %d of %zu steps before the first routing flip; worst rel err %.2e, %s\n",
              c.family.c_str(), c.block_size, c.prefill_chunk, c.graphs, compared, want.size(), worst,
              diverged_at < 0 ? "tokens equal" : ("near-tie divergence at " + std::to_string(diverged_at)).c_str());
  RecordProperty("worst_rel_err", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    Families, LayeredGolden,
    ::testing::Values(Case{"cohere2_moe", 8, 0, true}, Case{"cohere2_moe", 4, 5, false},
                      Case{"cohere2_moe_shared", 8, 0, true}, Case{"cohere2_moe_shared", 3, 7, true},
                      Case{"qwen3_moe", 8, 0, true}, Case{"qwen3_moe", 5, 4, false}, Case{"qwen3", 8, 0, true},
                      Case{"qwen3", 4, 3, true}, Case{"llama", 8, 0, true}, Case{"llama", 16, 6, false}),
    [](const auto& info) {
      return info.param.family + "_bs" + std::to_string(info.param.block_size) + "_chunk" +
             std::to_string(info.param.prefill_chunk) + (info.param.graphs ? "_graph" : "_eager");
    });

// Every prompt position (token-by-token decode) against the golden prompt logits.
class LayeredPromptLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(LayeredPromptLogits, EveryPositionMatchesTransformers) {
  MS_GPU_TEST_GUARD();
  auto model = load_model(fixture_dir(GetParam()));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  GpuBackendOptions opt;
  opt.block_size = 8;
  opt.kv_bytes = 4 << 20;
  opt.max_context = 4096;
  auto backend = GpuBackend::create((*model)->config, (*model)->weights, opt);
  ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
  nlohmann::json g = load_golden(GetParam());
  std::vector<int32_t> prompt = g["prompt"].get<std::vector<int32_t>>();
  const int flip = golden_flip_position(GetParam());  // positions from here on are not compared with HF
  const KvSpec& kv = (*backend)->kv_spec();
  SeqWork w;
  w.block_tables.assign(kv.groups.size(), {});
  for (size_t t = 0; t < prompt.size(); ++t) {
    w.tokens = {prompt[t]};
    w.start_pos = static_cast<int32_t>(t);
    for (auto& table : w.block_tables)
      while (table.size() * 8 < t + 1) table.push_back(static_cast<int32_t>(table.size()));
    StepResult r;
    ASSERT_OK((*backend)->step({w}, &r));
    if (static_cast<int>(t) < flip) {
      EXPECT_LT(rel_err(r.logits[0], json_row(g["prompt_logits"][t])), kLogitsTol) << "position " << t;
    }
    // The device greedy path picks the same token as the host argmax of the logits.
    std::vector<int32_t> tok;
    std::vector<float> lp;
    ASSERT_OK((*backend)->layered().decode_greedy({w}, &tok, &lp));
    EXPECT_EQ(tok[0], argmax(r.logits[0]));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LayeredPromptLogits,
                         ::testing::Values("cohere2_moe", "cohere2_moe_shared", "qwen3_moe", "qwen3", "llama"));

// A ragged batch (different prompts and lengths, prefill in one step, then
// batched decode through the graph) against the bf16-emulating CPU
// reference, row by row: logits within kBf16RefTol, identical routing.
class LayeredVsRef : public ::testing::TestWithParam<std::string> {};

TEST_P(LayeredVsRef, RaggedBatchMatchesRefBackend) {
  MS_GPU_TEST_GUARD();
  auto model = load_model(fixture_dir(GetParam()));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelConfig& cfg = (*model)->config;
  GpuBackendOptions opt;
  opt.block_size = 4;
  opt.kv_bytes = 8 << 20;
  opt.max_context = 4096;
  auto gpu = GpuBackend::create(cfg, (*model)->weights, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  RefBackendOptions ro;
  ro.block_size = 4;
  ro.kv_bytes = 16 << 20;
  ro.threads = 2;
  ro.emulate_bf16_activations = true;
  auto ref = RefBackend::create(cfg, (*model)->weights, ro);
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  ASSERT_EQ((*gpu)->kv_spec().groups.size(), (*ref)->kv_spec().groups.size());
  double worst = 0;
  int decisions = 0, differ = 0;
  const int n_seq = 5;
  const std::vector<int> lens = {1, 3, 9, 17, 30};
  std::vector<SeqWork> batch(n_seq);
  std::mt19937 rng(80);
  for (int s = 0; s < n_seq; ++s) {
    batch[s].seq_id = s;
    for (int t = 0; t < lens[s]; ++t) batch[s].tokens.push_back(static_cast<int32_t>(rng() % cfg.vocab_size));
    batch[s].block_tables.assign((*gpu)->kv_spec().groups.size(), {});
  }
  const int kBlocksPerSeq = 16;  // 64 positions per sequence
  auto grow = [&](SeqWork& w) {
    const int need = (w.start_pos + static_cast<int>(w.tokens.size()) + 3) / 4;
    for (auto& t : w.block_tables)
      while (static_cast<int>(t.size()) < need) t.push_back(static_cast<int32_t>(w.seq_id * kBlocksPerSeq + t.size()));
  };
  for (int step = 0; step < 12; ++step) {
    for (auto& w : batch) grow(w);
    StepResult rg, rr;
    ASSERT_OK((*gpu)->step(batch, &rg));
    ASSERT_OK((*ref)->step(batch, &rr));
    for (int s = 0; s < n_seq; ++s) {
      const double e = rel_err(rg.logits[s], rr.logits[s]);
      worst = std::max(worst, e);
      EXPECT_LT(e, kBf16RefTol) << "step " << step << " seq " << s;
    }
    for (int li = 0; li < cfg.n_layers; ++li) {  // rows in batch order, then position order, on both sides
      std::vector<int32_t> ids;
      ASSERT_OK((*gpu)->layered().last_routing(li, &ids));
      const auto& want = (*ref)->last_routing(li);
      ASSERT_EQ(ids.size(), want.size()) << "layer " << li;
      for (size_t i = 0; i < ids.size(); ++i) {
        ++decisions;
        if (ids[i] != want[i]) ++differ;
      }
      EXPECT_EQ(ids, want) << "routing, step " << step << " layer " << li;
    }
    for (int s = 0; s < n_seq; ++s) {
      batch[s].start_pos += static_cast<int32_t>(batch[s].tokens.size());
      batch[s].tokens = {argmax(rr.logits[s])};  // both follow the reference's tokens
    }
  }
  std::printf("%s ragged vs bf16-emulated ref: worst rel err %.2e, %d of %d expert ids differ\n",
              GetParam().c_str(), worst, differ, decisions);
}

// Teacher-forced on the golden tokens, one decode step (graph) per position:
// GPU vs the bf16-emulating CPU reference (tight: summation order only), and
// the routing agreement with the plain fp32 reference reported.
class LayeredVsBf16Ref : public ::testing::TestWithParam<std::string> {};

TEST_P(LayeredVsBf16Ref, DecodeMatchesEmulatedRefAndRouting) {
  MS_GPU_TEST_GUARD();
  auto model = load_model(fixture_dir(GetParam()));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelConfig& cfg = (*model)->config;
  GpuBackendOptions opt;
  opt.block_size = 8;
  opt.kv_bytes = 4 << 20;
  opt.max_context = 4096;
  auto gpu = GpuBackend::create(cfg, (*model)->weights, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  RefBackendOptions ro;
  ro.block_size = 8;
  ro.kv_bytes = 4 << 20;
  ro.threads = 2;
  auto f32 = RefBackend::create(cfg, (*model)->weights, ro);
  ASSERT_TRUE(f32.is_ok()) << f32.status().to_string();
  ro.emulate_bf16_activations = true;
  auto b16 = RefBackend::create(cfg, (*model)->weights, ro);
  ASSERT_TRUE(b16.is_ok()) << b16.status().to_string();
  const std::vector<int32_t> seq = golden_sequence(load_golden(GetParam()));
  Trace tg, tb, tf;
  ASSERT_OK(trace_decode(**gpu, seq, 8, gpu_routing(**gpu), &tg));
  ASSERT_OK(trace_decode(**b16, seq, 8, ref_routing(**b16), &tb));
  ASSERT_OK(trace_decode(**f32, seq, 8, ref_routing(**f32), &tf));
  double worst = 0, worst_f32 = 0;
  for (size_t t = 0; t < seq.size(); ++t) {
    const double e = rel_err(tg.logits[t], tb.logits[t]);
    worst = std::max(worst, e);
    worst_f32 = std::max(worst_f32, rel_err(tg.logits[t], tf.logits[t]));
    EXPECT_LT(e, kBf16RefTol) << "position " << t;
  }
  int n_b = 0, d_b = 0, n_f = 0, d_f = 0;
  const int flip_b = first_flip(tg, tb, &n_b, &d_b), flip_f = first_flip(tg, tf, &n_f, &d_f);
  EXPECT_EQ(d_b, 0) << "GPU routing differs from the bf16-emulated reference's, first at position " << flip_b;
  std::printf("%s teacher-forced, %zu positions: GPU vs bf16-emulated ref worst rel err %.2e, routing %d/%d differ "
              "(first %d); GPU vs fp32 ref worst rel err %.2e, routing %d/%d differ (first %d)\n",
              GetParam().c_str(), seq.size(), worst, d_b, n_b, flip_b == INT_MAX ? -1 : flip_b, worst_f32, d_f, n_f,
              flip_f == INT_MAX ? -1 : flip_f);
}

// The same sequence as one prefill step (token rows > 8: the cuBLAS GEMMs, the
// prefill attention tiles and the grouped expert kernels with many members):
// routing of every row and the last row's logits vs the bf16-emulating reference.
TEST_P(LayeredVsBf16Ref, PrefillMatchesEmulatedRefAndRouting) {
  MS_GPU_TEST_GUARD();
  auto model = load_model(fixture_dir(GetParam()));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelConfig& cfg = (*model)->config;
  RefBackendOptions ro;
  ro.block_size = 8;
  ro.kv_bytes = 4 << 20;
  ro.threads = 2;
  ro.emulate_bf16_activations = true;
  auto ref = RefBackend::create(cfg, (*model)->weights, ro);
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  if (std::getenv("MEGASERVE_MOE_PREFILL")) GTEST_SKIP() << "MEGASERVE_MOE_PREFILL overrides the path under test";
  // MoE families on both prefill expert paths: the grouped tensor-core GEMMs (the fixtures' 8 experts get ~13
  // members each from the ~50-token prompt) and the CUDA-core expert kernels.
  for (MoePrefillPath path : {MoePrefillPath::kGrouped, MoePrefillPath::kKernel}) {
    if (path != MoePrefillPath::kGrouped && !cfg.is_moe()) continue;
    SCOPED_TRACE(moe_prefill_name(path));
    GpuBackendOptions opt;
    opt.block_size = 8;
    opt.kv_bytes = 4 << 20;
    opt.max_context = 4096;
    opt.layered.moe_prefill = path;
    auto gpu = GpuBackend::create(cfg, (*model)->weights, opt);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    SeqWork w;
    w.tokens = golden_sequence(load_golden(GetParam()));
    w.block_tables.assign((*gpu)->kv_spec().groups.size(), {});
    for (auto& table : w.block_tables)
      while (table.size() * 8 < w.tokens.size()) table.push_back(static_cast<int32_t>(table.size()));
    StepResult rg, rr;
    ASSERT_OK((*gpu)->step({w}, &rg));
    ASSERT_OK((*ref)->step({w}, &rr));
    const double e = rel_err(rg.logits[0], rr.logits[0]);
    EXPECT_LT(e, kBf16RefTol);
    int n = 0, d = 0;
    for (int li = 0; li < cfg.n_layers; ++li) {
      std::vector<int32_t> ids;
      ASSERT_OK((*gpu)->layered().last_routing(li, &ids));
      const auto& want = (*ref)->last_routing(li);
      ASSERT_EQ(ids.size(), want.size()) << "layer " << li;
      for (size_t i = 0; i < ids.size(); ++i) {
        ++n;
        if (ids[i] != want[i]) ++d;
      }
      EXPECT_EQ(ids, want) << "routing, layer " << li;
    }
    std::printf("%s prefill of %zu tokens (%s): last-row rel err %.2e vs bf16-emulated ref, %d of %d expert ids "
                "differ\n",
                GetParam().c_str(), w.tokens.size(), moe_prefill_name(path), e, d, n);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LayeredVsBf16Ref,
                         ::testing::Values("cohere2_moe", "cohere2_moe_shared", "qwen3_moe", "qwen3", "llama"));

// The trained demo model (models/north-mini-demo, 16 experts top-2): the GPU's
// greedy tokens equal HF fp32's exactly for every golden prompt (a trained
// model has real margins, unlike the random fixtures). On a mismatch the
// bf16-emulating reference's tokens are printed too: equal to the GPU's means
// precision, different means a GPU bug.
// Parallel blocks run their FFN / MoE branch on a second stream
// (concurrent_branches). The two branches touch disjoint buffers and are
// joined before the next norm, so the logits must be bit-identical to the
// single-stream launch order: a ragged prefill step (eager, cuBLAS on both
// handles at once) and then decode steps through the graphs.
class LayeredBranches : public ::testing::TestWithParam<std::string> {};

TEST_P(LayeredBranches, ConcurrentBranchesBitIdenticalToOneStream) {
  MS_GPU_TEST_GUARD();
  if (const char* e = std::getenv("MEGASERVE_CONCURRENT_BRANCHES"); e && std::string(e) == "0")
    GTEST_SKIP() << "MEGASERVE_CONCURRENT_BRANCHES=0 forces one stream";
  if (std::getenv("MEGASERVE_MOE_PREFILL")) GTEST_SKIP() << "MEGASERVE_MOE_PREFILL overrides the paths under test";
  auto model = load_model(fixture_dir(GetParam()));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelConfig& cfg = (*model)->config;
  ASSERT_TRUE(cfg.parallel_block);
  // Both prefill expert paths.
  for (MoePrefillPath path : {MoePrefillPath::kGrouped, MoePrefillPath::kKernel}) {
    SCOPED_TRACE(moe_prefill_name(path));
    GpuBackendOptions opt;
    opt.layered.moe_prefill = path;
    opt.block_size = 4;
    opt.kv_bytes = 8 << 20;
    opt.max_context = 4096;
    opt.layered.concurrent_branches = true;
    auto two = GpuBackend::create(cfg, (*model)->weights, opt);
    ASSERT_TRUE(two.is_ok()) << two.status().to_string();
    opt.layered.concurrent_branches = false;
    auto one = GpuBackend::create(cfg, (*model)->weights, opt);
    ASSERT_TRUE(one.is_ok()) << one.status().to_string();
    const std::vector<int> lens = {2, 11, 25};
    std::vector<SeqWork> batch(lens.size());
    std::mt19937 rng(81);
    for (size_t s = 0; s < lens.size(); ++s) {
      batch[s].seq_id = static_cast<int64_t>(s);
      for (int t = 0; t < lens[s]; ++t) batch[s].tokens.push_back(static_cast<int32_t>(rng() % cfg.vocab_size));
      batch[s].block_tables.assign((*two)->kv_spec().groups.size(), {});
    }
    for (int step = 0; step < 10; ++step) {
      for (auto& w : batch) {
        const int need = (w.start_pos + static_cast<int>(w.tokens.size()) + 3) / 4;
        for (auto& t : w.block_tables)
          while (static_cast<int>(t.size()) < need) t.push_back(static_cast<int32_t>(w.seq_id * 16 + t.size()));
      }
      StepResult r2, r1;
      ASSERT_OK((*two)->step(batch, &r2));
      ASSERT_OK((*one)->step(batch, &r1));
      ASSERT_EQ(r2.logits.size(), r1.logits.size());
      for (size_t s = 0; s < batch.size(); ++s) {
        ASSERT_EQ(r2.logits[s].size(), r1.logits[s].size());
        EXPECT_EQ(0, std::memcmp(r2.logits[s].data(), r1.logits[s].data(), r1.logits[s].size() * sizeof(float)))
            << "step " << step << " seq " << s << " rel err " << rel_err(r2.logits[s], r1.logits[s]);
      }
      for (size_t s = 0; s < batch.size(); ++s) {
        batch[s].start_pos += static_cast<int32_t>(batch[s].tokens.size());
        batch[s].tokens = {argmax(r1.logits[s])};
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ParallelFamilies, LayeredBranches, ::testing::Values("cohere2_moe", "cohere2_moe_shared"));

// The grouped tensor-core expert GEMMs against the CUDA-core expert kernels on ragged prefill batches whose
// token counts (top-2 of 8 experts in the fixtures) give experts 1, 2, 3, ... and > 8 members, and > 64 and
// > 128 members (several 64-row tiles of one expert; the fixtures' I = 32 and H = 64 leave half of each gate/up
// and down tile past N). Same rounding points, so only fp32 summation order differs: logits of every sequence
// within kGemmVsKernelTol, identical routing.
constexpr double kGemmVsKernelTol = 5e-3;

class LayeredMoePrefill : public ::testing::TestWithParam<std::string> {};

TEST_P(LayeredMoePrefill, GroupedGemmsMatchExpertKernels) {
  MS_GPU_TEST_GUARD();
  if (std::getenv("MEGASERVE_MOE_PREFILL")) GTEST_SKIP() << "MEGASERVE_MOE_PREFILL overrides the paths under test";
  auto model = load_model(fixture_dir(GetParam()));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelConfig& cfg = (*model)->config;
  ASSERT_TRUE(cfg.is_moe());
  GpuBackendOptions opt;
  opt.block_size = 4;
  opt.kv_bytes = 8 << 20;
  opt.max_context = 4096;
  opt.layered.moe_prefill = MoePrefillPath::kKernel;
  auto kern = GpuBackend::create(cfg, (*model)->weights, opt);
  ASSERT_TRUE(kern.is_ok()) << kern.status().to_string();
  const MoeGemmKernel saved = moe_gemm_kernel();
  for (MoeGemmKernel gk : {MoeGemmKernel::kMma, MoeGemmKernel::kWgmma}) {
    const MoePrefillPath path = MoePrefillPath::kGrouped;
    const char* gname = gk == MoeGemmKernel::kWgmma ? "grouped (wgmma)" : "grouped (mma)";
    SCOPED_TRACE(gname);
    set_moe_gemm_kernel(gk);
    opt.layered.moe_prefill = path;
    auto tc = GpuBackend::create(cfg, (*model)->weights, opt);
    ASSERT_TRUE(tc.is_ok()) << tc.status().to_string();
    std::mt19937 rng(82);
    double worst = 0;
    for (const std::vector<int>& lens :
         std::vector<std::vector<int>>{{4, 5}, {1, 11}, {30, 7, 3, 1}, {300}, {129, 64, 65, 2}}) {
      std::vector<SeqWork> batch(lens.size());
      for (size_t s = 0; s < lens.size(); ++s) {
        batch[s].seq_id = static_cast<int64_t>(s);
        for (int t = 0; t < lens[s]; ++t) batch[s].tokens.push_back(static_cast<int32_t>(rng() % cfg.vocab_size));
        batch[s].block_tables.assign((*tc)->kv_spec().groups.size(), {});
        for (auto& table : batch[s].block_tables)
          while (static_cast<int>(table.size()) * 4 < lens[s])
            table.push_back(static_cast<int32_t>(s * 128 + table.size()));
      }
      StepResult rg, rk;
      ASSERT_OK((*tc)->step(batch, &rg));
      ASSERT_OK((*kern)->step(batch, &rk));
      for (size_t s = 0; s < batch.size(); ++s) {
        const double e = rel_err(rg.logits[s], rk.logits[s]);
        worst = std::max(worst, e);
        EXPECT_LT(e, kGemmVsKernelTol) << "tokens " << lens[s] << " (sequence " << s << " of " << lens.size() << ")";
      }
      for (int li = 0; li < cfg.n_layers; ++li) {
        std::vector<int32_t> a, b;
        ASSERT_OK((*tc)->layered().last_routing(li, &a));
        ASSERT_OK((*kern)->layered().last_routing(li, &b));
        EXPECT_EQ(a, b) << "routing, layer " << li;
      }
    }
    std::printf("%s: %s vs expert kernels, worst logits rel err %.2e\n", GetParam().c_str(), gname, worst);
  }
  set_moe_gemm_kernel(saved);
}

INSTANTIATE_TEST_SUITE_P(MoeFamilies, LayeredMoePrefill,
                         ::testing::Values("cohere2_moe", "cohere2_moe_shared", "qwen3_moe"));

TEST(LayeredDemoModel, GreedyTokensEqualTransformers) {
  MS_GPU_TEST_GUARD();
  const std::string dir = std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo";
  auto model = load_model(dir);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  GpuBackendOptions opt;
  opt.block_size = 16;
  opt.kv_bytes = 16 << 20;
  opt.max_context = 4096;
  auto gpu = GpuBackend::create((*model)->config, (*model)->weights, opt);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  std::ifstream in(dir + "/golden.json");
  nlohmann::json g = nlohmann::json::parse(in);
  for (const auto& p : g["prompts"]) {
    SCOPED_TRACE(p["name"].get<std::string>());
    const auto ids = p["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = p["greedy"].get<std::vector<int32_t>>();
    GenerateOptions go;
    go.max_new_tokens = 64;  // as tests/integration/demo_model_test.cpp
    auto out = generate_greedy(**gpu, ids, go);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ(*out, want);
    size_t first = 0;
    while (first < out->size() && first < want.size() && (*out)[first] == want[first]) ++first;
    std::printf("demo %s: %zu prompt tokens, GPU greedy equals HF for %zu of %zu tokens\n",
                p["name"].get<std::string>().c_str(), ids.size(), first, want.size());
    if (*out != want) {
      RefBackendOptions ro;
      ro.block_size = 16;
      ro.kv_bytes = 64 << 20;
      ro.threads = 2;
      ro.emulate_bf16_activations = true;
      auto ref = RefBackend::create((*model)->config, (*model)->weights, ro);
      ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
      auto emu = generate_greedy(**ref, ids, go);
      ASSERT_TRUE(emu.is_ok()) << emu.status().to_string();
      std::printf("  bf16-emulated ref tokens %s the GPU's\n", *emu == *out ? "EQUAL" : "DIFFER FROM");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LayeredVsRef,
                         ::testing::Values("cohere2_moe", "cohere2_moe_shared", "qwen3_moe", "qwen3", "llama"));

// Full North Mini Code shape with random weights built on the device (~61 GB),
// one decode step and a short benchmark (the numbers land in the test log).
// Shapes the attention kernels cannot prefill are refused at create, naming
// the setting, instead of failing at the first long prompt: GQA groups > 16.
TEST(LayeredCreate, RejectsGqaGroupAbove16) {
  MS_GPU_TEST_GUARD();
  auto cfg = preset_config(Arch::kCohere2Moe, "tiny");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  ModelConfig c = *cfg;
  c.n_heads = 32;  // head_dim 16: q width 512, kv width 16
  c.n_kv_heads = 1;
  ASSERT_TRUE(c.validate().is_ok()) << c.validate().to_string();
  GpuBackendOptions opt;
  opt.kv_bytes = 1 << 20;
  auto b = GpuBackend::create_random(c, 1, opt);
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("GQA group"), std::string::npos) << b.status().to_string();
  c.n_kv_heads = 2;  // group 16: accepted
  auto ok = GpuBackend::create_random(c, 1, opt);
  EXPECT_TRUE(ok.is_ok()) << ok.status().to_string();
}

// bench decode's KV pool on a card that cannot hold every point (no device
// needed): an 80 GB H100 keeps ~16 GiB for the KV cache beside NMC's 61 GB.
TEST(BenchKvPlan, KeepsThePointsThatFitAndNamesTheOthers) {
  auto cfg = preset_config(Arch::kCohere2Moe, "full");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  // The pool's bytes: bf16 K and V of every layer's blocks (its group's).
  size_t want = 0;
  const size_t per_block = size_t(cfg->n_kv_heads) * 64 * cfg->head_dim * 2;
  for (int li = 0; li < cfg->n_layers; ++li)
    want += 2 * per_block * (cfg->layers[li].sliding ? 4096 / 64 + 1 : (1024 + 64 + 1 + 63) / 64);
  EXPECT_EQ(kv_pool_bytes(*cfg, 64, kv_blocks_for(*cfg, 64, 1, 1024 + 64)), want);
  const std::vector<int> batches = {1, 2, 4, 8}, contexts = {1024, 8192, 131072};
  // Room for everything: the largest point's pool, as before.
  BenchKvPlan all = plan_bench_kv(*cfg, 64, batches, contexts, 64, size_t(1) << 40);
  EXPECT_EQ(all.blocks, kv_blocks_for(*cfg, 64, 8, 131072 + 64));
  EXPECT_TRUE(all.skipped.empty());
  const size_t budget = size_t(16) << 30;
  BenchKvPlan h100 = plan_bench_kv(*cfg, 64, batches, contexts, 64, budget);
  ASSERT_FALSE(h100.blocks.empty());
  EXPECT_LE(kv_pool_bytes(*cfg, 64, h100.blocks), budget);
  ASSERT_EQ(h100.skipped.count({8, 131072}), 1u);
  EXPECT_NE(h100.skipped.at({8, 131072}).find("does not fit the 16.0 GiB"), std::string::npos)
      << h100.skipped.at({8, 131072});
  for (int b : batches)
    for (int c : contexts) {
      const std::vector<int> need = kv_blocks_for(*cfg, 64, b, c + 64);
      bool fits = true;
      for (size_t g = 0; g < need.size(); ++g) fits &= need[g] <= h100.blocks[g];
      // Every point runs or is named, never both; the small ones run.
      EXPECT_NE(fits, h100.skipped.count({b, c}) == 1) << b << " x " << c;
      if (c <= 8192) {
        EXPECT_TRUE(fits) << b << " x " << c;
      }
    }
  BenchKvPlan none = plan_bench_kv(*cfg, 64, batches, contexts, 64, size_t(1) << 20);
  EXPECT_TRUE(none.blocks.empty());
  EXPECT_EQ(none.skipped.size(), batches.size() * contexts.size());
  // One KV group (a dense model without sliding layers): the same rules.
  auto llama = preset_config(Arch::kLlama, "full");
  ASSERT_TRUE(llama.is_ok());
  BenchKvPlan one = plan_bench_kv(*llama, 64, {1, 8}, {1024, 65536}, 64, size_t(1) << 40);
  ASSERT_EQ(one.blocks.size(), 1u);
  EXPECT_EQ(one.blocks, kv_blocks_for(*llama, 64, 8, 65536 + 64));
  const size_t small = kv_pool_bytes(*llama, 64, kv_blocks_for(*llama, 64, 8, 1024 + 64));
  BenchKvPlan some = plan_bench_kv(*llama, 64, {1, 8}, {1024, 65536}, 64, small);
  EXPECT_EQ(some.blocks, kv_blocks_for(*llama, 64, 8, 1024 + 64));
  EXPECT_EQ(some.skipped.count({8, 65536}) + some.skipped.count({1, 65536}), 2u);
}

TEST(LayeredFull, NmcRandomWeightsDecodeAndBench) {
  MS_GPU_TEST_GUARD();
  auto cfg = preset_config(Arch::kCohere2Moe, "full");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  if (free_b < (size_t(90) << 30)) GTEST_SKIP() << "needs ~90 GB of free device memory";
  GpuBackendOptions opt;
  opt.kv_blocks = kv_blocks_for(*cfg, 64, 8, 32768);
  opt.max_context = 131072;
  opt.layered.max_step_tokens = 512;
  auto b = GpuBackend::create_random(*cfg, 1, opt);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  std::printf("NMC random: %.2f GB weights, %.2f GB KV\n", (*b)->model().weight_bytes() / 1e9, (*b)->model().kv_bytes() / 1e9);
  BenchDecodeOptions bo;
  bo.batches = {1, 8};
  bo.contexts = {1024, 8192};
  bo.iters = 10;
  auto r = bench_decode(**b, bo);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  std::printf("%s", bench_decode_table(*r).c_str());
  for (const auto& row : r->rows) {
    EXPECT_TRUE(row.skipped.empty()) << row.skipped;
    EXPECT_GT(row.tok_per_s, 0);
  }
}

}  // namespace
}  // namespace ms::gpu::test
