// What the copy engine delivers for the megakernel's ring patterns, apart
// from the megakernel: one CTA per SM streams a 4 GiB buffer through a ring
// of shared-memory stages with bulk copies (cp.async.bulk, one per row, rows
// padded by 16 bytes as in gpu/mk/smem.cuh), completing on mbarriers;
// consumer warps wait for each stage and release it (all of them arrive, as
// in the megakernel; one of them may hold it for a delay first, standing in
// for the mma). Each case prints the bandwidth (median of 7 timed runs after
// 2 warm-ups) against a plain coalesced-load stream of the same buffer.
// Question it answers (docs/megakernel.md, round 10): is the MoE streaming's
// ~3.5 TB/s (gate/up) a limit of the copies (size, count, stride, hint) or
// of the megakernel around them?
//   build-gpu/bench_bulk_copy [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/mk/sync.cuh"

namespace {

using namespace ms::gpu::mk;

constexpr int kMaxStages = 6;
constexpr int kStageBytes = 33792;  // the megakernel's stage

struct Case {
  const char* name;
  int copy_bytes;  // one bulk copy (a row)
  int copies;      // copies per stage (<= 32: one per loader lane)
  int strided;     // rows of 2 x copy_bytes, a stage the first or second halves (gate/up's chunks)
  int stages;
  int warps;       // consumer warps, each arriving on every stage
  int delay_ns;    // the owner warp (position % warps) holds each stage this long
  int hint;        // L2 evict_first (1) or no cache hint (0)
};

__device__ __forceinline__ void copy_nohint(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

__global__ void ring_stream(const unsigned char* buf, long long n_tiles, Case c) {
  extern __shared__ unsigned char raw[];
  unsigned char* smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kMaxStages;
  unsigned char* stage0 = smem + 1024;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < c.stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], c.warps);
    }
    mbar_fence_init();
  }
  __syncthreads();
  const uint32_t stage_bytes = uint32_t(c.copy_bytes) * c.copies;
  uint32_t pos = 0;
  if (warp == c.warps) {  // the loader
    const uint64_t pol = policy_evict_first();
    for (long long t = blockIdx.x; t < n_tiles; t += gridDim.x, ++pos) {
      const int st = int(pos % c.stages);
      const uint32_t ph = (pos / c.stages) & 1u;
      if (lane == 0) {
        while (!mbar_try_wait(&empty[st], ph ^ 1u)) {
        }
        mbar_arrive_expect_tx(&full[st], stage_bytes);
      }
      __syncwarp();
      if (lane < c.copies) {
        const unsigned char* src =
            c.strided ? buf + (t / 2) * 2 * stage_bytes + int64_t(lane) * 2 * c.copy_bytes + (t % 2) * c.copy_bytes
                      : buf + t * stage_bytes + int64_t(lane) * c.copy_bytes;
        unsigned char* dst = stage0 + st * kStageBytes + lane * (c.copy_bytes + 16);
        if (c.hint)
          bulk_copy(dst, src, uint32_t(c.copy_bytes), &full[st], pol);
        else
          copy_nohint(dst, src, uint32_t(c.copy_bytes), &full[st]);
      }
    }
  } else if (warp < c.warps) {  // consumers (they keep the CTA alive until every copy landed)
    for (long long t = blockIdx.x; t < n_tiles; t += gridDim.x, ++pos) {
      const int st = int(pos % c.stages);
      const uint32_t ph = (pos / c.stages) & 1u;
      if (lane == 0) {
        while (!mbar_try_wait(&full[st], ph)) {
        }
        if (c.delay_ns > 0 && int(pos % c.warps) == warp) {
          const uint64_t t0 = global_timer();
          while (global_timer() - t0 < uint64_t(c.delay_ns)) {
          }
        }
        mbar_arrive(&empty[st]);
      }
      __syncwarp();
    }
  }
}

// The reference: every thread streams 16-byte loads (8 in flight), the sum
// written so the loads stay.
__global__ void load_stream(const uint4* buf, long long n, unsigned* sink) {
  unsigned acc = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 7 * stride < n; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __ldcs(buf + i + k * stride);
#pragma unroll
    for (int k = 0; k < 8; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  for (; i < n; i += stride) acc ^= __ldcs(buf + i).x;
  if (acc == 0x9e3779b9u) *sink = acc;
}

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "bench_bulk_copy: %s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

template <typename F>
double median_ms(F launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 2; ++i) launch();
  std::vector<float> ms;
  for (int i = 0; i < 7; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "bench_bulk_copy: unknown argument '%s' (usage: bench_bulk_copy [--json FILE])\n", argv[i]);
      return 2;
    }
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "bench_bulk_copy: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t bytes = size_t(4) << 30;
  unsigned char* buf = nullptr;
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(buf, 1, bytes));
  const int sms = prop.multiProcessorCount;
  const double ref_ms = median_ms([&] {
    load_stream<<<sms * 4, 512>>>(reinterpret_cast<const uint4*>(buf), (long long)(bytes / 16), sink);
  });
  const double ref_gbs = bytes / ref_ms / 1e6;
  std::printf("%s, %d SMs; 4 GiB streamed per run\n%-44s %9s %7s\n", prop.name, sms, "case", "GB/s", "of ref");
  std::printf("%-44s %9.0f %6.1f%%\n", "coalesced 16-byte loads (reference)", ref_gbs, 100.0);
  const Case cases[] = {
      // name                                      copy  n  strided stages warps delay hint
      {"gate/up: 16 x 2 KB half rows, 5 stages", 2048, 16, 1, 5, 8, 0, 1},
      {"gate/up, 4 stages", 2048, 16, 1, 4, 8, 0, 1},
      {"gate/up, 3 stages", 2048, 16, 1, 3, 8, 0, 1},
      {"gate/up, 6 stages", 2048, 16, 1, 6, 8, 0, 1},
      {"gate/up, no cache hint", 2048, 16, 1, 5, 8, 0, 0},
      {"gate/up, 1 consumer warp", 2048, 16, 1, 5, 1, 0, 1},
      {"gate/up, owner holds 700 ns", 2048, 16, 1, 5, 8, 700, 1},
      {"gate/up, owner holds 1400 ns", 2048, 16, 1, 5, 8, 1400, 1},
      {"16 x 2 KB contiguous", 2048, 16, 0, 5, 8, 0, 1},
      {"down: 21 x 1536 B contiguous", 1536, 21, 0, 5, 8, 0, 1},
      {"down, owner holds 1100 ns", 1536, 21, 0, 5, 8, 1100, 1},
      {"8 x 4 KB contiguous", 4096, 8, 0, 5, 8, 0, 1},
      {"4 x 8 KB contiguous", 8192, 4, 0, 5, 8, 0, 1},
      {"1 x 32 KB", 32768, 1, 0, 5, 8, 0, 1},
      {"32 x 1 KB contiguous", 1024, 32, 0, 5, 8, 0, 1},
  };
  FILE* jf = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
  if (!json.empty() && !jf) {
    std::fprintf(stderr, "bench_bulk_copy: cannot write '%s'\n", json.c_str());
    return 1;
  }
  if (jf)
    std::fprintf(jf, "{\"device\": \"%s\", \"sms\": %d, \"ref_gbs\": %.1f, \"rows\": [\n", prop.name, sms, ref_gbs);
  bool first = true;
  for (const Case& c : cases) {
    const long long stage = (long long)c.copy_bytes * c.copies;
    long long n_tiles = (long long)(bytes / stage);
    if (c.strided) n_tiles &= ~1LL;
    const size_t smem = 1024 + size_t(kStageBytes) * kMaxStages + 1024;
    CHECK(cudaFuncSetAttribute(ring_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const double ms = median_ms([&] { ring_stream<<<sms, 32 * (c.warps + 1), smem>>>(buf, n_tiles, c); });
    const double gbs = double(n_tiles) * stage / ms / 1e6;
    std::printf("%-44s %9.0f %6.1f%%\n", c.name, gbs, 100.0 * gbs / ref_gbs);
    if (jf)
      std::fprintf(jf,
                   "%s{\"case\": \"%s\", \"copy_bytes\": %d, \"copies\": %d, \"strided\": %d, \"stages\": %d, "
                   "\"warps\": %d, \"delay_ns\": %d, \"hint\": %d, \"gbs\": %.1f}",
                   first ? "" : ",\n", c.name, c.copy_bytes, c.copies, c.strided, c.stages, c.warps, c.delay_ns,
                   c.hint, gbs);
    first = false;
  }
  if (jf) {
    std::fprintf(jf, "\n]}\n");
    std::fclose(jf);
  }
  CHECK(cudaFree(buf));
  CHECK(cudaFree(sink));
  return 0;
}
