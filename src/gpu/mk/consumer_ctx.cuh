// State of the consumer warps while they walk their SM's instruction list,
// and the helpers every opcode uses: stage positions (wait full, check the
// header, release), dependency waits (with a memo of satisfied waits, so
// consecutive instructions waiting on the same producers do not pay another
// L2 round trip), staging activation rows into shared memory (with a tag,
// so consecutive tiles over the same rows load them once), and block-wide
// sums over the consumer threads.
//
// Giving up a step (a wait timed out here or elsewhere: the abort flag) must
// not split the consumer threads: a thread that left an instruction early
// while others went on to a named barrier would hang the CTA. So no opcode
// returns early. A failed wait puts the thread in drain mode: from then on
// its waits return at once, it skips the math, the KV-cache writes and the
// counter signals, but it walks the same control flow (every barrier, every
// release) to the end of the list. The one branch that depends on ring data
// (which tile a claim got) is decided by thread 0 for the whole CTA.
#pragma once

#include "gpu/common/bf16.cuh"
#include "gpu/mk/smem.cuh"

namespace ms::gpu::mk {

// What the activation buffer holds: (source, layer, norm instance, columns,
// rows), packed; 0: nothing.
using ActTag = uint64_t;
enum ActSource : uint64_t { kActH = 1, kActAttn = 2, kActDense = 3, kActShared = 4, kActMoe = 5, kActHf = 6 };
__device__ __forceinline__ ActTag act_tag(uint64_t src, int layer, int second, int c0, int k, int rows_key) {
  return ((((((src << 8) | uint64_t(layer & 255)) << 1 | uint64_t(second)) << 12 | uint64_t(c0 >> 4)) << 12 |
           uint64_t(k >> 4))
          << 10) |
         uint64_t(rows_key & 1023);
}

struct Ctx {
  const Params& p;
  Smem& s;
  // Thread, warp and lane indices are read from the special registers when
  // used (a register each for the whole kernel otherwise, and the attention
  // split is short of registers).
  __device__ __forceinline__ int tid() const { return static_cast<int>(threadIdx.x); }
  __device__ __forceinline__ int warp() const { return static_cast<int>(threadIdx.x >> 5); }
  __device__ __forceinline__ int lane() const { return static_cast<int>(threadIdx.x & 31); }
  Ring ring;
  InstrSite at;        // the current instruction (index in the SM's list, opcode, layer)
  bool drain = false;  // this thread gave the step up (see the file comment)
  uint64_t t_data = 0;  // timeline (thread 0): when the instruction's first ring position was full
  uint32_t t_tiles = 0; // timeline (thread 0): tiles a claim loop ran
  uint32_t t_stall = 0; // timeline (thread 0): ns waited on full positions after t_data
  ActTag act = 0;
  // The last two satisfied waits (scalars, not arrays: a dynamically indexed
  // member array would put the whole context in local memory).
  uint32_t memo_c0 = ::ms::mk::kNoCounter, memo_c1 = ::ms::mk::kNoCounter;
  int32_t memo_t0 = 0, memo_t1 = 0;
  bool memo_next = false;

  __device__ Ctx(const Params& params, Smem& smem)
      : p(params), s(smem) {}

  // Thread 0's value to every consumer thread (all of them call it).
  __device__ int32_t broadcast(int32_t mine) {
    if (tid() == 0) s.flag = mine;
    consumer_sync();
    const int32_t v = s.flag;
    consumer_sync();  // s.flag is reused by the next broadcast
    return v;
  }

  // Waits until counter c >= target (all consumer threads call it; thread 0
  // spins and every thread takes its verdict). False: the step is being
  // given up (drain mode).
  __device__ bool wait(uint32_t c, int32_t target) {
    if (c == ::ms::mk::kNoCounter) return !drain;
    if ((memo_c0 == c && memo_t0 >= target) || (memo_c1 == c && memo_t1 >= target)) return !drain;
    int32_t mine = 1;
    if (tid() == 0) mine = !drain && wait_counter(p, c, target, at, 0) ? 1 : 0;
    if (!broadcast(mine)) {
      drain = true;
      return false;
    }
    if (memo_next) {
      memo_c1 = c;
      memo_t1 = target;
    } else {
      memo_c0 = c;
      memo_t0 = target;
    }
    memo_next = !memo_next;
    return !drain;
  }

  // Waits for the next ring position and checks its header (the loader
  // walks the same list: a mismatch is a bug, reported). False: no data
  // (drain mode); the caller still releases the position.
  // Timeline: the first full position sets t_data, the wait for each later
  // one adds to t_stall.
  __device__ bool acquire(int tile, int chunk, StageHeader* hdr = nullptr) {
    const int st = ring.stage();
    const bool stall = p.timeline && tid() == 0 && t_data != 0;
    const uint64_t t0 = stall ? global_timer() : 0;
    if (drain || !wait_stage(p, &s.full[st], ring.parity(), at, 0)) {
      drain = true;
      if (hdr) *hdr = StageHeader{-1, -1, -1, 0};
      return false;
    }
    if (stall)
      t_stall += uint32_t(global_timer() - t0);
    else if (p.timeline && tid() == 0)
      t_data = global_timer();
    const StageHeader h = s.header[st];
    if (hdr) *hdr = h;
    if (h.instr != static_cast<int32_t>(at.index) || (tile != kAnyTile && (h.tile != tile || h.chunk != chunk))) {
      if (lane() == 0) report(p, kErrBadInstruction, at, uint32_t(h.instr), h.tile, tile, 0);
      drain = true;
      return false;
    }
    return true;
  }
  static constexpr int kAnyTile = -2;
  __device__ const unsigned char* stage() const { return s.stage[ring.stage()]; }
  // This warp is done with the current position.
  __device__ void release() {
    __syncwarp();
    if (lane() == 0) mbar_arrive(&s.empty[ring.stage()]);
    ring.advance();
  }

  // Copies rows of a bf16 matrix into the activation buffer: buffer row n (n
  // < nrows, at n x stride bytes) = src row rows[n], columns [c0, c0 + k);
  // then syncs. rows null: row n is src row n. A tag names one layout: a
  // buffer staged with another stride gets another tag.
  __device__ void stage_act(ActTag tag, const uint16_t* src, int64_t ld, const int32_t* rows, int nrows, int c0, int k,
                            int stride = kActStride) {
    if (tag == act) return;
    // Asynchronous 16-byte copies (every row's in flight at once, no
    // registers held) and no division: this helper is inlined at every
    // staging site, and the division's expansion made it ~400 instructions
    // a copy (~36 KB of a kernel whose code is well over the SM's
    // instruction cache: docs/megakernel.md, round 9).
    const int per_row = k / 8;  // 16-byte pieces
#pragma unroll 1
    for (int n = 0; n < nrows; ++n) {
      const uint4* from = reinterpret_cast<const uint4*>(src + (rows ? int64_t(rows[n]) : int64_t(n)) * ld + c0);
      const uint32_t to = smem_u32(s.act + n * stride);
#pragma unroll 1
      for (int c = tid(); c < per_row; c += kConsumerThreads) cp_async_16(to + c * 16, from + c);
    }
    cp_async_wait_all();
    consumer_sync();
    act = tag;
  }

  // Sum of v over the consumer threads (every thread gets it).
  __device__ float block_sum(float v) {
    float* red = reinterpret_cast<float*>(s.scratch + kScratchBytes - 64);
    v = warp_sum(v);
    if (lane() == 0) red[warp()] = v;
    consumer_sync();
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) t += red[w];
    consumer_sync();
    return t;
  }
};

}  // namespace ms::gpu::mk
