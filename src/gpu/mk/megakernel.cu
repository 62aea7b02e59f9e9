// The decode megakernel: one persistent CTA per SM runs its instruction list
// (src/mk/schedule.h) for the whole decode step. Warp roles:
//   warps 0-7  consumers: wait on each instruction's dependency counters,
//              compute it from the stage ring and the activation buffers,
//              write its outputs and signal its counters;
//   warp 8     loader: streams every instruction's weights / K-V pages into
//              the ring ahead of the consumers (loader.cuh);
//   warp 9     signals (Params::async_signal; else it exits at once): releases
//              the counters of the instructions the consumers posted, while
//              they go on to the next one.
// No grid-wide barrier: instructions wait only on their own producers
// (counters), and a zeroing pass is replaced by two counter banks (the CTAs
// zero the other bank while they run). A wait that exceeds the watchdog
// records the instruction and counter and makes every CTA give up the step
// (the host turns it into an error; the process does not hang).
#include "gpu/mk/megakernel.h"

#include "gpu/common/cuda_check.h"
#include "gpu/mk/loader.cuh"
#include "gpu/mk/ops/attention.cuh"
#include "gpu/mk/ops/gemv.cuh"
#include "gpu/mk/ops/norm_route.cuh"

namespace ms::gpu::mk {
namespace {

template <bool kPack>
__device__ __forceinline__ bool execute(Ctx& c, const Instruction& in) {
  switch (in.op) {
    case Opcode::kNorm:
    case Opcode::kFinalNorm:
      return op_norm(c, in);
    case Opcode::kQkv:
    case Opcode::kOProj:
    case Opcode::kDenseGateUp:
    case Opcode::kDenseDown:
    case Opcode::kLmHead:
      return op_gemv(c, in);
    case Opcode::kRouter:
      return op_router(c, in);
    case Opcode::kRoute:
      return op_route(c, in.layer);
    case Opcode::kAttention:
      return op_attention<kPack>(c, in);
    case Opcode::kAttnCombine:
      return op_combine(c, in);
    case Opcode::kExpertGateUp:
    case Opcode::kExpertDown:
      return op_claims(c, in);
    case Opcode::kBarrier:
    case Opcode::kNop:
      return true;
  }
  if (c.tid() == 0) report(c.p, kErrBadInstruction, c.at, 0, 0, 0, 0);
  return false;
}

// Params::async_signal, consumer thread 0: the next entry of the signal
// ring (after the consumers' barrier that orders their stores). A wait for a
// free entry that is abandoned drops it: the step is being given up.
__device__ __forceinline__ void post_entry(const Params& p, Smem& s, InstrSite at, uint32_t a, uint32_t b) {
  const uint32_t q = s.sig_pos;
  const int slot = static_cast<int>(q % kSigSlots);
  if (!wait_stage(p, &s.sig_empty[slot], ((q / kSigSlots) & 1u) ^ 1u, at, 0)) return;
  s.sig[slot] = SigEntry{{a, b}, {1u, 1u}};
  mbar_arrive(&s.sig_full[slot]);  // release (CTA): the entry and, through the barrier, the consumers' stores
  s.sig_pos = q + 1;
}
// An instruction's counter signals (every consumer thread calls it).
__device__ __forceinline__ void post_signals(Ctx& c, uint32_t a, uint32_t b) {
  consumer_sync();
  if (c.tid() == 0 && (a != ::ms::mk::kNoCounter || b != ::ms::mk::kNoCounter)) post_entry(c.p, c.s, c.at, a, b);
}

// The signal warp (lane 0): takes every posted entry, one release fence for
// all of them (cumulative: it orders the stores the consumers' barrier and
// arrive made visible to this thread), then the adds, then frees them. Ends
// on the consumers' exit entry, or when the step is abandoned (the
// consumers' posts then stop waiting for free entries too).
__device__ __forceinline__ void signal_main(const Params& p, Smem& s) {
  if (!p.async_signal || (threadIdx.x & 31) != 0) return;
  for (uint32_t q = 0;;) {
    for (uint32_t it = 0; !mbar_try_wait(&s.sig_full[q % kSigSlots], (q / kSigSlots) & 1u);)
      if ((++it & 255) == 0 && aborted(p)) return;
    uint32_t n = 1;
    // Entries already posted join this fence; the look-ahead must not wait
    // (try_wait may suspend the warp while the taken entries' counters,
    // which the consumers may be waiting for, are not yet added).
    while (n < kSigSlots && mbar_test_wait(&s.sig_full[(q + n) % kSigSlots], ((q + n) / kSigSlots) & 1u)) ++n;
    release_fence();
    for (uint32_t k = 0; k < n; ++k) {
      const SigEntry e = s.sig[(q + k) % kSigSlots];
      if (e.counter[0] == kSigExit) return;  // the consumers' last entry
      for (int i = 0; i < 2; ++i)
        if (e.counter[i] != ::ms::mk::kNoCounter) red_relaxed_add(p.counters + e.counter[i], e.add[i]);
      mbar_arrive(&s.sig_empty[(q + k) % kSigSlots]);
    }
    q += n;
  }
}

template <bool kPack>
__device__ __forceinline__ void consumer_main(const Params& p, Smem& s) {
  Ctx c(p, s);
  const uint32_t b = p.sm_begin[blockIdx.x], e = p.sm_begin[blockIdx.x + 1];
  for (uint32_t i = b; i < e; ++i) {
    const Instruction in = p.instrs[i];
    // The next instruction's line into L1 while this one runs (the list is
    // read once per step: without it every instruction starts with a DRAM
    // round trip).
    if (i + 1 < e) prefetch_l1(p.instrs + i + 1);
    c.at = site_of(i - b, in);
    // Where the consumers are, for the loader's claim gate.
    if ((p.gate_gu >= 0 || p.gate_down >= 0) && c.tid() == 0)
      *reinterpret_cast<volatile int32_t*>(&s.consumer_instr) = static_cast<int32_t>(i - b);
    c.t_data = 0;
    c.t_tiles = 0;
    c.t_stall = 0;
    const uint64_t t_start = (p.timeline && c.tid() == 0) ? global_timer() : 0;
    const bool claims = in.op == Opcode::kExpertGateUp || in.op == Opcode::kExpertDown;
    // No early exit, also when the step is given up (consumer_ctx.cuh):
    // a failed wait only puts the thread in drain mode.
    if (!claims) {
      c.wait(in.wait[0].counter, in.wait[0].target);
      if (!norm_split_waits(p, in)) c.wait(in.wait[1].counter, in.wait[1].target);  // else op_norm waits
    }
    const uint64_t t_ready = (p.timeline && c.tid() == 0) ? global_timer() : 0;
    if (!execute<kPack>(c, in) && c.tid() == 0) c.drain = true;
    const uint64_t t_pre = (p.timeline && c.tid() == 0) ? global_timer() : 0;
    // Instruction-level signals (claims signal their tallies; their signal[1] is
    // the barrier ablation's phase counter).
    const uint32_t sig0 = claims || c.drain ? ::ms::mk::kNoCounter : in.signal[0];
    const uint32_t sig1 = c.drain ? ::ms::mk::kNoCounter : in.signal[1];
    // Through the signal warp unless the SM's next instruction waits on this
    // counter: the hop (post, the warp's wake, its fence) would lengthen
    // that chain, and the consumers would wait for it anyway.
    // Norms (norm_direct): every instruction of the next layer waits on
    // them, and their SM has nothing else to run meanwhile at one row.
    bool post = p.async_signal != 0 && !(p.norm_direct && (in.op == Opcode::kNorm || in.op == Opcode::kFinalNorm));
    if (post && sig0 != ::ms::mk::kNoCounter && i + 1 < e) {
      const ::ms::mk::Wait* nw = p.instrs[i + 1].wait;
      post = nw[0].counter != sig0 && nw[1].counter != sig0;
    }
    if (post) {
      post_signals(c, sig0, sig1);
    } else {
      signal_counter(p, sig0);
      if (sig1 != ::ms::mk::kNoCounter && c.tid() == 0) red_release_add(p.counters + sig1, 1u);
    }
    if (p.timeline && c.tid() == 0) {
      TimelineEntry& t = p.timeline[i];
      t.start = t_start;
      t.ready = t_ready;
      t.data = c.t_data;
      t.end = global_timer();
      t.opcode = static_cast<uint16_t>(in.op);
      t.layer = in.layer;
      const bool gemv = in.op == Opcode::kQkv || in.op == Opcode::kOProj || in.op == Opcode::kRouter ||
                        in.op == Opcode::kDenseGateUp || in.op == Opcode::kDenseDown || in.op == Opcode::kLmHead;
      t.tiles = claims ? c.t_tiles : gemv ? uint32_t(max(in.gemv.n_tiles, 0)) : 0u;
      t.stall = c.t_stall;
      t.presignal = uint32_t(t_pre - t_start);
    }
  }
  if (p.async_signal && c.tid() == 0) post_entry(p, s, c.at, kSigExit, ::ms::mk::kNoCounter);
}

// Two instantiations, by the attention's q fragments (ops/attention.cuh):
// packed where a KV head's query heads fit the mma's rows twice (G <= 8),
// else hi and lo in separate mma. One kernel with both paths spills (the
// register allocation is the kernel's, and the larger path sets it).
template <bool kPack>
__global__ void __launch_bounds__(kThreads, 1) megakernel(const __grid_constant__ Params p,
                                                          const __grid_constant__ CUtensorMap kv_map) {
  extern __shared__ unsigned char smem_raw[];
  Smem& s = smem_of(smem_raw);
  if (threadIdx.x == 0) {
    s.consumer_instr = -1;
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s.full[i], 1);
      mbar_init(&s.empty[i], kConsumerWarps);
    }
    for (int i = 0; i < kSigSlots; ++i) {
      mbar_init(&s.sig_full[i], 1);
      mbar_init(&s.sig_empty[i], 1);
    }
    s.sig_pos = 0;
    // Shared memory keeps the previous kernel's values: a local plan's flag
    // left from the last step would pass for this step's first MoE layer.
    s.lr_layer = 0;
    s.lr_ack = 0;
    mbar_fence_init();
  }
  // This step's CTAs zero the other counter bank (the previous step used it,
  // the next one will), a slice each.
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < p.bank_words; i += gridDim.x * kThreads) p.counters_next[i] = 0;
  __syncthreads();
  if (threadIdx.x / 32 == kLoaderWarp) {
    Loader ld(p, &kv_map, s);
    ld.run();
  } else if (threadIdx.x / 32 == kSignalWarp) {
    signal_main(p, s);
  } else {
    consumer_main<kPack>(p, s);
  }
}

}  // namespace

Status launch_megakernel(const Params& p, const CUtensorMap& kv_map, cudaStream_t stream) {
  static const cudaError_t attr[2] = {
      cudaFuncSetAttribute(megakernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)),
      cudaFuncSetAttribute(megakernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes))};
  const bool pack = p.attn_pack != 0 && attention_packed(p.dims.group);
  MS_CUDA_RETURN(attr[pack ? 1 : 0]);
  if (pack)
    megakernel<true><<<p.n_sm, kThreads, kSmemBytes, stream>>>(p, kv_map);
  else
    megakernel<false><<<p.n_sm, kThreads, kSmemBytes, stream>>>(p, kv_map);
  MS_CUDA_LAUNCH_CHECK("megakernel");
  return Status::ok();
}

size_t megakernel_smem_bytes() { return kSmemBytes; }
int megakernel_threads() { return kThreads; }

Result<int> megakernel_blocks_per_sm() {
  // Both instantiations: the smaller count is what any model can rely on.
  int least = INT32_MAX;
  for (auto* k : {megakernel<false>, megakernel<true>}) {
    MS_CUDA_RETURN(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    int n = 0;
    MS_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kThreads, kSmemBytes));
    least = std::min(least, n);
  }
  return least;
}

}  // namespace ms::gpu::mk
