// Every layered-backend op against its fp32 CPU reference (src/ref/ref_ops.h)
// on random inputs with fixed seeds. Inputs are rounded to bf16 before the
// reference sees them, so the error measures the kernel alone.
// Tolerances (normalized L2 error): fp32 outputs 1e-4 (GEMV) / 2e-3 (cuBLAS,
// summation order and tensor cores); bf16 outputs 1e-2 (one bf16 rounding).
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>

#include "gpu/ops/attention.h"
#include "gpu/ops/elementwise.h"
#include "gpu/ops/linear.h"
#include "gpu/ops/moe.h"
#include "gpu/ops/rope_kv.h"
#include "gpu/ops/sampling.h"
#include "gpu_test_util.h"
#include "ref/ref_ops.h"

namespace ms::gpu::test {
namespace {

constexpr double kTolF32 = 1e-4, kTolGemm = 2e-3, kTolBf16 = 1e-2;

struct LinearCase {
  int R, N, K;
};

TEST(GpuOps, GemvMatchesRef) {
  MS_GPU_TEST_GUARD();
  // Split K: {3, 300, 2056} and {5, 64, 3072} in 2 slices, {1, 2048, 4096} (o_proj) and {2, 100, 4104}
  // (slices of 1032, last 1008) in 4; {1, 5120, 2048}: QKV, 2 slices, one row. Persistent grid-stride over
  // more tiles than resident blocks, last tile partial: {2, 8200, 264} (MR 8, KS 1), {1, 12352, 2048} (KS 1,
  // two rounds of loads), {1, 4098, 4096} (KS 2, odd N), {8, 2050, 1024} (MR 8, KS 1). One row (pipelined
  // stream): {1, 100, 4104} KS 4 with a second round that is empty in the last slice, {1, 300, 2056} KS 2.
  // Row bounds: R 2 -> MR 2, R 3..4 -> MR 4 ({4, 520, 2048}, {3, 300, 2056}), R 5..8 -> MR 8.
  for (LinearCase c : {LinearCase{1, 1, 8}, {1, 37, 264}, {3, 300, 2056}, {8, 129, 1032}, {5, 64, 3072},
                       {1, 2048, 4096}, {2, 100, 4104}, {1, 5120, 2048}, {1, 3, 4096}, {2, 8200, 264},
                       {1, 12352, 2048}, {1, 4098, 4096}, {8, 2050, 1024}, {1, 100, 4104}, {1, 300, 2056},
                       {4, 520, 2048}}) {
    auto x = randn(size_t(c.R) * c.K, 1), w = randn(size_t(c.N) * c.K, 2, 0.05f), b = randn(c.N, 3);
    auto xb = to_bf16_rounding(x), wb = to_bf16_rounding(w);
    std::vector<float> want(size_t(c.R) * c.N);
    ref_matmul(x.data(), w.data(), b.data(), want.data(), c.R, c.N, c.K);
    auto dx = dev(xb), dw = dev(wb);
    auto db = dev(b);
    DeviceBuffer<float> dy;
    ASSERT_OK(dy.alloc(want.size()));
    ASSERT_OK(launch_gemv(dx.get(), c.K, dw.get(), db.get(), 1.f, dy.get(), c.N, c.R, c.N, c.K, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    double e = rel_err(host(dy), want);
    EXPECT_LT(e, kTolF32) << "R=" << c.R << " N=" << c.N << " K=" << c.K;
  }
}

TEST(GpuOps, GemmAndRouterGemvMatchRef) {
  MS_GPU_TEST_GUARD();
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  for (LinearCase c : {LinearCase{9, 100, 264}, {37, 513, 64}, {130, 72, 2048}}) {
    auto x = randn(size_t(c.R) * c.K, 4), w = randn(size_t(c.N) * c.K, 5, 0.05f), b = randn(c.N, 6);
    auto xb = to_bf16_rounding(x), wb = to_bf16_rounding(w);
    std::vector<float> want(size_t(c.R) * c.N);
    ref_matmul(x.data(), w.data(), b.data(), want.data(), c.R, c.N, c.K);
    auto dx = dev(xb), dw = dev(wb);
    auto db = dev(b);
    DeviceBuffer<float> dy;
    ASSERT_OK(dy.alloc(want.size()));
    ASSERT_OK(launch_gemm(h, dx.get(), c.K, dw.get(), db.get(), 1.f, dy.get(), c.N, c.R, c.N, c.K, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LT(rel_err(host(dy), want), kTolGemm) << "gemm R=" << c.R;
    // fp32-activation GEMV (router): x unrounded is fine, compare to the same.
    auto xf = randn(size_t(c.R) * c.K, 7);
    ref_matmul(xf.data(), w.data(), nullptr, want.data(), c.R, c.N, c.K);
    auto dxf = dev(xf);
    ASSERT_OK(launch_gemv_f32x(dxf.get(), dw.get(), dy.get(), c.R, c.N, c.K, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LT(rel_err(host(dy), want), kTolF32) << "gemv_f32x R=" << c.R;
    // The prefill router: the weights widened to fp32 on the device, strict fp32 cuBLAS GEMM.
    DeviceBuffer<float> dwf;
    ASSERT_OK(dwf.alloc(w.size()));
    ASSERT_OK(launch_bf16_to_f32(dw.get(), w.size(), dwf.get(), nullptr));
    ASSERT_EQ(cudaMemset(dy.get(), 0xff, dy.bytes()), cudaSuccess);
    ASSERT_OK(launch_gemm_f32(h, dxf.get(), dwf.get(), dy.get(), c.R, c.N, c.K, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(host(dwf), w) << "bf16 -> fp32 widening";
    EXPECT_LT(rel_err(host(dy), want), kTolF32) << "gemm_f32 R=" << c.R;
  }
  cublasDestroy(h);
}

TEST(GpuOps, AddNormMatchesRef) {
  MS_GPU_TEST_GUARD();
  for (NormKind kind : {NormKind::kRms, NormKind::kLayer}) {
    for (int H : {64, 2048, 1000, 1002, 6000}) {  // 1002: scalar kernel; 6000: two float4 per thread
      const int T = 5;
      auto x = randn(size_t(T) * H, 10, 1.f, 0.3f), a0 = randn(size_t(T) * H, 11), a1 = randn(size_t(T) * H, 12);
      auto w = randn(H, 13, 0.2f, 1.f);
      std::vector<float> sum(x.size());
      for (size_t i = 0; i < x.size(); ++i) sum[i] = (x[i] + a0[i]) + a1[i];
      std::vector<float> want(x.size());
      ref_norm(kind, sum.data(), w.data(), want.data(), T, H, 1e-6f);
      auto dx = dev(x), d0 = dev(a0), d1 = dev(a1), dw = dev(w);
      DeviceBuffer<uint16_t> out;
      DeviceBuffer<float> outf;
      ASSERT_OK(out.alloc(x.size()));
      ASSERT_OK(outf.alloc(x.size()));
      ASSERT_OK(launch_add_norm(dx.get(), d0.get(), d1.get(), nullptr, dw.get(), kind, 1e-6f, T, H, out.get(),
                                outf.get(), nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LT(rel_err(host(dx), sum), 1e-6) << "residual";
      EXPECT_LT(rel_err(host(outf), want), kTolF32);
      EXPECT_LT(rel_err(bf16_to_f32v(host(out)), want), kTolBf16);
      // Row gather (final norm of the logits rows), no adds.
      std::vector<int32_t> rows = {4, 1};
      auto drows = dev(rows);
      ASSERT_OK(launch_add_norm(dx.get(), nullptr, nullptr, drows.get(), dw.get(), kind, 1e-6f, 2, H, out.get(),
                                outf.get(), nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      auto got = host(outf);
      std::vector<float> g2(got.begin(), got.begin() + 2 * H), w2(2 * H);
      std::copy_n(want.begin() + 4 * H, H, w2.begin());
      std::copy_n(want.begin() + 1 * H, H, w2.begin() + H);
      EXPECT_LT(rel_err(g2, w2), kTolF32) << "gather";
    }
  }
}

TEST(GpuOps, EmbeddingAndSwigluMatchRef) {
  MS_GPU_TEST_GUARD();
  const int V = 50, H = 72, T = 7, F = 40;
  auto table = randn(size_t(V) * H, 20);
  auto tb = to_bf16_rounding(table);
  std::vector<int32_t> ids = {0, 49, 3, 3, 17, 22, 8};
  auto dt = dev(tb);
  auto di = dev(ids);
  DeviceBuffer<float> x;
  ASSERT_OK(x.alloc(size_t(T) * H));
  ASSERT_OK(launch_embedding(dt.get(), di.get(), T, H, x.get(), nullptr));
  auto gu = randn(size_t(T) * 2 * F, 21, 2.f);
  auto dgu = dev(gu);
  DeviceBuffer<uint16_t> act;
  ASSERT_OK(act.alloc(size_t(T) * F));
  ASSERT_OK(launch_swiglu(dgu.get(), 2 * F, T, F, act.get(), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> want(size_t(T) * H);
  for (int t = 0; t < T; ++t) std::copy_n(table.begin() + size_t(ids[t]) * H, H, want.begin() + size_t(t) * H);
  EXPECT_EQ(rel_err(host(x), want), 0.0);
  std::vector<float> ws(size_t(T) * F);
  for (int t = 0; t < T; ++t) ref_swiglu(gu.data() + t * 2 * F, gu.data() + t * 2 * F + F, ws.data() + t * F, F);
  EXPECT_LT(rel_err(bf16_to_f32v(host(act)), ws), kTolBf16);
}

TEST(GpuOps, RopeKvMatchesRef) {
  MS_GPU_TEST_GUARD();
  struct Case {
    RopeStyle style;
    bool qk_norm, rope;
    int hd;
  };
  for (Case c : {Case{RopeStyle::kInterleaved, false, true, 128}, {RopeStyle::kNeox, true, true, 128},
                 {RopeStyle::kNeox, false, true, 16}, {RopeStyle::kInterleaved, true, false, 64}}) {
    ModelConfig cfg;
    cfg.head_dim = c.hd;
    cfg.rope_theta = 50000.0;
    const int nh = 4, nkv = 2, T = 6, bs = 4, nblocks = 5, ld = (nh + 2 * nkv) * c.hd;
    std::vector<float> inv = ref_rope_inv_freq(cfg);
    auto qkv = randn(size_t(T) * ld, 30);
    auto qn = randn(c.hd, 31, 0.3f, 1.f), kn = randn(c.hd, 32, 0.3f, 1.f);
    std::vector<int32_t> pos = {0, 1, 5, 6, 7, 4095}, table = {3, 1, 4, 0, 2};
    std::vector<int32_t> slots(T);
    // positions 4095 -> use block id 2 for the last token (a different sequence).
    for (int t = 0; t < T; ++t) slots[t] = (t == T - 1 ? 2 : table[pos[t] / bs]) * bs + pos[t] % bs;
    auto dqkv = dev(qkv);
    auto dpos = dev(pos), dslots = dev(slots);
    auto dinv = dev(inv), dqn = dev(qn), dkn = dev(kn);
    DeviceBuffer<uint16_t> kc, vc;
    const size_t cache_n = size_t(nblocks) * nkv * bs * c.hd;
    ASSERT_OK(kc.alloc(cache_n));
    ASSERT_OK(vc.alloc(cache_n));
    RopeKvArgs a;
    a.qkv = dqkv.get();
    a.ld = ld;
    a.T = T;
    a.nh = nh;
    a.nkv = nkv;
    a.hd = c.hd;
    a.block_size = bs;
    a.pos = dpos.get();
    a.slots = dslots.get();
    a.q_norm = c.qk_norm ? dqn.get() : nullptr;
    a.k_norm = c.qk_norm ? dkn.get() : nullptr;
    a.inv_freq = c.rope ? dinv.get() : nullptr;
    a.style = c.style;
    a.k_cache = kc.get();
    a.v_cache = vc.get();
    ASSERT_OK(launch_rope_kv(a, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto got_q = host(dqkv);
    auto got_k = bf16_to_f32v(host(kc)), got_v = bf16_to_f32v(host(vc));
    std::vector<float> wq, gq, wk, gk;
    for (int t = 0; t < T; ++t) {
      std::vector<float> q(qkv.begin() + size_t(t) * ld, qkv.begin() + size_t(t) * ld + nh * c.hd);
      std::vector<float> k(qkv.begin() + size_t(t) * ld + nh * c.hd, qkv.begin() + size_t(t) * ld + (nh + nkv) * c.hd);
      if (c.qk_norm) {
        ref_rmsnorm(q.data(), qn.data(), q.data(), nh, c.hd, 1e-6f);
        ref_rmsnorm(k.data(), kn.data(), k.data(), nkv, c.hd, 1e-6f);
      }
      if (c.rope) {
        ref_rope(q.data(), nh, c.hd, pos[t], inv.data(), c.style);
        ref_rope(k.data(), nkv, c.hd, pos[t], inv.data(), c.style);
      }
      wq.insert(wq.end(), q.begin(), q.end());
      gq.insert(gq.end(), got_q.begin() + size_t(t) * ld, got_q.begin() + size_t(t) * ld + nh * c.hd);
      const int blk = slots[t] / bs, off = slots[t] % bs;
      for (int h = 0; h < nkv; ++h) {
        const size_t base = ((size_t(blk) * nkv + h) * bs + off) * c.hd;
        wk.insert(wk.end(), k.begin() + h * c.hd, k.begin() + (h + 1) * c.hd);
        gk.insert(gk.end(), got_k.begin() + base, got_k.begin() + base + c.hd);
        std::vector<float> v(qkv.begin() + size_t(t) * ld + (nh + nkv + h) * c.hd,
                             qkv.begin() + size_t(t) * ld + (nh + nkv + h + 1) * c.hd);
        std::vector<float> gv(got_v.begin() + base, got_v.begin() + base + c.hd);
        EXPECT_LT(rel_err(gv, v), kTolBf16);
      }
    }
    EXPECT_LT(rel_err(gq, wq), 1e-5) << "q hd=" << c.hd;
    EXPECT_LT(rel_err(gk, wk), kTolBf16) << "k hd=" << c.hd;
  }
}

// Paged attention: random bf16 caches behind shuffled block tables; rows of
// several sequences with ragged lengths (decode) or consecutive tokens of one
// sequence (prefill tiles), with and without a sliding window, split or not.
struct AttnCase {
  int hd, nh, nkv, bs, window, splits, rows_per_tile;
  std::vector<int> seq_len;   // tokens in each sequence's cache
  std::vector<int> q_tokens;  // query rows per sequence: the last q_tokens positions
};

void run_attention_case(const AttnCase& c) {
  const int n_seq = static_cast<int>(c.seq_len.size());
  int max_blocks = 0, total_blocks = 0;
  for (int L : c.seq_len) {
    max_blocks = std::max(max_blocks, (L + c.bs - 1) / c.bs);
    total_blocks += (L + c.bs - 1) / c.bs;
  }
  std::vector<int32_t> perm(total_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(40));
  std::vector<int32_t> tables(size_t(n_seq) * max_blocks, -1);
  int next = 0;
  for (int s = 0; s < n_seq; ++s)
    for (int b = 0; b < (c.seq_len[s] + c.bs - 1) / c.bs; ++b) tables[size_t(s) * max_blocks + b] = perm[next++];
  const size_t cache_n = size_t(total_blocks) * c.nkv * c.bs * c.hd;
  auto kf = randn(cache_n, 41), vf = randn(cache_n, 42);
  auto kb = to_bf16_rounding(kf), vb = to_bf16_rounding(vf);
  std::vector<int32_t> row_seq, row_pos;
  std::vector<AttnTile> tiles;
  for (int s = 0; s < n_seq; ++s) {
    const int first_row = static_cast<int>(row_seq.size());
    for (int t = 0; t < c.q_tokens[s]; ++t) {
      row_seq.push_back(s);
      row_pos.push_back(c.seq_len[s] - c.q_tokens[s] + t);
    }
    for (int t = 0; t < c.q_tokens[s]; t += c.rows_per_tile)
      tiles.push_back({first_row + t, std::min(c.rows_per_tile, c.q_tokens[s] - t)});
  }
  const int rows = static_cast<int>(row_seq.size()), qw = c.nh * c.hd;
  auto q = randn(size_t(rows) * qw, 43);
  std::vector<float> want(size_t(rows) * qw);
  for (int r = 0; r < rows; ++r) {
    const int s = row_seq[r], pos = row_pos[r];
    const int first = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
    auto slot = [&](const std::vector<float>& cache, int64_t i, int kh) {
      const int p = first + static_cast<int>(i);
      const int blk = tables[size_t(s) * max_blocks + p / c.bs];
      return cache.data() + ((size_t(blk) * c.nkv + kh) * c.bs + p % c.bs) * c.hd;
    };
    ref_attention_one(q.data() + size_t(r) * qw, c.nh, c.nkv, c.hd, pos - first + 1,
                      [&](int64_t i, int kh) { return slot(kf, i, kh); },
                      [&](int64_t i, int kh) { return slot(vf, i, kh); }, want.data() + size_t(r) * qw);
  }
  auto dq = dev(q);
  auto dk = dev(kb), dv = dev(vb);
  auto dt = dev(tables), drs = dev(row_seq), drp = dev(row_pos);
  DeviceBuffer<AttnTile> dtiles;
  ASSERT_OK(dtiles.upload(tiles));
  DeviceBuffer<float> po, pl;
  DeviceBuffer<uint16_t> out;
  ASSERT_OK(po.alloc(size_t(rows) * c.nh * c.splits * c.hd));
  ASSERT_OK(pl.alloc(size_t(rows) * c.nh * c.splits));
  ASSERT_OK(out.alloc(size_t(rows) * qw));
  AttnArgs a;
  a.q = dq.get();
  a.ldq = qw;
  a.k_cache = dk.get();
  a.v_cache = dv.get();
  a.block_tables = dt.get();
  a.max_blocks = max_blocks;
  a.row_seq = drs.get();
  a.row_pos = drp.get();
  a.tiles = dtiles.get();
  a.n_tiles = static_cast<int>(tiles.size());
  a.rows_per_tile = c.rows_per_tile;
  a.rows = rows;
  a.splits = c.splits;
  a.window = c.window;
  a.nh = c.nh;
  a.nkv = c.nkv;
  a.hd = c.hd;
  a.block_size = c.bs;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  a.part_o = po.get();
  a.part_lse = pl.get();
  a.out = out.get();
  // Both kernels of the launch's kind (decode rows: the decode kernels;
  // prefill tiles: the prefill kernels), the tensor-core one where it applies
  // and the CUDA-core fallback, each against the reference; the tensor-core
  // kernel must take exactly the shapes it supports.
  const bool decode = c.rows_per_tile == 1 && a.n_tiles == rows;
  const int G = c.nh / c.nkv;
  const bool mma_hd = c.hd == 64 || c.hd == 128;
  const bool mma_shape = decode ? mma_hd && G <= 16
                                : mma_hd && (G == 1 || G == 2 || G == 4 || G == 8 || G == 16) &&
                                      c.rows_per_tile * G <= 128;
  const AttnDecodeKernel saved_decode = attention_decode_kernel();
  const AttnPrefillKernel saved_prefill = attention_prefill_kernel();
  // Prefill also runs the wgmma variant of the tensor-core kernel (Q K^T on
  // warpgroup MMAs; tiles of more than 64 rows fall back to the mma.sync one).
  for (int variant = 0; variant < 3; ++variant) {
    const bool mma = variant != 2;
    if (decode && variant == 1) continue;
    if (decode) {
      set_attention_decode_kernel(mma ? AttnDecodeKernel::kMma : AttnDecodeKernel::kSimt);
    } else {
      set_attention_prefill_kernel(variant == 0   ? AttnPrefillKernel::kMma
                                   : variant == 1 ? AttnPrefillKernel::kWgmma
                                                  : AttnPrefillKernel::kSimt);
    }
    const char* name = variant == 0 ? "mma" : variant == 1 ? "wgmma" : "simt";
    EXPECT_EQ(decode ? attention_decode_uses_mma(a) : attention_prefill_uses_mma(a), mma && mma_shape) << name;
    EXPECT_FALSE(decode ? attention_prefill_uses_mma(a) : attention_decode_uses_mma(a)) << name;
    if (!decode && !(mma && mma_shape) && G * c.rows_per_tile > 16) {
      // Tiles sized for the tensor-core kernel (64 rows): the CUDA-core kernel (16 warps) refuses them.
      EXPECT_FALSE(launch_paged_attention(a, nullptr).is_ok()) << name;
      continue;
    }
    // Twice, the output poisoned (bf16 NaN) before each run: every element is
    // written, and the decode kernel's split tickets are back at zero after a
    // launch (the second run would combine too early otherwise).
    for (int run = 0; run < 2; ++run) {
      ASSERT_EQ(cudaMemset(out.get(), 0xff, size_t(rows) * qw * sizeof(uint16_t)), cudaSuccess);
      ASSERT_OK(launch_paged_attention(a, nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> got = bf16_to_f32v(host(out));
      // The worst (row, head) too: one wrong head of one row hides in the
      // whole-output error of a large case.
      double worst = 0;
      int worst_at = 0;
      for (int rh = 0; rh < rows * c.nh; ++rh) {
        const float* gp = got.data() + size_t(rh) * c.hd;
        const float* wp = want.data() + size_t(rh) * c.hd;
        const double e = rel_err(std::vector<float>(gp, gp + c.hd), std::vector<float>(wp, wp + c.hd));
        if (!(e <= worst)) {
          worst = e;
          worst_at = rh;
        }
      }
      EXPECT_LT(rel_err(got, want), kTolBf16)
          << "kernel=" << name << " hd=" << c.hd << " nh=" << c.nh << " nkv=" << c.nkv << " window=" << c.window
          << " splits=" << c.splits << " rpt=" << c.rows_per_tile << " run " << run;
      EXPECT_LT(worst, 2 * kTolBf16) << "kernel=" << name << " hd=" << c.hd << " nh=" << c.nh << " nkv=" << c.nkv
                                     << " window=" << c.window << " splits=" << c.splits
                                     << " rpt=" << c.rows_per_tile << " run " << run << ": row "
                                     << worst_at / c.nh << " head " << worst_at % c.nh;
    }
  }
  set_attention_decode_kernel(saved_decode);
  set_attention_prefill_kernel(saved_prefill);
}

TEST(GpuOps, PagedAttentionDecodeMatchesRef) {
  MS_GPU_TEST_GUARD();
  run_attention_case({128, 32, 4, 64, 0, 1, 1, {1, 70, 300}, {1, 1, 1}});
  run_attention_case({128, 32, 4, 64, 0, 7, 1, {1, 70, 1000}, {1, 1, 1}});
  run_attention_case({128, 32, 4, 16, 50, 5, 1, {49, 50, 51, 333}, {1, 1, 1, 1}});
  run_attention_case({16, 4, 2, 8, 8, 3, 1, {1, 9, 17, 21}, {1, 1, 1, 1}});
  run_attention_case({64, 32, 8, 64, 0, 64, 1, {5000, 64, 65}, {1, 1, 1}});
  run_attention_case({256, 8, 8, 32, 0, 4, 1, {129}, {1}});
}

// The decode kernel (rows_per_tile 1): one key, keys ending exactly at block
// and 64-key tile boundaries, splits sized from the length (>= 128 keys, so
// the fused combine merges 2..64 partials), windows cut inside a block, a
// block-table slice longer than the 256 entries staged at once (block size 4),
// GQA groups of 1..32 heads (1..8 output items per thread), 8 rows x 8K.
TEST(GpuOps, PagedAttentionDecodeKernelEdges) {
  MS_GPU_TEST_GUARD();
  run_attention_case({128, 32, 4, 64, 0, 128, 1, {1, 64, 128, 129, 8192}, {1, 1, 1, 1, 1}});
  run_attention_case({128, 32, 4, 64, 4096, 128, 1, {4095, 4096, 4097, 8191}, {1, 1, 1, 1}});
  run_attention_case({128, 32, 4, 64, 0, 17, 1, std::vector<int>(8, 8192), std::vector<int>(8, 1)});
  run_attention_case({128, 32, 4, 16, 100, 3, 1, {100, 101, 257, 1000}, {1, 1, 1, 1}});
  run_attention_case({16, 4, 2, 4, 0, 1, 1, {5000, 3, 1025}, {1, 1, 1}});      // 1250 table entries, one split
  run_attention_case({64, 8, 8, 4, 0, 2, 1, {2049, 1}, {1, 1}});              // group 1, 2 splits of 1025
  run_attention_case({128, 32, 1, 16, 0, 9, 1, {3000, 77}, {1, 1}});          // group 32: 4 items per thread
  run_attention_case({256, 32, 1, 32, 0, 5, 1, {700, 33}, {1, 1}});           // hd 256, group 32: 8 items
  run_attention_case({8, 8, 4, 8, 0, 6, 1, {900, 1, 2}, {1, 1, 1}});          // hd 8
}

// The NMC decode shape (32 q heads, 4 KV heads: G = 8, hd 128, block 64) and
// the tensor-core kernel's edges: keys at 1 / stage (64) / block boundaries,
// one split and many (the grid is ~one wave: 32 splits at 8K, bs 1), sliding
// windows at 4096 +- 1, 3 ragged rows, groups 1 / 4 / 16, hd 64; groups 32
// and hd 256 take the CUDA-core kernel (checked by run_attention_case); a
// split whose block-table slice exceeds the 512 staged entries (block 4,
// one split of 5000 keys) reads the table from global memory.
TEST(GpuOps, PagedAttentionDecodeMmaShapes) {
  MS_GPU_TEST_GUARD();
  for (int L : {1, 63, 64, 65, 4095, 4096, 8192})
    run_attention_case({128, 32, 4, 64, 0, 128, 1, {L}, {1}});
  run_attention_case({128, 32, 4, 64, 0, 128, 1, {32768}, {1}});                       // 32 splits of 1024
  run_attention_case({128, 32, 4, 64, 4096, 128, 1, {4095, 4096, 4097, 8192}, {1, 1, 1, 1}});
  run_attention_case({128, 32, 4, 64, 100, 128, 1, {99, 100, 101, 1000}, {1, 1, 1, 1}});  // window inside a block
  run_attention_case({128, 32, 4, 64, 0, 128, 1, {8192, 1, 3000}, {1, 1, 1}});          // bs 3 ragged
  run_attention_case({128, 32, 4, 64, 0, 17, 1, std::vector<int>(8, 8192), std::vector<int>(8, 1)});
  run_attention_case({128, 32, 4, 64, 0, 1, 1, {8192}, {1}});                           // one split of 8192
  run_attention_case({128, 32, 4, 4, 0, 1, 1, {5000, 7}, {1, 1}});                      // 1250 table entries: global table
  run_attention_case({128, 4, 4, 64, 0, 128, 1, {1, 200, 5000}, {1, 1, 1}});            // G = 1
  run_attention_case({128, 16, 4, 16, 0, 128, 1, {77, 2049}, {1, 1}});                  // G = 4, block 16
  // Block sizes that are not powers of two (page and slot by division, not shift and mask).
  run_attention_case({128, 32, 4, 24, 0, 128, 1, {8192, 1, 3000}, {1, 1, 1}});
  run_attention_case({128, 32, 4, 48, 100, 128, 1, {99, 100, 101, 1000}, {1, 1, 1, 1}});
  run_attention_case({128, 16, 1, 64, 0, 128, 1, {3000, 5}, {1, 1}});                   // G = 16
  run_attention_case({128, 32, 1, 64, 0, 128, 1, {3000, 5}, {1, 1}});                   // G = 32: CUDA-core
  run_attention_case({64, 32, 4, 64, 4096, 128, 1, {1, 4097, 8192}, {1, 1, 1}});        // hd 64
  run_attention_case({256, 32, 4, 64, 0, 128, 1, {1, 4097}, {1, 1}});                   // hd 256: CUDA-core
}

TEST(GpuOps, PagedAttentionPrefillMatchesRef) {
  MS_GPU_TEST_GUARD();
  run_attention_case({128, 32, 4, 64, 0, 1, 2, {37}, {37}});           // whole prompt
  run_attention_case({128, 32, 4, 16, 0, 3, 2, {200, 90}, {57, 1}});   // chunk after a prefix, plus a decode row
  run_attention_case({16, 4, 2, 8, 8, 1, 8, {21}, {21}});              // sliding window 8, tile crosses it
  run_attention_case({16, 4, 2, 4, 8, 2, 8, {30, 13}, {11, 13}});
}

// The tensor-core prefill kernel (64 (token, head) rows per block, 16 per
// warp). Every group it takes (1, 2, 4, 8, 16) with 64 / G tokens per tile,
// hd 64 and 128; tiles with fewer rows (whole warps empty); prompts and
// chunks whose lengths are multiples of neither 64 nor the tile; chunks after
// a cached prefix; windows that cut inside stages, blocks and tiles (rows of
// a split that see none of its keys: LSE -inf); 1, 2 and 3 splits, with
// empty splits of short tiles; several sequences and single-token tiles in
// one launch; block sizes 16 / 4 (shift) and 12 / 3 (division); more than
// 512 block-table entries in a split (table read from global memory).
// Tiles of 64 rows are beyond the CUDA-core kernel (run_attention_case
// checks that it refuses them); tiles of <= 32 rows run both kernels.
TEST(GpuOps, PagedAttentionPrefillMmaEdges) {
  MS_GPU_TEST_GUARD();
  // {hd, nh, nkv, bs, window, splits, rows_per_tile, seq_len, q_tokens}
  // G = 8, the NMC shape (32 heads, 4 KV heads): a 260-token prompt, tiles of 8 (last one 4), 2 splits.
  run_attention_case({128, 32, 4, 16, 0, 2, 8, {260}, {260}});
  // G = 8, 2 KV heads: one split; then 3 splits over a 200-token chunk after an 800-token prefix, a whole
  // 77-token prompt and a single-token tile (splits 1 and 2 of the short tiles are empty).
  run_attention_case({128, 16, 2, 16, 0, 1, 8, {300}, {300}});
  run_attention_case({128, 16, 2, 16, 0, 3, 8, {1000, 77, 5}, {200, 77, 1}});
  // G = 1: 64 tokens per tile; block 12 (division), 2 splits; hd 128, one split.
  run_attention_case({64, 2, 2, 12, 0, 2, 64, {500, 130}, {150, 130}});
  run_attention_case({128, 2, 2, 16, 0, 1, 64, {200}, {200}});
  // G = 1, window 8: a 64-token tile's keys span two stages, and warps 0-2 see none of the second (skipped).
  run_attention_case({64, 2, 2, 16, 8, 1, 64, {300}, {300}});
  // G = 2: window 50 inside the 32-token tiles and across split ends (early rows see nothing of split 1);
  // hd 64, block 3, 3 splits, a chunk after a prefix and a short prompt.
  run_attention_case({128, 4, 2, 16, 50, 2, 32, {400}, {400}});
  run_attention_case({64, 4, 2, 3, 0, 3, 32, {333, 40}, {100, 40}});
  // G = 4: window 8 (less than the 16-token tile: each row its own key range), block 3, 3 splits (2 empty),
  // plus a single-token sequence; hd 128 chunk after a prefix.
  run_attention_case({64, 8, 2, 3, 8, 3, 16, {200, 1}, {100, 1}});
  run_attention_case({128, 8, 2, 16, 0, 2, 16, {600}, {150}});
  // G = 16: 4 tokens per tile; hd 64 with block 12.
  run_attention_case({128, 16, 1, 16, 0, 2, 4, {777}, {130}});
  run_attention_case({64, 16, 1, 12, 0, 1, 4, {300}, {300}});
  // Fewer rows per tile than 64 / G (24 and 32 rows: the last warps hold no row); both kernels.
  run_attention_case({128, 8, 1, 16, 0, 1, 3, {100}, {100}});
  run_attention_case({64, 16, 1, 16, 0, 2, 2, {90}, {90}});
  // Block-table slices of more than 512 entries: block 4, 2 splits of 2560 keys; block 16, one split of 9000.
  run_attention_case({64, 8, 1, 4, 0, 2, 8, {5000}, {40}});
  run_attention_case({128, 8, 1, 16, 0, 1, 8, {9000}, {24}});
  // Window 4096 after a 5000-token prefix, block 12: the window starts inside a block and a stage.
  run_attention_case({64, 8, 1, 12, 4096, 2, 8, {5000}, {100}});
  // Window 50 with several sequences, a short chunk and a single-token tile in one launch, 3 splits.
  run_attention_case({128, 16, 2, 16, 50, 3, 8, {120, 60, 1}, {120, 13, 1}});
  // Tiles of more than 64 rows: the 8-warp kernel (128 rows). G = 8 with 16 tokens per tile (NMC's shape),
  // a window inside the tile, 2 splits; G = 1 with 128 and 100 tokens per tile (warp 7 partly empty), block 12.
  run_attention_case({128, 32, 4, 16, 0, 1, 16, {300}, {300}});
  run_attention_case({128, 32, 4, 16, 50, 2, 16, {700, 33}, {200, 33}});
  run_attention_case({64, 2, 2, 12, 0, 2, 128, {500}, {300}});
  run_attention_case({128, 4, 4, 16, 8, 1, 100, {250}, {250}});
}

// The prefill tile size follows the kernel that will take the shape.
TEST(GpuOps, AttentionPrefillRowsPerTile) {
  const AttnPrefillKernel saved = attention_prefill_kernel();
  set_attention_prefill_kernel(AttnPrefillKernel::kMma);
  EXPECT_EQ(attention_prefill_rows_per_tile(32, 4, 128, 100), 8);  // G 8
  EXPECT_EQ(attention_prefill_rows_per_tile(4, 4, 64, 100), 64);   // G 1
  EXPECT_EQ(attention_prefill_rows_per_tile(32, 2, 128, 100), 4);  // G 16
  EXPECT_EQ(attention_prefill_rows_per_tile(32, 1, 128, 100), 1);  // G 32: CUDA-core, max(1, 16 / 32)
  EXPECT_EQ(attention_prefill_rows_per_tile(12, 4, 128, 100), 5);  // G 3: CUDA-core
  EXPECT_EQ(attention_prefill_rows_per_tile(32, 4, 256, 100), 2);  // hd 256: CUDA-core
  // From kAttnPrefillLongKeys keys: 128-row tiles (the 8-warp kernel); the CUDA-core kernel's do not change.
  EXPECT_EQ(attention_prefill_rows_per_tile(32, 4, 128, kAttnPrefillLongKeys - 1), 8);
  EXPECT_EQ(attention_prefill_rows_per_tile(32, 4, 128, kAttnPrefillLongKeys), 16);
  EXPECT_EQ(attention_prefill_rows_per_tile(4, 4, 64, 40000), 128);
  EXPECT_EQ(attention_prefill_rows_per_tile(12, 4, 128, 40000), 5);
  set_attention_prefill_kernel(AttnPrefillKernel::kWgmma);  // one warpgroup: 64-row tiles at any length
  EXPECT_EQ(attention_prefill_rows_per_tile(32, 4, 128, 100), 8);
  EXPECT_EQ(attention_prefill_rows_per_tile(32, 4, 128, 40000), 8);
  EXPECT_EQ(attention_prefill_rows_per_tile(12, 4, 128, 100), 5);
  set_attention_prefill_kernel(AttnPrefillKernel::kSimt);
  EXPECT_EQ(attention_prefill_rows_per_tile(32, 4, 128, 100), 2);
  EXPECT_EQ(attention_prefill_rows_per_tile(4, 4, 64, 100), 8);
  EXPECT_EQ(attention_prefill_rows_per_tile(32, 4, 128, 40000), 2);
  set_attention_prefill_kernel(saved);
}

TEST(GpuOps, MoeRouteMatchesRef) {
  MS_GPU_TEST_GUARD();
  struct Case {
    RouterFn fn;
    bool over_topk, norm;
    int E, K;
  };
  for (Case c : {Case{RouterFn::kSoftmax, false, true, 128, 8}, {RouterFn::kSoftmax, false, false, 8, 2},
                 {RouterFn::kSoftmax, true, true, 160, 8}, {RouterFn::kSigmoid, true, false, 128, 8},
                 {RouterFn::kSigmoid, true, true, 8, 2}, {RouterFn::kSigmoid, false, false, 64, 4}}) {
    ModelConfig cfg;
    cfg.router = c.fn;
    cfg.softmax_over_topk = c.over_topk;
    cfg.norm_topk_prob = c.norm;
    cfg.n_experts = c.E;
    cfg.top_k = c.K;
    const int T = 9;
    auto logits = randn(size_t(T) * c.E, 50, 2.f);
    // Ties go to the lower expert id: row 0 has a three-way tie at the top
    // (one id per lane slot: 1, 33 % E, E - 1), row 1 is all zeros of both
    // signs (-0 ties with +0: ids 0..K-1 in order).
    logits[1] = logits[33 % c.E] = logits[c.E - 1] = 9.f;
    for (int e = 0; e < c.E; ++e) logits[size_t(c.E) + e] = e % 3 == 1 ? -0.f : 0.f;
    auto dl = dev(logits);
    DeviceBuffer<int32_t> ids;
    DeviceBuffer<float> w;
    ASSERT_OK(ids.alloc(size_t(T) * c.K));
    ASSERT_OK(w.alloc(size_t(T) * c.K));
    ASSERT_OK(launch_moe_route(dl.get(), T, c.E, c.K, c.fn, c.over_topk, c.norm, ids.get(), w.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto gi = host(ids);
    auto gw = host(w);
    for (int t = 0; t < T; ++t) {
      RouteChoice rc = ref_route(cfg, logits.data() + size_t(t) * c.E);
      for (int k = 0; k < c.K; ++k) {
        EXPECT_EQ(gi[size_t(t) * c.K + k], rc.experts[k]) << "E=" << c.E << " t=" << t << " k=" << k;
        EXPECT_NEAR(gw[size_t(t) * c.K + k], rc.weights[k], 1e-5f + 1e-5f * std::fabs(rc.weights[k]));
      }
    }
    // Decode: route + plan in one launch on the first kMoeRoutePlanMaxT tokens gives
    // the same ids and weights, and a plan consistent with them.
    const int Td = kMoeRoutePlanMaxT;
    DeviceBuffer<int32_t> ids2, pbuf;
    DeviceBuffer<float> w2;
    ASSERT_OK(ids2.alloc(size_t(Td) * c.K));
    ASSERT_OK(w2.alloc(size_t(Td) * c.K));
    ASSERT_OK(pbuf.alloc(moe_plan_ints(c.E, Td * c.K)));
    const MoePlan plan = moe_plan_view(pbuf.get(), c.E);
    ASSERT_OK(launch_moe_route_plan(dl.get(), Td, c.E, c.K, c.fn, c.over_topk, c.norm, ids2.get(), w2.get(), plan,
                                    nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto gi2 = host(ids2);
    auto gw2 = host(w2);
    auto pb = host(pbuf);
    for (size_t i = 0; i < gi2.size(); ++i) {
      EXPECT_EQ(gi2[i], gi[i]) << "fused route, selection " << i;
      EXPECT_EQ(gw2[i], gw[i]) << "fused route, selection " << i;
    }
    const int n_active = pb[0];
    std::vector<int> seen(c.E, 0);
    for (int32_t id : gi2) seen[id] = 1;
    EXPECT_EQ(n_active, std::count(seen.begin(), seen.end(), 1));
    int total = 0;
    for (int u = 0; u < n_active; ++u) {
      const int e = pb[1 + u], off = pb[1 + c.E + u], cnt = pb[1 + 2 * c.E + u];
      EXPECT_EQ(off, total);
      total += cnt;
      for (int m = 0; m < cnt; ++m) EXPECT_EQ(gi2[pb[1 + 3 * c.E + off + m]], e) << "plan member of expert " << e;
    }
    EXPECT_EQ(total, Td * c.K);
    // Router GEMV + route + plan in one launch == launch_gemv_f32x then launch_moe_route_plan, bit for bit
    // (logits, ids, weights, plan; members compared as sets per expert). H = 2056: two rounds of loads, the
    // second 8 elements long. Run twice per shape: the grid ticket must be reset by the last block. Token
    // counts cover every compile-time token bound of the fused kernel (1, 2, 4, 8).
    for (int Tr : {1, 2, 3, Td}) {
      const int H = 2056;
      auto xf = randn(size_t(Tr) * H, 51), rwf = randn(size_t(c.E) * H, 52, 0.05f);
      auto rw = to_bf16_rounding(rwf);
      auto dx = dev(xf);
      auto drw = dev(rw);
      DeviceBuffer<float> lg1, lg2, w3, w4;
      DeviceBuffer<int32_t> ids3, ids4, pb3, pb4;
      for (auto* b : {&lg1, &lg2}) ASSERT_OK(b->alloc(size_t(Tr) * c.E));
      for (auto* b : {&w3, &w4}) ASSERT_OK(b->alloc(size_t(Tr) * c.K));
      for (auto* b : {&ids3, &ids4}) ASSERT_OK(b->alloc(size_t(Tr) * c.K));
      for (auto* b : {&pb3, &pb4}) ASSERT_OK(b->alloc(moe_plan_ints(c.E, Tr * c.K)));
      auto plan_of = [&](DeviceBuffer<int32_t>& b) { return moe_plan_view(b.get(), c.E); };
      ASSERT_OK(launch_gemv_f32x(dx.get(), drw.get(), lg1.get(), Tr, c.E, H, nullptr));
      ASSERT_OK(launch_moe_route_plan(lg1.get(), Tr, c.E, c.K, c.fn, c.over_topk, c.norm, ids3.get(), w3.get(),
                                      plan_of(pb3), nullptr));
      for (int rep = 0; rep < 2; ++rep) {
        ASSERT_EQ(cudaMemset(pb4.get(), 0xff, pb4.size() * sizeof(int32_t)), cudaSuccess);
        ASSERT_OK(launch_moe_router_route_plan(dx.get(), drw.get(), Tr, c.E, H, c.K, c.fn, c.over_topk, c.norm,
                                               lg2.get(), ids4.get(), w4.get(), plan_of(pb4), nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(host(lg2), host(lg1)) << "fused router logits E=" << c.E << " T=" << Tr;
        EXPECT_EQ(host(ids4), host(ids3)) << "fused router ids E=" << c.E << " T=" << Tr;
        EXPECT_EQ(host(w4), host(w3)) << "fused router weights E=" << c.E << " T=" << Tr;
        auto p3 = host(pb3), p4 = host(pb4);
        ASSERT_EQ(p4[0], p3[0]) << "n_active E=" << c.E << " T=" << Tr << " rep " << rep;
        for (int u = 0; u < p3[0]; ++u) {
          const int e = p3[1 + u], off = p3[1 + c.E + u], cnt = p3[1 + 2 * c.E + u];
          EXPECT_EQ(p4[1 + u], e);
          EXPECT_EQ(p4[1 + c.E + u], off);
          EXPECT_EQ(p4[1 + 2 * c.E + u], cnt);
          std::vector<int32_t> m3(p3.begin() + 1 + 3 * c.E + off, p3.begin() + 1 + 3 * c.E + off + cnt);
          std::vector<int32_t> m4(p4.begin() + 1 + 3 * c.E + off, p4.begin() + 1 + 3 * c.E + off + cnt);
          std::sort(m3.begin(), m3.end());
          std::sort(m4.begin(), m4.end());
          EXPECT_EQ(m4, m3) << "members of expert " << e;
        }
      }
    }
  }
}

// add_norm with a deferred MoE combine (MoeSum) is bit-identical to
// launch_moe_combine followed by add_norm, with and without a shared expert,
// with a row gather (the final norm).
TEST(GpuOps, AddNormWithMoeSumEqualsCombineThenAddNorm) {
  MS_GPU_TEST_GUARD();
  const int T = 5;
  struct Shape {
    int K, H;
  };
  // (8, 2048): decode shape, all K rows loaded at once; K = 9: the k >= 8 tail loop; H = 202: scalar kernel.
  for (Shape sh_ : {Shape{4, 200}, {8, 2048}, {9, 64}, {3, 202}})
  for (int shared_mode = 0; shared_mode < 3; ++shared_mode) {  // none, sum, average
    const int K = sh_.K, H = sh_.H;
    for (bool gather : {false, true}) {
      auto x = randn(size_t(T) * H, 70), a0 = randn(size_t(T) * H, 71), y = randn(size_t(T) * K * H, 72);
      auto sh = randn(size_t(T) * H, 73), w = randn(H, 74, 0.2f, 1.f);
      const std::vector<int32_t> rows = gather ? std::vector<int32_t>{4, 1} : std::vector<int32_t>{};
      const int R = gather ? 2 : T;
      auto dx1 = dev(x), dx2 = dev(x), d0 = dev(a0), dy = dev(y), dsh = dev(sh), dw = dev(w);
      auto drows = dev(gather ? rows : std::vector<int32_t>{0});
      DeviceBuffer<float> comb, f1, f2;
      DeviceBuffer<uint16_t> o1, o2;
      ASSERT_OK(comb.alloc(x.size()));
      ASSERT_OK(f1.alloc(x.size()));
      ASSERT_OK(f2.alloc(x.size()));
      ASSERT_OK(o1.alloc(x.size()));
      ASSERT_OK(o2.alloc(x.size()));
      for (void* p : {static_cast<void*>(f1.get()), static_cast<void*>(f2.get())})
        ASSERT_EQ(cudaMemset(p, 0, x.size() * sizeof(float)), cudaSuccess);
      for (void* p : {static_cast<void*>(o1.get()), static_cast<void*>(o2.get())})
        ASSERT_EQ(cudaMemset(p, 0, x.size() * sizeof(uint16_t)), cudaSuccess);
      const float* shared = shared_mode ? dsh.get() : nullptr;
      const int32_t* in_rows = gather ? drows.get() : nullptr;
      ASSERT_OK(launch_moe_combine(dy.get(), shared, shared_mode == 1, T, K, H, comb.get(), nullptr));
      ASSERT_OK(launch_add_norm(dx1.get(), d0.get(), comb.get(), in_rows, dw.get(), NormKind::kRms, 1e-6f, R, H,
                                o1.get(), f1.get(), nullptr));
      ASSERT_OK(launch_add_norm(dx2.get(), d0.get(), nullptr, in_rows, dw.get(), NormKind::kRms, 1e-6f, R, H, o2.get(),
                                f2.get(), nullptr, MoeSum{dy.get(), K, shared, shared_mode == 1}));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(host(dx1), host(dx2)) << "K " << K << " H " << H << " residual, shared_mode " << shared_mode << " gather " << gather;
      EXPECT_EQ(host(f1), host(f2)) << "normed, shared_mode " << shared_mode << " gather " << gather;
      EXPECT_EQ(host(o1), host(o2));
    }
  }
}

// Plan + gate_up + down + combine against per-selection dense MLPs.
TEST(GpuOps, MoeExpertsMatchRef) {
  MS_GPU_TEST_GUARD();
  struct Shape {
    int T, E, K, H, I;
  };
  // Persistent grids: (1, 10, 8, 2048, 768) is the decode shape (6144 gate_up / 4096 down warp items, more than
  // the resident warps: grid-stride loops); (1, 16, 1, ...) one routed expert. T <= kMoeRowKernelMaxT runs the
  // one-row streaming kernels: (2, 16, 4, ...) 8 slots with up to 2 members each, usually fewer than 8 experts
  // routed (warps stop at an unrouted slot); (5, 10, 8, ...) uneven member counts; (8, 128, 8, ...) the bs 8
  // NMC routing shape (64 selections over ~50 experts); (3, 4, 4, ...) E == K, 3 members per expert;
  // (1, 16, 4, 1032, 1032): two rounds per row. More tokens run the 8-member kernels: (19, ...), (12, 10, 8, ...)
  // uneven counts of up to 12 members (two chunks of 8), (9, 16, 4, 1032, 136) two rounds per gate_up row.
  for (Shape sh : {Shape{1, 16, 4, 64, 40}, {5, 16, 4, 64, 40}, {19, 16, 4, 64, 40}, {1, 10, 8, 2048, 768},
                   {1, 16, 1, 256, 96}, {2, 16, 4, 512, 136}, {5, 10, 8, 1032, 768}, {8, 128, 8, 256, 64},
                   {3, 4, 4, 256, 96}, {1, 16, 4, 1032, 1032}, {12, 10, 8, 1032, 768}, {9, 16, 4, 1032, 136}}) {
    for (bool with_shared : {false, true}) {
      const int T = sh.T, E = sh.E, K = sh.K, H = sh.H, I = sh.I;
      auto h = randn(size_t(T) * H, 60), gu = randn(size_t(E) * 2 * I * H, 61, 0.1f),
           dn = randn(size_t(E) * H * I, 62, 0.1f), wts = randn(size_t(T) * K, 63, 0.3f, 0.5f);
      auto shared = randn(size_t(T) * H, 64);
      auto hb = to_bf16_rounding(h), gub = to_bf16_rounding(gu), dnb = to_bf16_rounding(dn);
      std::vector<int32_t> ids(size_t(T) * K);
      std::mt19937 g(65);
      for (int t = 0; t < T; ++t) {
        std::vector<int> all(E);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), g);
        for (int k = 0; k < K; ++k) ids[size_t(t) * K + k] = all[k];
      }
      std::vector<float> want(size_t(T) * H, 0.f), y(H);
      for (int t = 0; t < T; ++t) {
        for (int k = 0; k < K; ++k) {
          const int e = ids[size_t(t) * K + k];
          std::vector<float> a(I), b(I), act(I);
          ref_matmul(h.data() + size_t(t) * H, gu.data() + size_t(e) * 2 * I * H, nullptr, a.data(), 1, I, H);
          ref_matmul(h.data() + size_t(t) * H, gu.data() + (size_t(e) * 2 * I + I) * H, nullptr, b.data(), 1, I, H);
          ref_swiglu(a.data(), b.data(), act.data(), I);
          ref_matmul(act.data(), dn.data() + size_t(e) * H * I, nullptr, y.data(), 1, H, I);
          for (int i = 0; i < H; ++i) want[size_t(t) * H + i] += wts[size_t(t) * K + k] * y[i];
        }
        if (with_shared)
          for (int i = 0; i < H; ++i) want[size_t(t) * H + i] += shared[size_t(t) * H + i];
      }
      auto dh = dev(hb), dgu = dev(gub), ddn = dev(dnb);
      auto dids = dev(ids);
      auto dw = dev(wts), dsh = dev(shared);
      DeviceBuffer<int32_t> plan_buf;
      ASSERT_OK(plan_buf.alloc(moe_plan_ints(E, T * K)));
      const MoePlan plan = moe_plan_view(plan_buf.get(), E);
      DeviceBuffer<uint16_t> act;
      DeviceBuffer<float> ybuf, out;
      ASSERT_OK(act.alloc(size_t(T) * K * I));
      ASSERT_OK(ybuf.alloc(size_t(T) * K * H));
      ASSERT_OK(out.alloc(size_t(T) * H));
      const int max_active = std::min(E, T * K);
      ASSERT_OK(launch_moe_plan(dids.get(), T, K, E, plan, nullptr));
      ASSERT_OK(launch_moe_gate_up(dh.get(), dgu.get(), H, I, T, K, plan, max_active, act.get(), nullptr));
      ASSERT_OK(launch_moe_down(act.get(), ddn.get(), dw.get(), H, I, T, plan, max_active, ybuf.get(), nullptr));
      ASSERT_OK(launch_moe_combine(ybuf.get(), with_shared ? dsh.get() : nullptr, true, T, K, H, out.get(), nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LT(rel_err(host(out), want), kTolBf16)
          << "T=" << T << " E=" << E << " K=" << K << " H=" << H << " I=" << I << " shared=" << with_shared;
    }
  }
}

// Gather / scatter of the prefill expert GEMMs: row r of the gathered matrix is the token of the plan's
// member r (members grouped by expert), and the scatter puts weight * row r back at selection members[r].
TEST(GpuOps, ArgmaxMatchesHost) {
  MS_GPU_TEST_GUARD();
  // 1000: one block per row; >= 32768: split over 64 blocks per row and merged.
  for (int V : {1, 1000, 40000, 151936, 262144}) {
    const int R = 3;
    auto l = randn(size_t(R) * V, 70, 3.f);
    if (V > 10) l[5] = l[V - 1] = 100.f;            // tie in row 0 across slices: the lower index wins
    if (V > 10) l[V + 7] = l[V + 6] = 50.f;          // tie in row 1 inside one slice
    if (V > 10) l[2 * size_t(V) + V / 2] = 1e4f;     // row 2: a dominant logit (logprob ~ 0)
    auto dl = dev(l);
    DeviceBuffer<int32_t> tok;
    DeviceBuffer<float> lp;
    ASSERT_OK(tok.alloc(R));
    ASSERT_OK(lp.alloc(R));
    ASSERT_OK(launch_argmax(dl.get(), R, V, tok.get(), lp.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto gt = host(tok);
    auto gl = host(lp);
    for (int r = 0; r < R; ++r) {
      const float* row = l.data() + size_t(r) * V;
      const int want = static_cast<int>(std::max_element(row, row + V) - row);
      double s = 0;
      for (int i = 0; i < V; ++i) s += std::exp(double(row[i]) - row[want]);
      EXPECT_EQ(gt[r], want) << "V=" << V;
      EXPECT_NEAR(gl[r], -std::log(s), 1e-4);
    }
  }
}

}  // namespace
}  // namespace ms::gpu::test
