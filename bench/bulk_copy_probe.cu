// What the copy engine delivers for the megakernel's ring patterns, apart
// from the megakernel: one CTA per SM streams a 4 GiB buffer through a ring
// of shared-memory stages with bulk copies (cp.async.bulk, one per row, rows
// padded by 16 bytes as in gpu/mk/smem.cuh), completing on mbarriers;
// consumer warps wait for each stage and release it (all of them arrive, as
// in the megakernel; one of them may hold it for a delay first, standing in
// for the mma). Each case prints the bandwidth (median of 7 timed runs after
// 2 warm-ups) against a plain coalesced-load stream of the same buffer;
// the "phase" cases stream one MoE phase of the bs 1 layer (a slice of the
// buffer never read before) and report its span inside the kernel (first
// CTA start to last consumer end) against the reference's time for its bytes.
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
  int claim_run;   // 0: stage t of CTA b is t = b + k x grid; R > 0: runs of R from an atomic, one run ahead
  long long phase_stages;  // 0: the whole buffer; N > 0: a phase of N stages (another slice each run)
};

__device__ __forceinline__ void copy_nohint(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// The loader's claim as in gpu/mk/loader.cuh (one atomic per run of
// claim_run positions, the next run's atomic issued with the current run's
// last position), or the static order; the position's header tells the
// consumers which stage it is, -1 when the CTA is done.
__global__ void ring_stream(const unsigned char* buf, long long n_tiles, Case c, unsigned long long* claim,
                            unsigned long long* span) {
  extern __shared__ unsigned char raw[];
  unsigned char* smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kMaxStages;
  unsigned char* stage0 = smem + 1024;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int32_t* header = reinterpret_cast<int32_t*>(empty + kMaxStages);  // per stage (n_tiles < 2^31 here)
  if (threadIdx.x == 0) {
    atomicMin(&span[0], global_timer());
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
    unsigned long long next = 0;
    if (lane == 0 && c.claim_run > 0) next = atomicAdd(claim, (unsigned long long)c.claim_run);
    long long cur = 0;
    int have = 0;
    for (long long k = 0;; ++k, ++pos) {
      const int st = int(pos % c.stages);
      const uint32_t ph = (pos / c.stages) & 1u;
      if (lane == 0) {
        while (!mbar_try_wait(&empty[st], ph ^ 1u)) {
        }
      }
      __syncwarp();
      long long t;
      if (c.claim_run > 0) {
        if (have == 0) {
          cur = (long long)__shfl_sync(0xffffffffu, next, 0);
          have = c.claim_run;
        }
        t = cur++;
        if (--have == 0 && lane == 0) next = atomicAdd(claim, (unsigned long long)c.claim_run);
      } else {
        t = blockIdx.x + k * gridDim.x;
      }
      if (t >= n_tiles) {
        if (lane == 0) {
          header[st] = -1;
          mbar_arrive(&full[st]);
        }
        break;
      }
      if (lane == 0) {
        header[st] = int32_t(t);
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
    for (;; ++pos) {
      const int st = int(pos % c.stages);
      const uint32_t ph = (pos / c.stages) & 1u;
      int done = 0;
      if (lane == 0) {
        while (!mbar_try_wait(&full[st], ph)) {
        }
        done = header[st] < 0;
        if (!done && c.delay_ns > 0 && int(pos % c.warps) == warp) {
          const uint64_t t0 = global_timer();
          while (global_timer() - t0 < uint64_t(c.delay_ns)) {
          }
        }
        mbar_arrive(&empty[st]);
      }
      if (__shfl_sync(0xffffffffu, done, 0)) break;
    }
    if (lane == 0) atomicMax(&span[1], global_timer());
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
  unsigned long long* ctl = nullptr;  // [0] claim counter, [1] span start, [2] span end
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMalloc(&ctl, 3 * sizeof(unsigned long long)));
  CHECK(cudaMemset(buf, 1, bytes));
  const int sms = prop.multiProcessorCount;
  const double ref_ms = median_ms([&] {
    load_stream<<<sms * 4, 512>>>(reinterpret_cast<const uint4*>(buf), (long long)(bytes / 16), sink);
  });
  const double ref_gbs = bytes / ref_ms / 1e6;
  std::printf("%s, %d SMs; 4 GiB streamed per run (phases: a slice, timed in the kernel)\n", prop.name, sms);
  std::printf("%-48s %9s %7s %9s %9s\n", "case", "GB/s", "of ref", "phase us", "ideal us");
  std::printf("%-48s %9.0f %6.1f%%\n", "coalesced 16-byte loads (reference)", ref_gbs, 100.0);
  // The bs 1 / 8K layer's MoE phases (round 10's timeline): gate/up 768
  // tiles of two stages each in runs of 2 tiles, down 784 one-stage tiles in
  // runs of 4.
  const Case cases[] = {
      // name                                      copy  n  strided stages warps delay hint claim phase
      {"gate/up: 16 x 2 KB half rows, 5 stages", 2048, 16, 1, 5, 8, 0, 1, 0, 0},
      {"gate/up, 4 stages", 2048, 16, 1, 4, 8, 0, 1, 0, 0},
      {"gate/up, 3 stages", 2048, 16, 1, 3, 8, 0, 1, 0, 0},
      {"gate/up, 6 stages", 2048, 16, 1, 6, 8, 0, 1, 0, 0},
      {"gate/up, no cache hint", 2048, 16, 1, 5, 8, 0, 0, 0, 0},
      {"gate/up, 1 consumer warp", 2048, 16, 1, 5, 1, 0, 1, 0, 0},
      {"gate/up, owner holds 700 ns", 2048, 16, 1, 5, 8, 700, 1, 0, 0},
      {"gate/up, owner holds 1400 ns", 2048, 16, 1, 5, 8, 1400, 1, 0, 0},
      {"gate/up, claimed in runs of 4 stages", 2048, 16, 1, 5, 8, 700, 1, 4, 0},
      {"16 x 2 KB contiguous", 2048, 16, 0, 5, 8, 0, 1, 0, 0},
      {"down: 21 x 1536 B contiguous", 1536, 21, 0, 5, 8, 0, 1, 0, 0},
      {"down, owner holds 1100 ns", 1536, 21, 0, 5, 8, 1100, 1, 0, 0},
      {"down, claimed in runs of 4, holds 1100 ns", 1536, 21, 0, 5, 8, 1100, 1, 4, 0},
      {"8 x 4 KB contiguous", 4096, 8, 0, 5, 8, 0, 1, 0, 0},
      {"4 x 8 KB contiguous", 8192, 4, 0, 5, 8, 0, 1, 0, 0},
      {"1 x 32 KB", 32768, 1, 0, 5, 8, 0, 1, 0, 0},
      {"32 x 1 KB contiguous", 1024, 32, 0, 5, 8, 0, 1, 0, 0},
      {"phase: gate/up of bs 1 (1536 stages, 48 MB)", 2048, 16, 1, 5, 8, 700, 1, 4, 1536},
      {"phase: gate/up of bs 1, static order", 2048, 16, 1, 5, 8, 700, 1, 0, 1536},
      {"phase: down of bs 1 (784 stages, 24 MB)", 1536, 21, 0, 5, 8, 1100, 1, 4, 784},
      {"phase: down of bs 1, static order", 1536, 21, 0, 5, 8, 1100, 1, 0, 784},
      {"phase: down of bs 1, no hold", 1536, 21, 0, 5, 8, 0, 1, 0, 784},
      {"phase: 784 x 32 KB, 1 copy each", 32768, 1, 0, 5, 8, 0, 1, 0, 784},
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
    long long n_tiles = c.phase_stages > 0 ? c.phase_stages : (long long)(bytes / stage);
    if (c.strided) n_tiles &= ~1LL;
    const size_t smem = 1024 + size_t(kStageBytes) * kMaxStages + 1024;
    CHECK(cudaFuncSetAttribute(ring_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    // A phase reads another slice of the buffer each run (never from L2).
    const long long slice = n_tiles * stage;
    long long run = 0;
    std::vector<double> spans;
    const double ms = median_ms([&] {
      // The claim counter reset on the device; a phase's span read back (the
      // whole-buffer cases are timed by the events alone).
      CHECK(cudaMemsetAsync(ctl, 0, sizeof(unsigned long long)));
      if (c.phase_stages > 0) {
        const unsigned long long init[2] = {~0ull, 0ull};
        CHECK(cudaMemcpy(ctl + 1, init, sizeof(init), cudaMemcpyHostToDevice));
      }
      const long long off = c.phase_stages > 0 ? ((run++ * slice) % (long long)(bytes - slice)) & ~4095LL : 0;
      ring_stream<<<sms, 32 * (c.warps + 1), smem>>>(buf + off, n_tiles, c, ctl, ctl + 1);
      if (c.phase_stages > 0) {
        unsigned long long got[2];
        CHECK(cudaMemcpy(got, ctl + 1, sizeof(got), cudaMemcpyDeviceToHost));
        spans.push_back(double(got[1] - got[0]) / 1000.0);
      }
    });
    std::sort(spans.begin(), spans.end());
    const double span_us = spans.empty() ? 0.0 : spans[spans.size() / 2];
    const double gbs =
        c.phase_stages > 0 ? double(n_tiles) * stage / span_us / 1e3 : double(n_tiles) * stage / ms / 1e6;
    const double ideal_us = double(n_tiles) * stage / ref_gbs / 1e3;
    if (c.phase_stages > 0)
      std::printf("%-48s %9.0f %6.1f%% %9.1f %9.1f\n", c.name, gbs, 100.0 * gbs / ref_gbs, span_us, ideal_us);
    else
      std::printf("%-48s %9.0f %6.1f%%\n", c.name, gbs, 100.0 * gbs / ref_gbs);
    if (jf)
      std::fprintf(jf,
                   "%s{\"case\": \"%s\", \"copy_bytes\": %d, \"copies\": %d, \"strided\": %d, \"stages\": %d, "
                   "\"warps\": %d, \"delay_ns\": %d, \"hint\": %d, \"claim_run\": %d, \"phase_stages\": %lld, "
                   "\"gbs\": %.1f, \"phase_us\": %.2f, \"ideal_us\": %.2f}",
                   first ? "" : ",\n", c.name, c.copy_bytes, c.copies, c.strided, c.stages, c.warps, c.delay_ns,
                   c.hint, c.claim_run, c.phase_stages, gbs, c.phase_stages > 0 ? span_us : 0.0, ideal_us);
    first = false;
  }
  if (jf) {
    std::fprintf(jf, "\n]}\n");
    std::fclose(jf);
  }
  CHECK(cudaFree(buf));
  CHECK(cudaFree(sink));
  CHECK(cudaFree(ctl));
  return 0;
}
