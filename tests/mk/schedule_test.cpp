// The megakernel's schedule builder and execution model, on the CPU (CI):
// every list built for the served shapes passes the static checks (coverage,
// targets equal to signal counts, claim capacity), finishes under every
// interleaving the machine tries (no deadlock, whatever the routing), is
// deterministic, and a planted never-satisfied wait is reported as a
// deadlock naming the counter.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <tuple>

#include "mk/machine.h"
#include "mk/schedule.h"
#include "model/config.h"

namespace ms::mk {
namespace {

ModelConfig preset(Arch a, const char* size) {
  auto c = preset_config(a, size);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return *c;
}

ModelConfig demo_config() {
  auto c = ModelConfig::from_file(std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo/config.json");
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return *c;
}

Schedule build(const ModelConfig& cfg, int rows, int context, int n_sm, bool barrier = false, bool stuck = false) {
  ScheduleOptions o;
  o.rows = rows;
  o.context = context;
  o.n_sm = n_sm;
  o.barrier_between_phases = barrier;
  o.plant_stuck_wait = stuck;
  auto s = build_schedule(make_dims(cfg, 64), make_layer_info(cfg), o);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return *s;
}

// Routing stand-in: the number of routed experts per layer, from a seed
// (between top_k and the most the rows can route to).
MachineOps fake_ops(const Schedule& s, uint64_t seed, int* fixed_active = nullptr) {
  MachineOps ops;
  auto rng = std::make_shared<std::mt19937_64>(seed);
  ops.route = [&s, rng, fixed_active](int, const Instruction&) -> Result<int> {
    if (fixed_active) return *fixed_active;
    const int lo = s.dims.top_k, hi = max_expert_slots(s.dims, s.opt.rows);
    return std::uniform_int_distribution<int>(lo, hi)(*rng);
  };
  return ops;
}

TEST(MkSchedule, InstructionIsSixtyFourBytes) { EXPECT_EQ(sizeof(Instruction), 64u); }

TEST(MkSchedule, ServedShapesPassTheStaticChecks) {
  struct Case {
    ModelConfig cfg;
    const char* name;
  };
  std::vector<Case> cases = {{preset(Arch::kCohere2Moe, "full"), "nmc full"},
                             {preset(Arch::kQwen3Moe, "full"), "qwen3_moe full"},
                             {preset(Arch::kLlama, "full"), "llama full"},
                             {preset(Arch::kQwen3, "full"), "qwen3 full"},
                             {demo_config(), "demo"}};
  for (const Case& c : cases)
    for (int rows : {1, 3, 8})
      for (int context : {1024, 8192, 65536})
        for (int n_sm : {132, 7}) {
          SCOPED_TRACE(std::string(c.name) + " rows " + std::to_string(rows) + " context " + std::to_string(context) +
                       " SMs " + std::to_string(n_sm));
          Schedule s = build(c.cfg, rows, context, n_sm);
          Status st = check_schedule(s);
          EXPECT_TRUE(st.is_ok()) << st.to_string();
          EXPECT_EQ(s.n_sm(), n_sm);
        }
}

TEST(MkSchedule, EveryInterleavingFinishesWhateverTheRouting) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  const ModelConfig qwen = preset(Arch::kQwen3Moe, "full");
  const ModelConfig demo = demo_config();
  const ModelConfig llama = preset(Arch::kLlama, "full");
  struct Case {
    const ModelConfig* cfg;
    int rows, context, n_sm;
  };
  for (const Case& c : std::vector<Case>{{&nmc, 1, 8192, 132},
                                         {&nmc, 5, 4096, 16},
                                         {&qwen, 2, 2048, 24},
                                         {&demo, 8, 1024, 9},
                                         {&demo, 3, 2048, 1},
                                         {&llama, 4, 1024, 33}}) {
    Schedule s = build(*c.cfg, c.rows, c.context, c.n_sm);
    for (uint64_t seed : {0ull, 1ull, 2ull}) {
      SCOPED_TRACE(arch_name(c.cfg->arch) + std::string(" rows ") + std::to_string(c.rows) + " SMs " +
                   std::to_string(c.n_sm) + " seed " + std::to_string(seed));
      MachineStats stats;
      Status st = run_machine(s, fake_ops(s, seed + 11), {seed}, &stats);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      if (c.cfg->is_moe()) {
        int tiles = 0;
        for (int t : stats.tiles_per_sm) tiles += t;
        int want = 0;
        for (int l = 0; l < c.cfg->n_layers; ++l)
          want += stats.routed_experts[l] * (expert_gu_tiles(s.dims) + expert_down_tiles(s.dims));
        EXPECT_EQ(tiles, want) << "every routed expert tile ran exactly once";
      }
    }
  }
}

TEST(MkSchedule, MaxRoutedExpertsFitTheClaimCapacity) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  Schedule s = build(nmc, 8, 1024, 20);
  int all = max_expert_slots(s.dims, 8);
  ASSERT_EQ(all, 64);
  ASSERT_TRUE(run_machine(s, fake_ops(s, 0, &all), {3}).is_ok());
  int fewest = s.dims.top_k;
  ASSERT_TRUE(run_machine(s, fake_ops(s, 0, &fewest), {4}).is_ok());
}

TEST(MkSchedule, ListsAreDeterministic) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  Schedule a = build(nmc, 3, 8192, 132), b = build(nmc, 3, 8192, 132);
  ASSERT_EQ(a.instrs.size(), b.instrs.size());
  EXPECT_EQ(a.sm_begin, b.sm_begin);
  EXPECT_EQ(0, std::memcmp(a.instrs.data(), b.instrs.data(), a.instrs.size() * sizeof(Instruction)));
}

// The cost model's estimates: one (start, end) per instruction, start <=
// end, every SM's in list order, within the estimated step.
TEST(MkSchedule, EstimatesCoverEveryInstructionInListOrder) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  for (bool barrier : {false, true}) {
    ScheduleOptions o;
    o.rows = 1;
    o.context = 8192;
    o.barrier_between_phases = barrier;
    o.static_pct = barrier ? 0 : 50;
    auto s = build_schedule(make_dims(nmc, 64), make_layer_info(nmc), o);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    ASSERT_EQ(s->est_start_ns.size(), s->instrs.size());
    ASSERT_EQ(s->est_end_ns.size(), s->instrs.size());
    for (int sm = 0; sm < s->n_sm(); ++sm) {
      float prev_end = 0;
      for (uint32_t i = s->sm_begin[sm]; i < s->sm_begin[sm + 1]; ++i) {
        EXPECT_LE(s->est_start_ns[i], s->est_end_ns[i]) << describe(s->instrs[i]);
        EXPECT_GE(s->est_start_ns[i], prev_end * (1 - 1e-6f)) << "SM " << sm << ": " << describe(s->instrs[i]);
        EXPECT_LE(s->est_end_ns[i], s->estimated_ns * (1 + 1e-6));
        prev_end = s->est_end_ns[i];
      }
    }
  }
}

TEST(MkSchedule, BarrierAblationFinishes) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  Schedule s = build(nmc, 2, 4096, 12, /*barrier=*/true);
  Status st = check_schedule(s);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  int barriers = 0;
  for (const Instruction& in : s.instrs) barriers += in.op == Opcode::kBarrier;
  EXPECT_GT(barriers, nmc.n_layers * 12);
  st = run_machine(s, fake_ops(s, 5), {7});
  EXPECT_TRUE(st.is_ok()) << st.to_string();
}

// The list orders (ScheduleOptions::order): the same instructions, each SM's
// O-projection tiles of a parallel-block MoE layer where the order puts them
// relative to its claims, and every interleaving still finishes.
TEST(MkSchedule, ListOrdersKeepTheInstructionsAndFinish) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  const ModelConfig demo = demo_config();
  for (const ModelConfig* cfg : {&nmc, &demo}) {
    ASSERT_TRUE(cfg->parallel_block);
    for (const auto& [rows, context, n_sm] : std::vector<std::tuple<int, int, int>>{{1, 8192, 132}, {8, 1024, 9},
                                                                                       {3, 2048, 1}}) {
      ScheduleOptions o;
      o.rows = rows;
      o.context = context;
      o.n_sm = n_sm;
      o.order = ListOrder::kOProjFirst;
      auto base = build_schedule(make_dims(*cfg, 64), make_layer_info(*cfg), o);
      ASSERT_TRUE(base.is_ok());
      for (ListOrder order : {ListOrder::kClaimsFirst, ListOrder::kOProjBetween}) {
        SCOPED_TRACE(arch_name(cfg->arch) + std::string(" rows ") + std::to_string(rows) + " SMs " +
                     std::to_string(n_sm) + " order " + list_order_name(order));
        o.order = order;
        auto other = build_schedule(make_dims(*cfg, 64), make_layer_info(*cfg), o);
        ASSERT_TRUE(other.is_ok());
        ASSERT_TRUE(check_schedule(*other).is_ok()) << check_schedule(*other).to_string();
        // The same instructions (by opcode and layer), in another order.
        auto census = [](const Schedule& s) {
          std::map<std::pair<int, int>, int> n;
          for (const Instruction& in : s.instrs) ++n[{static_cast<int>(in.op), in.layer}];
          return n;
        };
        EXPECT_EQ(census(*base), census(*other));
        // On every SM, an MoE layer's O-projection tiles come after its
        // gate/up claim, and before (between) or after (claims first) its
        // down claim.
        for (int sm = 0; sm < other->n_sm(); ++sm) {
          std::map<int, bool> gu, down;
          for (const Instruction& in : other->sm_list(sm)) {
            if (in.op == Opcode::kExpertGateUp) gu[in.layer] = true;
            if (in.op == Opcode::kExpertDown) down[in.layer] = true;
            if (in.op == Opcode::kOProj && other->layers[in.layer].moe) {
              ASSERT_TRUE(gu[in.layer]) << "SM " << sm << " layer " << in.layer;
              ASSERT_EQ(down[in.layer], order == ListOrder::kClaimsFirst) << "SM " << sm << " layer " << in.layer;
            }
          }
        }
        for (uint64_t seed : {0ull, 1ull, 2ull}) {
          MachineStats stats;
          Status st = run_machine(*other, fake_ops(*other, seed + 5), {seed}, &stats);
          ASSERT_TRUE(st.is_ok()) << st.to_string();
        }
      }
    }
  }
  EXPECT_FALSE(parse_list_order("claims_later").is_ok());
  EXPECT_EQ(*parse_list_order("oproj_between"), ListOrder::kOProjBetween);
}

// Tiles per QKV / O-projection instruction (ScheduleOptions::qkv_run /
// o_run): every tile still appears once (check_schedule's coverage), the
// instruction counts follow the runs, every interleaving finishes; a run
// outside 1..64 is an error.
TEST(MkSchedule, QkvAndOProjRunsCoverEveryTileOnce) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  const Dims d = make_dims(nmc, 64);
  for (const auto& [qkv_run, o_run] : std::vector<std::pair<int, int>>{{1, 1}, {2, 4}, {3, 5}, {64, 64}}) {
    SCOPED_TRACE("qkv_run " + std::to_string(qkv_run) + " o_run " + std::to_string(o_run));
    ScheduleOptions o;
    o.rows = 2;
    o.context = 4096;
    o.n_sm = 24;
    o.qkv_run = qkv_run;
    o.o_run = o_run;
    auto s = build_schedule(d, make_layer_info(nmc), o);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    ASSERT_TRUE(check_schedule(*s).is_ok()) << check_schedule(*s).to_string();
    int want_qkv = 0;
    for (int g = 0; g < d.n_kv_heads; ++g)
      for (int part = 0; part < 3; ++part) {
        const RowRange rr = qkv_group_rows(d, g, part);
        want_qkv += ceil_div(ceil_div(rr.end, kTileRows) - rr.begin / kTileRows, qkv_run);
      }
    const int want_o = o_slices(d) * ceil_div(o_tiles(d), o_run);
    int n_qkv = 0, n_o = 0;
    for (const Instruction& in : s->instrs) {
      if (in.layer != 1) continue;
      n_qkv += in.op == Opcode::kQkv;
      n_o += in.op == Opcode::kOProj;
    }
    EXPECT_EQ(n_qkv, want_qkv);
    EXPECT_EQ(n_o, want_o);
    MachineStats stats;
    Status st = run_machine(*s, fake_ops(*s, 3), {7}, &stats);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  ScheduleOptions bad;
  bad.o_run = 0;
  auto r = build_schedule(d, make_layer_info(nmc), bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("o_run"), std::string::npos) << r.status().message();
}

// The fitted cost model (ScheduleOptions::fitted_costs) keeps QKV tiles off
// the SM that runs a layer's route, after the route (at 9268f8a, with the
// uniform model, that SM's QKV tile came ~10 us late and held back its KV
// group's attention); the uniform model did place some there.
TEST(MkSchedule, FittedCostsKeepQkvOffTheRoutingSm) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  auto qkv_after_route = [&](bool fitted) {
    ScheduleOptions o;
    o.rows = 1;
    o.context = 8192;
    o.n_sm = 132;
    o.fitted_costs = fitted;
    auto s = build_schedule(make_dims(nmc, 64), make_layer_info(nmc), o);
    EXPECT_TRUE(s.is_ok());
    int n = 0;
    for (int sm = 0; sm < s->n_sm(); ++sm) {
      std::map<int, bool> routed;
      for (const Instruction& in : s->sm_list(sm)) {
        if (in.op == Opcode::kRoute) routed[in.layer] = true;
        if (in.op == Opcode::kQkv && routed[in.layer]) ++n;
      }
    }
    return n;
  };
  EXPECT_GT(qkv_after_route(false), 0);
  EXPECT_EQ(qkv_after_route(true), 0);
}

TEST(MkSchedule, PlantedStuckWaitIsReportedAsADeadlock) {
  for (const ModelConfig& cfg : {preset(Arch::kCohere2Moe, "full"), preset(Arch::kLlama, "full")}) {
    Schedule s = build(cfg, 1, 1024, 8, false, /*stuck=*/true);
    ASSERT_TRUE(check_schedule(s).is_ok());
    Status st = run_machine(s, fake_ops(s, 1), {0});
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("deadlock"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("counter " + std::to_string(s.counters.never())), std::string::npos) << st.message();
  }
}

TEST(MkSchedule, BrokenTargetsAreCaught) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  Schedule s = build(nmc, 1, 1024, 16);
  // An attention split that waits for one QKV instruction fewer than signal.
  for (Instruction& in : s.instrs)
    if (in.op == Opcode::kAttention) {
      in.wait[0].target -= 1;
      break;
    }
  EXPECT_FALSE(check_schedule(s).is_ok());
  Schedule t = build(nmc, 1, 1024, 16);
  // A QKV tile dropped: coverage fails.
  for (Instruction& in : t.instrs)
    if (in.op == Opcode::kQkv) {
      in.op = Opcode::kBarrier;
      in.signal[0] = kNoCounter;
      break;
    }
  EXPECT_FALSE(check_schedule(t).is_ok());
}

TEST(MkSchedule, SplitsFollowTheContext) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  Schedule a = build(nmc, 1, 8192, 132);
  EXPECT_EQ(a.splits_full, 33);     // 4 KV heads x 33 splits ~ one split per SM
  EXPECT_EQ(a.splits_sliding, 32);  // window 4096: 65 stages, at least two per split
  Schedule b = build(nmc, 8, 8192, 132);
  EXPECT_EQ(b.splits_full, 5);
  Schedule c = build(nmc, 1, 1024, 132);
  EXPECT_EQ(c.splits_full, 8);  // 17 stages: at least two per split
}

TEST(MkSchedule, HeadSmsRunTheSerialHeadAndNothingElse) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  for (int rows : {1, 3}) {
    ScheduleOptions o;
    o.rows = rows;
    o.context = 8192;
    o.n_sm = 132;
    o.head_sms = 2;
    auto s = build_schedule(make_dims(nmc, 64), make_layer_info(nmc), o);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_TRUE(check_schedule(*s).is_ok());
    int head_ops = 0, claims = 0;
    for (int sm = 0; sm < o.n_sm; ++sm)
      for (const Instruction& in : s->sm_list(sm)) {
        const bool head = in.op == Opcode::kNorm || in.op == Opcode::kFinalNorm || in.op == Opcode::kRoute;
        if (sm >= 130) {
          EXPECT_TRUE(head || in.op == Opcode::kLmHead) << "SM " << sm << ": " << describe(in);
        } else {
          EXPECT_FALSE(head) << "SM " << sm << ": " << describe(in);
        }
        head_ops += head;
        claims += in.op == Opcode::kExpertGateUp || in.op == Opcode::kExpertDown;
      }
    const auto info = make_layer_info(nmc);
    int moe = 0;
    for (const auto& li : info) moe += li.moe;
    const int L = static_cast<int>(info.size());
    EXPECT_EQ(head_ops, L * rows + rows + moe);  // a norm per row and layer, the final norms, a route per MoE layer
    EXPECT_EQ(claims, 2 * 130 * moe);            // the claim loops on the other 130 SMs only
    for (uint64_t seed : {1u, 2u, 3u}) {  // every interleaving the machine tries completes
      MachineStats stats;
      Status st = run_machine(*s, fake_ops(*s, seed), {seed}, &stats);
      EXPECT_TRUE(st.is_ok()) << st.to_string();
    }
  }
  ScheduleOptions bad;
  bad.n_sm = 4;
  bad.head_sms = 3;
  EXPECT_FALSE(build_schedule(make_dims(nmc, 64), make_layer_info(nmc), bad).is_ok());
}

// ScheduleOptions::static_pct: the builder's ranges and the claimed rest
// run every routed tile exactly once, whatever the routing; at one row and
// 100% nothing is claimed (max_claims is the static range), and SMs without
// a range get no claim instruction.
TEST(MkSchedule, StaticExpertTilesRunEveryTileOnce) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  const ModelConfig demo = demo_config();
  struct Case {
    const ModelConfig* cfg;
    int rows, n_sm, pct;
  };
  for (const Case& c : std::vector<Case>{{&nmc, 1, 132, 100},
                                         {&nmc, 1, 132, 50},
                                         {&nmc, 3, 132, 50},
                                         {&nmc, 8, 16, 100},
                                         {&demo, 1, 7, 100},
                                         {&demo, 2, 5, 60}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " SMs " + std::to_string(c.n_sm) + " static_pct " +
                 std::to_string(c.pct));
    ScheduleOptions o;
    o.rows = c.rows;
    o.context = 8192;
    o.n_sm = c.n_sm;
    o.static_pct = c.pct;
    auto s = build_schedule(make_dims(*c.cfg, 64), make_layer_info(*c.cfg), o);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    ASSERT_TRUE(check_schedule(*s).is_ok()) << check_schedule(*s).to_string();
    const int K = s->dims.top_k, experts = c.pct * K / 100;
    const int moe_layers = [&] {
      int n = 0;
      for (const auto& li : s->layers) n += li.moe;
      return n;
    }();
    int static_tiles = 0, claim_instrs = 0;
    for (int sm = 0; sm < c.n_sm; ++sm)
      for (const Instruction& in : s->sm_list(sm)) {
        if (in.op != Opcode::kExpertGateUp && in.op != Opcode::kExpertDown) continue;
        ++claim_instrs;
        static_tiles += in.claim.static_n;
        EXPECT_EQ(in.claim.static_total,
                  experts * (in.op == Opcode::kExpertGateUp ? expert_gu_tiles(s->dims) : expert_down_tiles(s->dims)));
        if (c.rows == 1 && experts == K) {
          EXPECT_EQ(in.claim.max_claims, in.claim.static_n) << describe(in);
        }
      }
    EXPECT_EQ(static_tiles, moe_layers * experts * (expert_gu_tiles(s->dims) + expert_down_tiles(s->dims)));
    if (c.rows == 1 && experts == K) {
      EXPECT_LE(claim_instrs, 2 * c.n_sm * moe_layers);
    }
    for (uint64_t seed : {0ull, 5ull, 6ull}) {
      std::map<std::tuple<int, int, int, int>, int> ran;  // (layer, op, slot, tile)
      MachineOps ops = fake_ops(*s, seed + 3);
      ops.tile = [&ran](int, const Instruction& in, int slot, int tile) {
        ++ran[{int(in.layer), int(in.op), slot, tile}];
        return Status::ok();
      };
      MachineStats stats;
      Status st = run_machine(*s, ops, {seed}, &stats);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      size_t want = 0;
      for (int l = 0; l < s->dims.n_layers; ++l)
        want += size_t(stats.routed_experts[l]) * (expert_gu_tiles(s->dims) + expert_down_tiles(s->dims));
      EXPECT_EQ(ran.size(), want) << "every routed tile, seed " << seed;
      for (const auto& [key, n] : ran) EXPECT_EQ(n, 1) << "a tile ran " << n << " times";
    }
  }
  ScheduleOptions bad;
  bad.static_pct = 101;
  EXPECT_FALSE(build_schedule(make_dims(nmc, 64), make_layer_info(nmc), bad).is_ok());
}

TEST(MkSchedule, OprojSmsKeepTheOProjectionOnTheLastSms) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  for (int head : {0, 1}) {
    ScheduleOptions o;
    o.rows = 1;
    o.context = 8192;
    o.n_sm = 132;
    o.head_sms = head;
    o.oproj_sms = 32;
    auto s = build_schedule(make_dims(nmc, 64), make_layer_info(nmc), o);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_TRUE(check_schedule(*s).is_ok());
    const int lo = 132 - head - 32, hi = 132 - head;
    int o_tiles = 0;
    for (int sm = 0; sm < o.n_sm; ++sm)
      for (const Instruction& in : s->sm_list(sm))
        if (in.op == Opcode::kOProj) {
          EXPECT_TRUE(sm >= lo && sm < hi) << "SM " << sm << ": " << describe(in);
          o_tiles += in.gemv.n_tiles;
        }
    EXPECT_GT(o_tiles, 0);
    ASSERT_TRUE(run_machine(*s, fake_ops(*s, 7), {7}).is_ok());
  }
}

TEST(MkSchedule, AttentionSmPercentScalesTheSplits) {
  const ModelConfig nmc = preset(Arch::kCohere2Moe, "full");
  ScheduleOptions o;
  o.rows = 1;
  o.context = 8192;
  o.n_sm = 132;
  o.attn_sm_percent = 50;  // 66 SMs: 17 splits per KV head
  auto s = build_schedule(make_dims(nmc, 64), make_layer_info(nmc), o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->splits_full, 17);
  EXPECT_EQ(s->splits_sliding, 17);
  EXPECT_TRUE(check_schedule(*s).is_ok());
  int splits = 0;
  for (const Instruction& in : s->instrs)
    if (in.op == Opcode::kAttention && in.layer == 2) ++splits;
  EXPECT_EQ(splits, 4 * 17);
  ASSERT_TRUE(run_machine(*s, fake_ops(*s, 5), {5}).is_ok());
  o.attn_sm_percent = 400;  // more splits than SMs, still at least two stages each
  s = build_schedule(make_dims(nmc, 64), make_layer_info(nmc), o);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->splits_full, 64);  // kMaxSplits
  EXPECT_EQ(s->splits_sliding, 32);
  EXPECT_TRUE(check_schedule(*s).is_ok());
  // One wave: rounded down so that all splits fit in the SMs at once (2 rows
  // x 4 KV heads: 132 / 8 = 16.5 -> 16, where rounding up makes 17 x 8 = 136).
  o.attn_sm_percent = 100;
  o.rows = 2;
  s = build_schedule(make_dims(nmc, 64), make_layer_info(nmc), o);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->splits_full, 17);
  o.attn_one_wave = true;
  s = build_schedule(make_dims(nmc, 64), make_layer_info(nmc), o);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->splits_full, 16);
  EXPECT_EQ(s->splits_sliding, 16);
  EXPECT_TRUE(check_schedule(*s).is_ok());
  ASSERT_TRUE(run_machine(*s, fake_ops(*s, 9), {9}).is_ok());
}

TEST(MkSchedule, SplitRangesCoverTheKeysOnce) {
  for (int window : {0, 100, 4096})
    for (int pos : {0, 1, 63, 64, 65, 1000, 8191, 9000})
      for (int n : {1, 2, 7, 33}) {
        std::vector<int> seen(pos + 1, 0);
        int last = -1;
        for (int s = 0; s < n; ++s) {
          SplitRange r = split_range(pos, window, s, n);
          for (int st = r.stage_begin; st < r.stage_end; ++st)
            for (int k = st * kStageKeys; k < (st + 1) * kStageKeys; ++k)
              if (k >= r.lo && k <= pos) ++seen[k];
          if (r.stage_end > r.stage_begin) last = s;
          EXPECT_EQ(r.last_split, split_range(pos, window, 0, n).last_split);
        }
        const int lo = window > 0 ? std::max(0, pos - window + 1) : 0;
        for (int k = 0; k <= pos; ++k) ASSERT_EQ(seen[k], k >= lo ? 1 : 0) << "key " << k;
        EXPECT_EQ(last, split_range(pos, window, 0, n).last_split);
      }
}

TEST(MkSchedule, UnsupportedShapesAreNamed) {
  ModelConfig c = preset(Arch::kCohere2Moe, "tiny");  // head_dim 16
  Status st = check_supported(c, 64);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("head_dim"), std::string::npos);
  EXPECT_TRUE(check_supported(preset(Arch::kCohere2Moe, "full"), 64).is_ok());
  EXPECT_TRUE(check_supported(demo_config(), 64).is_ok());
  EXPECT_FALSE(check_supported(preset(Arch::kCohere2Moe, "full"), 48).is_ok());
  // A norm sums KV heads + top_k (+ shared slices) partial rows, at most kMaxNormSources.
  ModelConfig many = preset(Arch::kCohere2Moe, "full");
  many.n_kv_heads = 32;  // group 1
  many.top_k = 32;
  EXPECT_TRUE(check_supported(many, 64).is_ok());
  many.n_shared_experts = 1;
  many.shared_ffn = 768;
  st = check_supported(many, 64);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("partial rows"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ms::mk
