// KV-cache sizing: the --gpu-memory-utilization arithmetic (H200-like
// numbers, exact bytes), --kv-cache-mb checked against what is free, the
// errors naming the numbers; what a layout holds (NMC's full / sliding
// groups), and that the largest request agrees with check_sequence_fits at
// the boundary (T fits, T + 1 does not).
#include "engine/kv_sizing.h"

#include <gtest/gtest.h>

#include "kv/kv_cache_manager.h"

namespace ms {
namespace {

constexpr size_t kGiB = size_t(1) << 30;
constexpr size_t kH200 = 150'117'318'656ull;  // an H200-sized device: 139.81 GiB

TEST(KvMemoryPlan, UtilizationOfTheTotalMinusWhatIsInUse) {
  // 64 GiB in use once the weights (61 GB) and the executors' buffers are allocated.
  DeviceMemory mem{kH200, kH200 - 64 * kGiB};
  auto p = plan_kv_memory(mem, 61'000'000'000ull, 0, 0.9);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  // 0.9 x total - in use - 1 GiB reserve.
  EXPECT_EQ(p->bytes, 135'105'586'790ull - 64 * kGiB - kGiB);
  EXPECT_EQ(p->bytes, 65'312'368'230ull);
  EXPECT_NE(p->explanation.find("0.90 x 139.81 GiB"), std::string::npos) << p->explanation;
  EXPECT_NE(p->explanation.find("64.00 GiB in use"), std::string::npos) << p->explanation;
  EXPECT_NE(p->explanation.find("56.81 GiB weights"), std::string::npos) << p->explanation;
  EXPECT_NE(p->explanation.find("1.00 GiB reserve"), std::string::npos) << p->explanation;
  // All of the device: everything free but the reserve.
  auto all = plan_kv_memory(mem, 0, 0, 1.0);
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(all->bytes, mem.free - kGiB);
  // Other processes' memory counts as in use (it is not ours to take).
  auto shared = plan_kv_memory(DeviceMemory{kH200, kH200 - 100 * kGiB}, 0, 0, 0.9);
  ASSERT_TRUE(shared.is_ok());
  EXPECT_EQ(shared->bytes, 135'105'586'790ull - 101 * kGiB);
}

TEST(KvMemoryPlan, NothingLeftIsAnErrorWithTheNumbers) {
  auto p = plan_kv_memory(DeviceMemory{kH200, kH200 - 70 * kGiB}, 61'000'000'000ull, 0, 0.5);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  const std::string& m = p.status().message();
  EXPECT_NE(m.find("--gpu-memory-utilization 0.50 allows 69.90 GiB"), std::string::npos) << m;
  EXPECT_NE(m.find("70.00 GiB in use"), std::string::npos) << m;
  EXPECT_NE(m.find("--kv-cache-mb"), std::string::npos) << m;
  // The reserve alone can tip it.
  EXPECT_FALSE(plan_kv_memory(DeviceMemory{100 * kGiB, 10 * kGiB + kGiB / 2}, 0, 0, 0.9).is_ok());
  EXPECT_TRUE(plan_kv_memory(DeviceMemory{100 * kGiB, 12 * kGiB}, 0, 0, 0.9).is_ok());
}

TEST(KvMemoryPlan, ExplicitBudgetIgnoresTheFractionButMustFit) {
  DeviceMemory mem{kH200, 20 * kGiB};
  auto p = plan_kv_memory(mem, 0, 8 * kGiB, 0.1);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->bytes, 8 * kGiB);
  EXPECT_NE(p->explanation.find("--gpu-memory-utilization ignored"), std::string::npos) << p->explanation;
  EXPECT_TRUE(plan_kv_memory(mem, 0, 19 * kGiB, 0.9).is_ok());
  auto big = plan_kv_memory(mem, 0, 19 * kGiB + 1, 0.9);  // over free - reserve
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("--kv-cache-mb 19456"), std::string::npos) << big.status().message();
  EXPECT_NE(big.status().message().find("20.00 GiB of 139.81 GiB are free"), std::string::npos)
      << big.status().message();
}

TEST(KvMemoryPlan, BadInputs) {
  DeviceMemory mem{kH200, kH200 / 2};
  EXPECT_EQ(plan_kv_memory(mem, 0, 0, 0.0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan_kv_memory(mem, 0, 0, 1.01).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(plan_kv_memory(DeviceMemory{0, 0}, 0, 0, 0.9).is_ok());
  EXPECT_FALSE(plan_kv_memory(DeviceMemory{10, 20}, 0, 0, 0.9).is_ok());
}

ModelConfig nmc_full() {
  auto c = preset_config(Arch::kCohere2Moe, "full");
  EXPECT_TRUE(c.is_ok());
  return *c;
}

TEST(KvCapacity, NmcGroupsContextAndLargestRequest) {
  const ModelConfig cfg = nmc_full();
  // The budget of the plan above, bf16.
  KvSpec spec = make_kv_spec(cfg, 64, 65'312'368'230ull, 2);
  KvCapacity cap = kv_capacity(spec, 512);
  ASSERT_EQ(cap.groups.size(), 2u);
  EXPECT_EQ(cap.block_size, 64);
  // Layer 0 is full attention: group 0 holds the 13 full layers, group 1 the 36 sliding ones.
  EXPECT_EQ(cap.groups[0].window, 0);
  EXPECT_EQ(cap.groups[0].layers, 13);
  EXPECT_EQ(cap.groups[1].window, 4096);
  EXPECT_EQ(cap.groups[1].layers, 36);
  // Each group gets its layers' share of the budget: (budget / 49 layers) / 128 KiB per layer-block.
  EXPECT_EQ(cap.groups[0].blocks, 10169);
  EXPECT_EQ(cap.groups[1].blocks, 10169);
  EXPECT_EQ(cap.groups[0].bytes, size_t(10169) * 13 * 131072);
  EXPECT_EQ(cap.context_tokens, 10169 * 64);
  // The sliding group holds a window plus a chunk, so the full group bounds a request.
  EXPECT_EQ(cap.max_request_tokens, 10169 * 64);
  const std::string d = describe(cap);
  EXPECT_NE(d.find("group 0 (13 full-attention layers): 10169 blocks x 64 tokens = 650816 tokens"), std::string::npos) << d;
  EXPECT_NE(d.find("group 1 (36 sliding-window layers, window 4096)"), std::string::npos) << d;
}

// The largest request is exactly check_sequence_fits' boundary, for layouts
// where the full group, the sliding group, or nothing bounds it.
TEST(KvCapacity, LargestRequestIsTheFitBoundary) {
  for (int chunk : {1, 64, 512, 4096}) {
    for (std::vector<KvGroupConfig> groups : std::vector<std::vector<KvGroupConfig>>{
             {{0, 10}}, {{0, 100}, {128, 100}}, {{0, 100}, {4096, 20}}, {{256, 50}}, {{256, 3}}}) {
      KvCacheConfig kc;
      kc.block_size = 64;
      kc.groups = groups;
      const int64_t t = max_sequence_tokens(kc, chunk);
      if (t == INT64_MAX) {
        EXPECT_TRUE(check_sequence_fits(kc, int64_t(1) << 40, chunk).is_ok());
        continue;
      }
      EXPECT_TRUE(check_sequence_fits(kc, t, chunk).is_ok()) << t << " chunk " << chunk;
      EXPECT_FALSE(check_sequence_fits(kc, t + 1, chunk).is_ok()) << t << " chunk " << chunk;
    }
  }
}

TEST(KvCapacity, AllSlidingLayoutHasNoContextGroup) {
  KvSpec spec;
  spec.block_size = 16;
  spec.groups.push_back({{0, 1}, 64, 40, 1024});
  KvCapacity cap = kv_capacity(spec, 16);
  EXPECT_EQ(cap.context_tokens, 0);
  EXPECT_EQ(cap.max_request_tokens, INT64_MAX);  // the window fits: no bound
}

}  // namespace
}  // namespace ms
