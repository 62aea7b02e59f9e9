// The megakernel interpreter (src/ref/mk_vm) on every HF fixture family and
// the trained demo model: ragged decode batches of 1..8 rows, teacher forced,
// through instruction lists built for several SM counts, against the fp32
// reference backend in bf16-emulation mode (the same rounding points):
//  - routing identical at every (row, layer), logits within 1e-2 relative
//    wherever the routing agrees (the only differences are fp32 summation
//    orders: the O-projection and dense-down k-slices, the split-softmax
//    merge; most steps are bit-identical, but a one-ulp difference that
//    flips a bf16 rounding moves the logits by ~3e-3, the bound the layered
//    backend holds against the same oracle);
//  - the trained demo model: free-running greedy tokens equal to HF's on
//    ragged batches of its golden prompts;
//  - every interleaving the execution model tries gives bit-identical logits
//    (a missing dependency would read a stale or poisoned buffer);
//  - no poisoned (NaN) value reaches the logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model_loader.h"
#include "ref/mk_vm.h"
#include "ref/ref_backend.h"

namespace ms {
namespace {

constexpr int kBlock = 16;

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1e-30));
}

std::string model_dir(const std::string& name) {
  if (name == "demo") return std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo";
  return std::string(MEGASERVE_SOURCE_DIR) + "/tests/fixtures/hf/" + name;
}

std::vector<int32_t> golden_tokens(const std::string& dir) {
  std::ifstream in(dir + "/golden.json");
  nlohmann::json g = nlohmann::json::parse(in);
  std::vector<int32_t> seq = g["prompt"].get<std::vector<int32_t>>();
  const auto greedy = g["greedy"].get<std::vector<int32_t>>();
  seq.insert(seq.end(), greedy.begin(), greedy.end());
  return seq;
}

// Rows of a ragged batch: row r replays the token sequence from offset
// 3 r, so the rows sit at different positions and see different tokens.
struct Row {
  SeqWork w;
  int offset = 0;
};

void grow_tables(SeqWork& w, int pos, int base, int block = kBlock) {
  for (auto& table : w.block_tables)
    while (int(table.size()) * block < pos + 1) table.push_back(base + static_cast<int32_t>(table.size()));
}

constexpr double kTol = 1e-2;

class MkVmFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(MkVmFamilies, MatchesTheBf16ReferenceOnRaggedBatches) {
  const std::string dir = model_dir(GetParam());
  auto model = load_model(dir);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelConfig& cfg = (*model)->config;
  const std::vector<int32_t> seq = golden_tokens(dir);
  RefBackendOptions ro;
  ro.block_size = kBlock;
  ro.kv_bytes = 32 << 20;
  ro.threads = 2;
  ro.emulate_bf16_activations = true;
  MkVmOptions vo;
  vo.block_size = kBlock;
  vo.kv_bytes = 16 << 20;
  for (int rows : {1, 3, 8}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    auto ref = RefBackend::create(cfg, (*model)->weights, ro);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    auto vm = MkVm::create(cfg, (*model)->weights, vo);
    ASSERT_TRUE(vm.is_ok()) << vm.status().to_string();
    const KvSpec& kv = (*vm)->kv_spec();
    const int steps = std::min<int>(int(seq.size()) - 3 * (rows - 1), 24);
    // Each row gets its own range of block ids (in both caches).
    const int per_row = (steps + 2 * rows) / kBlock + 1;
    std::vector<SeqWork> batch(rows);
    for (int r = 0; r < rows; ++r) {
      batch[r].seq_id = r;
      batch[r].block_tables.assign(kv.groups.size(), {});
    }
    int checked = 0, flips = 0, exact = 0;
    double worst = 0;
    for (int t = 0; t < steps; ++t) {
      for (int r = 0; r < rows; ++r) {
        SeqWork& w = batch[r];
        w.tokens = {seq[3 * r + t]};
        w.start_pos = t + 2 * r;  // ragged positions: row r is 2 r tokens ahead (its first keys are zero-filled K/V)
        grow_tables(w, w.start_pos, r * per_row);
      }
      mk::ScheduleOptions so;
      so.rows = rows;
      so.context = mk::context_bucket(t + 2 * rows);
      so.n_sm = (t % 3 == 0) ? 1 : (t % 3 == 1 ? 5 : 132);
      auto sched = mk::build_schedule((*vm)->dims(), (*vm)->layer_info(), so);
      ASSERT_TRUE(sched.is_ok()) << sched.status().to_string();
      StepResult got, want;
      Status st = (*vm)->step(*sched, batch, {uint64_t(t)}, &got);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      ASSERT_TRUE((*ref)->step(batch, &want).is_ok());
      bool same_routes = true;
      for (int l = 0; l < cfg.n_layers; ++l) same_routes &= (*vm)->last_routing(l) == (*ref)->last_routing(l);
      for (int r = 0; r < rows; ++r) {
        for (float v : got.logits[r]) ASSERT_TRUE(std::isfinite(v)) << "poisoned value in row " << r << " step " << t;
        if (!same_routes) continue;
        const double e = rel_err(got.logits[r], want.logits[r]);
        worst = std::max(worst, e);
        EXPECT_LT(e, kTol) << "row " << r << " step " << t << " pos " << batch[r].start_pos << " n_sm " << so.n_sm;
        ++checked;
        exact += e == 0;
      }
      flips += same_routes ? 0 : 1;
      if (t % 6 == 0) {  // other interleavings: bit-identical (the step's KV writes are idempotent)
        for (uint64_t seed : {101ull, 202ull}) {
          StepResult again;
          ASSERT_TRUE((*vm)->step(*sched, batch, {seed}, &again).is_ok());
          for (int r = 0; r < rows; ++r) ASSERT_EQ(again.logits[r], got.logits[r]) << "seed " << seed;
        }
        // The other list orders (O-projection before, between or after the
        // claims): the same instructions and summation orders, so the same bits.
        for (mk::ListOrder order : {mk::ListOrder::kOProjFirst, mk::ListOrder::kClaimsFirst,
                                    mk::ListOrder::kOProjBetween}) {
          if (order == so.order) continue;
          mk::ScheduleOptions other = so;
          other.order = order;
          auto sched_other = mk::build_schedule((*vm)->dims(), (*vm)->layer_info(), other);
          ASSERT_TRUE(sched_other.is_ok()) << sched_other.status().to_string();
          StepResult again;
          ASSERT_TRUE((*vm)->step(*sched_other, batch, {303ull}, &again).is_ok());
          for (int r = 0; r < rows; ++r)
            ASSERT_EQ(again.logits[r], got.logits[r]) << "list order " << mk::list_order_name(order);
        }
        // Expert tiles placed statically (half of top_k experts' worth, all
        // of them): the same tiles with the same math, so the same bits.
        for (int pct : {50, 100}) {
          mk::ScheduleOptions other = so;
          other.static_pct = pct;
          auto sched_other = mk::build_schedule((*vm)->dims(), (*vm)->layer_info(), other);
          ASSERT_TRUE(sched_other.is_ok()) << sched_other.status().to_string();
          ASSERT_TRUE(mk::check_schedule(*sched_other).is_ok());
          StepResult again;
          ASSERT_TRUE((*vm)->step(*sched_other, batch, {404ull}, &again).is_ok());
          for (int r = 0; r < rows; ++r) ASSERT_EQ(again.logits[r], got.logits[r]) << "static_pct " << pct;
        }
      }
    }
    printf("[mk_vm] %s rows %d: %d row-steps compared (%d bit-identical), worst rel err %.2e, %d steps with a routing "
           "flip\n",
           GetParam().c_str(), rows, checked, exact, worst, flips);
    EXPECT_GT(checked, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MkVmFamilies,
                         ::testing::Values("cohere2_moe", "cohere2_moe_shared", "qwen3_moe", "qwen3", "llama"));

struct DemoPrompt {
  std::vector<int32_t> prompt, greedy;
};

std::vector<DemoPrompt> demo_prompts() {
  std::ifstream in(model_dir("demo") + "/golden.json");
  nlohmann::json g = nlohmann::json::parse(in);
  std::vector<DemoPrompt> v;
  for (const auto& p : g["prompts"])
    v.push_back({p["prompt_ids"].get<std::vector<int32_t>>(), p["greedy"].get<std::vector<int32_t>>()});
  return v;
}

// Free-running greedy decode of ragged prompts in one batch: row r feeds its
// prompt token by token, then its own argmax; every generated token must be
// HF's (the demo model is trained: its margins are wide). One test per batch,
// so ctest runs them side by side (the 8-row batch is the longest CPU test
// under the sanitizers).
struct DemoCase {
  const char* name;
  std::vector<int> which;  // prompt of each row
  int n_sm;
};
class MkVmDemo : public ::testing::TestWithParam<DemoCase> {};

TEST_P(MkVmDemo, GreedyTokensEqualHfOnRaggedBatches) {
  auto model = load_model(model_dir("demo"));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const std::vector<DemoPrompt> prompts = demo_prompts();
  ASSERT_GE(prompts.size(), 5u);
  MkVmOptions vo;
  vo.block_size = 64;
  vo.kv_bytes = 64 << 20;
  {
    const DemoCase& c = GetParam();
    const int rows = static_cast<int>(c.which.size());
    SCOPED_TRACE("rows " + std::to_string(rows));
    auto vm = MkVm::create((*model)->config, (*model)->weights, vo);
    ASSERT_TRUE(vm.is_ok()) << vm.status().to_string();
    const KvSpec& kv = (*vm)->kv_spec();
    int steps = 0;
    for (int p : c.which) steps = std::max<int>(steps, prompts[p].prompt.size() + prompts[p].greedy.size() - 1);
    const int per_row = steps / 64 + 2;
    std::vector<SeqWork> batch(rows);
    std::vector<std::vector<int32_t>> generated(rows);
    for (int r = 0; r < rows; ++r) {
      batch[r].seq_id = r;
      batch[r].block_tables.assign(kv.groups.size(), {});
    }
    std::vector<int32_t> next(rows, 0);
    std::map<int, mk::Schedule> schedules;  // by context bucket, as the executor caches them
    for (int t = 0; t < steps; ++t) {
      for (int r = 0; r < rows; ++r) {
        const DemoPrompt& p = prompts[c.which[r]];
        batch[r].tokens = {t < int(p.prompt.size()) ? p.prompt[t] : next[r]};
        batch[r].start_pos = t;
        grow_tables(batch[r], t, r * per_row, 64);
      }
      const int bucket = mk::context_bucket(t + 1);
      if (!schedules.count(bucket)) {
        mk::ScheduleOptions so;
        so.rows = rows;
        so.context = bucket;
        so.n_sm = c.n_sm;
        auto built = mk::build_schedule((*vm)->dims(), (*vm)->layer_info(), so);
        ASSERT_TRUE(built.is_ok());
        schedules.emplace(bucket, std::move(*built));
      }
      const mk::Schedule* sched = &schedules.at(bucket);
      StepResult out;
      Status st = (*vm)->step(*sched, batch, {uint64_t(t + 1)}, &out);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      for (int r = 0; r < rows; ++r) {
        const auto& l = out.logits[r];
        next[r] = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
        const DemoPrompt& p = prompts[c.which[r]];
        if (t + 1 >= int(p.prompt.size()) && generated[r].size() < p.greedy.size()) generated[r].push_back(next[r]);
      }
    }
    for (int r = 0; r < rows; ++r) EXPECT_EQ(generated[r], prompts[c.which[r]].greedy) << "row " << r;
  }
}
INSTANTIATE_TEST_SUITE_P(Batches, MkVmDemo,
                         ::testing::Values(DemoCase{"rows1_sm132", {1}, 132}, DemoCase{"rows3_sm7", {0, 1, 4}, 7},
                                           DemoCase{"rows8_sm132", {0, 1, 2, 3, 4, 1, 0, 1}, 132}),
                         [](const ::testing::TestParamInfo<DemoCase>& i) { return std::string(i.param.name); });

TEST(MkVm, RejectsBatchesTheScheduleDoesNotServe) {
  auto model = load_model(model_dir("cohere2_moe"));
  ASSERT_TRUE(model.is_ok());
  auto vm = MkVm::create((*model)->config, (*model)->weights, {});
  ASSERT_TRUE(vm.is_ok());
  mk::ScheduleOptions so;
  so.rows = 2;
  so.context = 1024;
  so.n_sm = 4;
  auto sched = mk::build_schedule((*vm)->dims(), (*vm)->layer_info(), so);
  ASSERT_TRUE(sched.is_ok());
  SeqWork w;
  w.tokens = {1};
  w.block_tables.assign((*vm)->kv_spec().groups.size(), {0});
  StepResult out;
  EXPECT_FALSE((*vm)->step(*sched, {w}, {}, &out).is_ok());  // one row, schedule for two
  w.start_pos = 2000;
  EXPECT_FALSE((*vm)->step(*sched, {w, w}, {}, &out).is_ok());  // past the context bucket
}


// Forced routing: forcing the interpreter's own choice changes nothing;
// forcing another expert routes there (last_routing), keeps the own choice
// on record (last_own_routing), changes the logits, and lasts one step; a
// forced list of the wrong size or with an unknown expert is refused.
TEST(MkVm, ForcedRoutingFollowsTheGivenExpertsForOneStep) {
  auto model = load_model(model_dir("cohere2_moe"));
  ASSERT_TRUE(model.is_ok());
  const ModelConfig& cfg = (*model)->config;
  MkVmOptions vo;
  vo.block_size = 16;
  vo.kv_bytes = 16 << 20;
  mk::ScheduleOptions so;
  so.rows = 2;
  so.context = 64;
  so.n_sm = 4;
  const int K = cfg.top_k, E = cfg.n_experts;
  int moe = -1;
  for (int l = 0; l < cfg.n_layers && moe < 0; ++l)
    if (cfg.layers[l].moe) moe = l;
  ASSERT_GE(moe, 0);
  auto run = [&](const std::vector<std::vector<int32_t>>* forced, StepResult* out, std::vector<int32_t>* used,
                 std::vector<int32_t>* own) -> Status {
    auto vm = MkVm::create(cfg, (*model)->weights, vo);
    if (!vm.is_ok()) return vm.status();
    auto sched = mk::build_schedule((*vm)->dims(), (*vm)->layer_info(), so);
    if (!sched.is_ok()) return sched.status();
    std::vector<SeqWork> batch(2);
    for (int r = 0; r < 2; ++r) {
      batch[r].seq_id = r;
      batch[r].tokens = {5 + 11 * r};
      batch[r].start_pos = 3 + r;
      batch[r].block_tables.assign((*vm)->kv_spec().groups.size(), {r});
    }
    if (forced) (*vm)->force_routing(*forced);
    MS_RETURN_IF_ERROR((*vm)->step(*sched, batch, {}, out));
    *used = (*vm)->last_routing(moe);
    *own = (*vm)->last_own_routing(moe);
    StepResult again;  // the next step routes on its own again
    MS_RETURN_IF_ERROR((*vm)->step(*sched, batch, {}, &again));
    if ((*vm)->last_routing(moe) != (*vm)->last_own_routing(moe)) return internal_error("forced routing lasted");
    return Status::ok();
  };
  StepResult base, same, other;
  std::vector<int32_t> used, own;
  Status st = run(nullptr, &base, &used, &own);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(used, own);
  std::vector<std::vector<int32_t>> forced(cfg.n_layers);
  forced[moe] = own;
  std::vector<int32_t> used2, own2;
  st = run(&forced, &same, &used2, &own2);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(same.logits, base.logits);
  // Row 1's last choice replaced by an expert it did not choose.
  std::vector<int32_t> alt = own;
  for (int e = 0; e < E; ++e)
    if (std::find(own.begin() + K, own.begin() + 2 * K, e) == own.begin() + 2 * K) {
      alt[2 * K - 1] = e;
      break;
    }
  forced[moe] = alt;
  st = run(&forced, &other, &used2, &own2);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(used2, alt);
  EXPECT_EQ(own2, own);
  EXPECT_EQ(other.logits[0], base.logits[0]) << "row 0 routes as before";
  EXPECT_NE(other.logits[1], base.logits[1]);
  forced[moe] = {0};
  EXPECT_FALSE(run(&forced, &other, &used2, &own2).is_ok());
  forced[moe] = alt;
  forced[moe][0] = E;
  EXPECT_FALSE(run(&forced, &other, &used2, &own2).is_ok());
}
}  // namespace
}  // namespace ms
