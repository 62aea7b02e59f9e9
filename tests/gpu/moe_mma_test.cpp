// The grouped tensor-core expert GEMMs (launch_moe_grouped_gate_up / _down,
// both kernels: mma.sync and wgmma)
// against fp32 CPU sums of the same bf16 inputs, on routings built to hit
// every tile edge: an expert with more than two 64-row tiles, experts with
// exactly 64 and 65 members, one-member experts, experts nobody chose, and a
// grid mostly made of blocks past the real tiles. Shapes: NMC's (H 2048, I
// 768: many K stages, full tiles) and ragged ones (N not a multiple of the
// tile, K a multiple of 8 but not of the 64-wide stage).
// Tolerance: act is bf16 (one rounding: kTolBf16); ybuf is fp32 from the
// GPU's own act, so only the summation order differs (kTolGemm).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gpu/ops/moe.h"
#include "gpu_test_util.h"

namespace ms::gpu::test {
namespace {

constexpr double kTolGemm = 2e-3, kTolBf16 = 1e-2;

struct GroupedCase {
  int T, K, E, H, I;
  // Expert of selection s (t * K + k); must give distinct experts per token.
  std::vector<int32_t> ids;
};

// Skewed routing: token t's first choice is expert 0 for most tokens (> 128
// members), the rest spread so that some experts get exactly 64 / 65 members,
// some one, and the last expert none.
std::vector<int32_t> skewed_ids(int T, int K, int E, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> ids(size_t(T) * K);
  for (int t = 0; t < T; ++t) {
    std::vector<int> all(E - 1);  // expert E - 1 is never chosen
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin() + 1, all.end(), g);
    if (t % 5 == 4) std::swap(all[0], all[1 + t % (E - 2)]);  // 4 of 5 tokens pick expert 0 first
    for (int k = 0; k < K; ++k) ids[size_t(t) * K + k] = all[k];
  }
  return ids;
}

void run_grouped_case(const GroupedCase& c) {
  const int n_sel = c.T * c.K;
  auto h = randn(size_t(c.T) * c.H, 90);
  auto wgu = randn(size_t(c.E) * 2 * c.I * c.H, 91, 1.f / std::sqrt(float(c.H)));
  auto wd = randn(size_t(c.E) * c.H * c.I, 92, 1.f / std::sqrt(float(c.I)));
  auto wts = randn(n_sel, 93);
  auto hb = to_bf16_rounding(h);
  auto wgub = to_bf16_rounding(wgu);
  auto wdb = to_bf16_rounding(wd);
  auto dh = dev(hb), dgu = dev(wgub), dd = dev(wdb);
  auto dids = dev(c.ids);
  auto dw = dev(wts);
  DeviceBuffer<int32_t> pb;
  ASSERT_OK(pb.alloc(moe_plan_ints(c.E, n_sel)));
  const MoePlan plan = moe_plan_view(pb.get(), c.E);
  DeviceBuffer<uint16_t> act;
  DeviceBuffer<float> ybuf;
  ASSERT_OK(act.alloc(size_t(n_sel) * c.I));
  ASSERT_OK(ybuf.alloc(size_t(n_sel) * c.H));
  // Poisoned (NaN) outputs: every row and column must be written.
  ASSERT_EQ(cudaMemset(act.get(), 0xff, act.bytes()), cudaSuccess);
  ASSERT_EQ(cudaMemset(ybuf.get(), 0xff, ybuf.bytes()), cudaSuccess);
  ASSERT_OK(launch_moe_plan(dids.get(), c.T, c.K, c.E, plan, nullptr));
  ASSERT_OK(launch_moe_grouped_gate_up(dh.get(), dgu.get(), c.H, c.I, c.T, c.K, c.E, plan, act.get(), nullptr));
  ASSERT_OK(launch_moe_grouped_down(act.get(), dd.get(), dw.get(), c.H, c.I, c.T, c.K, c.E, plan, ybuf.get(),
                                    nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const char* kernel = moe_gemm_kernel() == MoeGemmKernel::kWgmma ? "wgmma" : "mma";
  const auto p = host(pb);
  const auto ga = bf16_to_f32v(host(act));
  const auto gy = host(ybuf);
  const int32_t* members = p.data() + 1 + 3 * c.E;

  // Per-expert member counts as the test meant them (the plan's own are checked by the plan tests).
  std::vector<int> cnt(c.E, 0);
  for (int32_t e : c.ids) ++cnt[e];
  std::printf("grouped %s T=%d K=%d E=%d H=%d I=%d: largest expert %d members, %d experts routed\n", kernel, c.T,
              c.K, c.E, c.H, c.I, *std::max_element(cnt.begin(), cnt.end()),
              static_cast<int>(std::count_if(cnt.begin(), cnt.end(), [](int x) { return x > 0; })));

  // act row r (gathered order) belongs to member s = members[r].
  std::vector<float> want_act(size_t(n_sel) * c.I), got_act(size_t(n_sel) * c.I);
  std::vector<float> want_y(size_t(n_sel) * c.H), got_y(size_t(n_sel) * c.H);
  for (int r = 0; r < n_sel; ++r) {
    const int s = members[r], t = s / c.K, e = c.ids[s];
    ASSERT_GE(s, 0);
    ASSERT_LT(s, n_sel);
    const float* x = h.data() + size_t(t) * c.H;
    for (int i = 0; i < c.I; ++i) {
      const float* wg = wgu.data() + (size_t(e) * 2 * c.I + i) * c.H;
      const float* wu = wg + size_t(c.I) * c.H;
      double gs = 0, us = 0;
      for (int k = 0; k < c.H; ++k) {
        gs += double(x[k]) * wg[k];
        us += double(x[k]) * wu[k];
      }
      want_act[size_t(s) * c.I + i] = static_cast<float>(gs / (1.0 + std::exp(-gs)) * us);
      got_act[size_t(s) * c.I + i] = ga[size_t(r) * c.I + i];
    }
    const float* a = ga.data() + size_t(r) * c.I;  // the GPU's act: only the down GEMM's summation differs
    for (int n = 0; n < c.H; ++n) {
      const float* w = wd.data() + (size_t(e) * c.H + n) * c.I;
      double acc = 0;
      for (int i = 0; i < c.I; ++i) acc += double(a[i]) * w[i];
      want_y[size_t(s) * c.H + n] = static_cast<float>(wts[s] * acc);
    }
  }
  got_y = gy;
  const std::string what = std::string(kernel) + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) + " I=" + std::to_string(c.I);
  EXPECT_LT(rel_err(got_act, want_act), kTolBf16) << "act " << what;
  EXPECT_LT(rel_err(got_y, want_y), kTolGemm) << "ybuf " << what;
}

class MoeGroupedGemm : public ::testing::TestWithParam<MoeGemmKernel> {
 protected:
  void SetUp() override {
    saved_ = moe_gemm_kernel();
    set_moe_gemm_kernel(GetParam());
  }
  void TearDown() override { set_moe_gemm_kernel(saved_); }
  MoeGemmKernel saved_ = MoeGemmKernel::kMma;
};

TEST_P(MoeGroupedGemm, MatchesRef) {
  MS_GPU_TEST_GUARD();
  // NMC shape, 160 tokens top-8 of 128: expert 0 has > 128 members (three tiles), the rest ~9 each.
  run_grouped_case({160, 8, 128, 2048, 768, skewed_ids(160, 8, 128, 94)});
  // Ragged: I = 40 (N tail in gate/up, K = 40 < one stage in down), H = 200 (N tail in down, K tail: 200 = 3 * 64 + 8).
  run_grouped_case({170, 2, 8, 200, 40, skewed_ids(170, 2, 8, 95)});
  // Exactly 64 and 65 members: expert 0 gets 64, expert 1 gets 65, expert 2 one, the rest spread, expert 7 none.
  {
    const int T = 100, K = 2, E = 8;
    std::vector<int32_t> ids(size_t(T) * K);
    for (int t = 0; t < T; ++t) {
      ids[size_t(t) * K] = t < 64 ? 0 : 3 + t % 4;
      ids[size_t(t) * K + 1] = t < 65 ? 1 : (t == 65 ? 2 : 3 + (t + 1) % 4);
    }
    run_grouped_case({T, K, E, 64, 32, ids});
  }
  // Fewer than one tile in total (a prefill of 9 tokens, top-2 of 8), all grid blocks but a few empty.
  run_grouped_case({9, 2, 8, 64, 32, skewed_ids(9, 2, 8, 96)});
  // The wgmma kernel's 256-wide tiles: I = 296 (gate/up: 3 tiles of 128 outputs, the last 40 wide; down: K of
  // 4 stages and a partial fifth), H = 136 (down: one tile of 256 outputs, 136 used; gate/up: K of 2 stages
  // and a partial third).
  run_grouped_case({70, 2, 8, 136, 296, skewed_ids(70, 2, 8, 97)});
}

INSTANTIATE_TEST_SUITE_P(Kernels, MoeGroupedGemm, ::testing::Values(MoeGemmKernel::kMma, MoeGemmKernel::kWgmma),
                         [](const ::testing::TestParamInfo<MoeGemmKernel>& info) {
                           return std::string(info.param == MoeGemmKernel::kWgmma ? "wgmma" : "mma");
                         });

}  // namespace
}  // namespace ms::gpu::test
