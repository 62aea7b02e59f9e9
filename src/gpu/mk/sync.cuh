// Synchronisation and copy primitives of the megakernel, written from the
// PTX ISA (sm_90): mbarrier phases with transaction counts, bulk and tensor
// copies into shared memory that complete on an mbarrier, the consumer
// warps' named barrier, and dependency counters in global memory (acquire
// spin with a watchdog; release by fence + atomic add). Device code only.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/mk/params.h"

namespace ms::gpu::mk {

constexpr int kConsumerWarps = 8;
constexpr int kConsumerThreads = kConsumerWarps * 32;
constexpr int kLoaderWarp = kConsumerWarps;
// Params::async_signal: the counter releases of the consumers' instructions
// go to this warp (a fence + an add of ~0.5-0.9 us at bs 1 that thread 0
// otherwise waits out before the next instruction). 10 warps, like 9, are
// at most 3 a sub-partition: the same 168 registers a thread.
constexpr int kSignalWarp = kConsumerWarps + 1;
constexpr int kThreads = kConsumerThreads + 64;  // + the loader and the signal warp

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The consumer warps' barrier (barrier 1; 0 is __syncthreads).
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory");
}

__device__ __forceinline__ uint64_t global_timer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
}

// ---- mbarrier ----
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}

// Whether the phase has completed, without waiting (try_wait may suspend
// the thread for a while before it answers no).
__device__ __forceinline__ bool mbar_test_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}

// ---- copies into shared memory, completing on an mbarrier ----
// L2 policy for data read once per step (weights, KV): evict first, so the
// activations and the counters stay resident.
__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
// bytes: a multiple of 16; both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_copy(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
          smem_u32(smem_dst)),
      "l"(gmem_src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}
// A 2D box of a tensor map at (c0 = innermost element, c1 = row).
__device__ __forceinline__ void tensor_copy_2d(void* smem_dst, const CUtensorMap* map, int32_t c0, int32_t c1,
                                               uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
      "{%2, %3}], [%4], %5;\n" ::"r"(smem_u32(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}
// 16 bytes global -> shared through L2 only (like __ldcg), asynchronous:
// complete for the issuing thread after cp_async_wait_all (then a barrier
// for the others).
__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// ---- watchdog ----
enum ErrorCode : uint32_t { kErrNone = 0, kErrCounterTimeout = 1, kErrStageTimeout = 2, kErrBadInstruction = 3 };

struct Watch {
  uint64_t deadline_ns = 0;  // 0: no watchdog
  uint32_t* abort_flag = nullptr;
};

__device__ __forceinline__ bool aborted(const Params& p) {
  return *reinterpret_cast<volatile uint32_t*>(p.abort_flag) != 0;
}

// Which instruction an error is about: values, not a reference to the
// instruction. A pointer to the instruction kept in the role's state made the
// compiler put the instruction and that state in local memory, and with
// ~28 KB of L1 left beside the ring every access to them was an L2 round
// trip (~1 us under load: the first timelines' per-instruction overhead).
struct InstrSite {
  uint32_t index = 0;  // in the SM's list
  uint32_t op = 0;
  uint32_t layer = 0;
};
__device__ __forceinline__ InstrSite site_of(uint32_t index, const Instruction& in) {
  return InstrSite{index, static_cast<uint32_t>(in.op), static_cast<uint32_t>(in.layer)};
}

// Records the first failure and raises the abort flag. Out of line: it is
// the watchdog's cold path, and inlined at every wait (each ring acquire of
// every unrolled loop) it was ~1,000 instructions of the kernel's code, which
// is well over the SM's instruction cache (docs/megakernel.md, round 9).
// The one function tools/check_mk_ptxas.sh lets stay a call.
__device__ __noinline__ void report(const Params& p, uint32_t code, InstrSite at, uint32_t counter, int32_t value,
                                       int32_t target, uint32_t role) {
  if (atomicCAS(&p.error->code, 0u, code) == 0u) {
    MkError& e = *p.error;
    e.sm = blockIdx.x;
    e.instr = at.index;
    e.opcode = at.op;
    e.layer = at.layer;
    e.counter = counter;
    e.value = value;
    e.target = target;
    e.role = role;
    __threadfence();
  }
  atomicExch(p.abort_flag, 1u);
}

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Spins until (int32) counters[c] >= target (one thread). False: the
// watchdog fired or another wait did (the step is being abandoned).
__device__ __forceinline__ bool wait_counter(const Params& p, uint32_t c, int32_t target, InstrSite at,
                                             uint32_t role) {
  const uint32_t* ctr = p.counters + c;
  if (static_cast<int32_t>(ld_acquire(ctr)) >= target) return true;
  const uint64_t t0 = global_timer();
  const uint32_t cap = p.poll_ns;
  uint32_t ns = min(32u, cap);
  for (uint32_t it = 0;; ++it) {
    if (ns) __nanosleep(ns);
    ns = min(2 * ns, cap);
    const int32_t v = static_cast<int32_t>(ld_acquire(ctr));
    if (v >= target) return true;
    if ((it & 63) == 63) {
      if (aborted(p)) return false;
      if (p.watchdog_ns && global_timer() - t0 > p.watchdog_ns) {
        report(p, kErrCounterTimeout, at, c, v, target, role);
        return false;
      }
    }
  }
}

// Waits for an mbarrier phase (each calling thread). False: abandoned.
__device__ __forceinline__ bool wait_stage(const Params& p, uint64_t* bar, uint32_t parity, InstrSite at,
                                           uint32_t role) {
  if (mbar_try_wait(bar, parity)) return true;
  const uint64_t t0 = global_timer();
  for (uint32_t it = 0;; ++it) {
    if (mbar_try_wait(bar, parity)) return true;
    if ((it & 255) == 255) {
      if (aborted(p)) return false;
      // Twice the counter watchdog: a stage waits behind its loader, whose
      // own waits report the real cause first.
      if (p.watchdog_ns && global_timer() - t0 > 2 * p.watchdog_ns) {
        report(p, kErrStageTimeout, at, 0xffffffffu, 0, 0, role);
        return false;
      }
    }
  }
}

// Release of this CTA's outputs: every consumer thread's stores are ordered
// before the increment (call from all consumer threads). The barrier orders
// the other threads' stores before thread 0's release (release is
// cumulative in the PTX memory model), so one red.release.gpu replaces the
// fence.sc + atomic pair.
__device__ __forceinline__ void red_release_add(uint32_t* ctr, uint32_t add) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(ctr), "r"(add) : "memory");
}
// Several counters at once after one release fence (thread 0, after the
// consumers' barrier): the claim loops' per-slot tallies.
__device__ __forceinline__ void release_fence() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }
__device__ __forceinline__ void red_relaxed_add(uint32_t* ctr, uint32_t add) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;\n" ::"l"(ctr), "r"(add) : "memory");
}
__device__ __forceinline__ void signal_counter(const Params& p, uint32_t c, uint32_t add = 1) {
  consumer_sync();
  if (threadIdx.x == 0 && c != ::ms::mk::kNoCounter) red_release_add(p.counters + c, add);
}

}  // namespace ms::gpu::mk
