// The decode benchmark of tools/gpu_check.sh, as a test binary target so the
// device build needs only test_gpu (the megaserve CLI needs cpp-httplib and
// pcre2): the same run as `megaserve bench decode --random nmc-full --batch
// 1,8 --context 1K,8K --json FILE` (random full-shape NMC weights built on the
// device, block size 64). Skipped unless MEGASERVE_BENCH=1; the JSON goes to
// $MEGASERVE_BENCH_JSON (default bench_nmc.json) and the table to stdout;
// $MEGASERVE_BENCH_BATCHES replaces the batch list.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "gpu/bench_decode.h"
#include "gpu/gpu_backend.h"
#include "gpu_test_util.h"
#include "model/config.h"

namespace ms::gpu::test {
namespace {

TEST(BenchNmc, Full) {
  MS_GPU_TEST_GUARD();
  const char* on = std::getenv("MEGASERVE_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set MEGASERVE_BENCH=1 to run the NMC decode benchmark";
  const char* path_env = std::getenv("MEGASERVE_BENCH_JSON");
  const std::string path = path_env && *path_env ? path_env : "bench_nmc.json";
  auto cfg = preset_config(Arch::kCohere2Moe, "full");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  BenchDecodeOptions bo;
  bo.batches = {1, 8};
  bo.contexts = {1024, 8192};
  // MEGASERVE_BENCH_BATCHES="1,2,4,8" (batch sizes <= 8) overrides the batch list (A/B runs).
  if (const char* e = std::getenv("MEGASERVE_BENCH_BATCHES"); e && *e) {
    bo.batches.clear();
    for (const char* p = e; *p;) {
      char* end = nullptr;
      const long v = std::strtol(p, &end, 10);
      ASSERT_TRUE(end != p && v >= 1 && v <= 8) << "MEGASERVE_BENCH_BATCHES: bad list '" << e << "'";
      bo.batches.push_back(static_cast<int>(v));
      p = *end == ',' ? end + 1 : end;
    }
  }
  GpuBackendOptions opt;
  opt.block_size = 64;
  opt.max_context = 8192 + 64;
  opt.kv_blocks = kv_blocks_for(*cfg, opt.block_size, 8, opt.max_context);
  auto b = GpuBackend::create_random(*cfg, bo.seed, opt);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  auto r = bench_decode(**b, bo);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  std::printf("%s", bench_decode_table(*r).c_str());
  std::ofstream out(path);
  out << bench_decode_json(*r) << "\n";
  ASSERT_TRUE(static_cast<bool>(out)) << path << ": write failed";
  std::printf("bench JSON: %s\n", path.c_str());
  for (const auto& row : r->rows) EXPECT_TRUE(row.skipped.empty()) << row.skipped;

  // Where a bs 1 / 8K step goes: per-op microseconds (summed over layers).
  SeqWork w;
  w.tokens = {1};
  w.start_pos = 8191;
  const int n_blocks = 8192 / opt.block_size;
  w.block_tables.assign((*b)->kv_spec().groups.size(), {});
  for (auto& t : w.block_tables)
    for (int i = 0; i < n_blocks; ++i) t.push_back(i);
  std::vector<std::pair<std::string, double>> prof;
  Status ps = (*b)->layered().profile_step({w}, &prof);
  EXPECT_TRUE(ps.is_ok()) << ps.to_string();
  double total = 0;
  for (const auto& [op, us] : prof) total += us;
  std::printf("profile bs1 8K (one captured step with timed events, %.1f us total):\n", total);
  for (const auto& [op, us] : prof)
    std::printf("  %-20s %9.1f us  %5.1f%%  %7.2f us/layer\n", op.c_str(), us, 100.0 * us / total,
                us / cfg->n_layers);
}

}  // namespace
}  // namespace ms::gpu::test
