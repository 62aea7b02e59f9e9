#include "gpu/ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gpu/common/bf16.cuh"
#include "gpu/common/cuda_check.h"

namespace ms::gpu {

constexpr int kArgmaxThreads = 1024;

// One block per row: pass 1 max + argmax, pass 2 sum of exp(v - max).
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* __restrict__ logits, int V,
                                                                 int32_t* __restrict__ tokens,
                                                                 float* __restrict__ logprobs) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float red[32];
  const float* row = logits + int64_t(blockIdx.x) * V;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = row[i];
    if (v > bv) {  // strided ascending: the first max this thread sees has its lowest index
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  bv = lane < nwarps ? sv[lane] : -INFINITY;
  bi = lane < nwarps ? si[lane] : 0x7fffffff;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  float s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(row[i] - bv);
  s = block_sum(s, red);
  if (threadIdx.x == 0) {
    tokens[blockIdx.x] = bi;
    if (logprobs) logprobs[blockIdx.x] = -logf(s);
  }
}

// Split argmax for large vocabularies: one block per row used a single SM to
// read a 1 MB row (262,144 logits): 106 us per bs-1 decode step on the H200
// (BenchNmc profile, 2% of the step). Grid (rows, kArgmaxSplits): each block
// reduces a contiguous slice to (max, lowest index of the max, sum of
// exp(v - max)); a small kernel merges the slices (ties to the lowest id, sums
// rescaled to the global max), so the result equals argmax_kernel's.
constexpr int kArgmaxSplits = 64;
constexpr int kArgmaxSplitThreads = 256;
constexpr int kArgmaxMaxRows = 256;
struct ArgmaxPart {
  float max;
  int idx;
  float sum;
};
__device__ ArgmaxPart g_argmax_parts[kArgmaxMaxRows * kArgmaxSplits];

__device__ __forceinline__ void argmax_merge(float& bv, int& bi, float ov, int oi) {
  if (ov > bv || (ov == bv && oi < bi)) {
    bv = ov;
    bi = oi;
  }
}

__global__ void __launch_bounds__(kArgmaxSplitThreads) argmax_split_kernel(const float* __restrict__ logits, int V) {
  __shared__ float sv[kArgmaxSplitThreads / 32];
  __shared__ int si[kArgmaxSplitThreads / 32];
  __shared__ float red[32];
  const int r = blockIdx.x, sp = blockIdx.y;
  const int per = (V + kArgmaxSplits - 1) / kArgmaxSplits;
  const int lo = sp * per, hi = min(V, lo + per);
  const float* row = logits + int64_t(r) * V;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const float v = row[i];
    if (v > bv) {  // strided ascending: the first max this thread sees has its lowest index
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1)
    argmax_merge(bv, bi, __shfl_xor_sync(0xffffffffu, bv, o), __shfl_xor_sync(0xffffffffu, bi, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  bv = lane < kArgmaxSplitThreads / 32 ? sv[lane] : -INFINITY;
  bi = lane < kArgmaxSplitThreads / 32 ? si[lane] : 0x7fffffff;
  for (int o = 16; o > 0; o >>= 1)
    argmax_merge(bv, bi, __shfl_xor_sync(0xffffffffu, bv, o), __shfl_xor_sync(0xffffffffu, bi, o));
  float s = 0.f;
  if (bv != -INFINITY)
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) s += expf(row[i] - bv);
  s = block_sum(s, red);
  if (threadIdx.x == 0) g_argmax_parts[r * kArgmaxSplits + sp] = {bv, bi, s};
}

__global__ void argmax_merge_kernel(int32_t* __restrict__ tokens, float* __restrict__ logprobs) {
  const int r = blockIdx.x, t = threadIdx.x;  // kArgmaxSplits threads
  const ArgmaxPart p = g_argmax_parts[r * kArgmaxSplits + t];
  float bv = p.max;
  int bi = p.idx;
  for (int o = 16; o > 0; o >>= 1)
    argmax_merge(bv, bi, __shfl_xor_sync(0xffffffffu, bv, o), __shfl_xor_sync(0xffffffffu, bi, o));
  __shared__ float wv[kArgmaxSplits / 32];
  __shared__ int wi[kArgmaxSplits / 32];
  __shared__ float ws[kArgmaxSplits / 32];
  if ((t & 31) == 0) {
    wv[t >> 5] = bv;
    wi[t >> 5] = bi;
  }
  __syncthreads();
  bv = wv[0];
  bi = wi[0];
  for (int w = 1; w < kArgmaxSplits / 32; ++w) argmax_merge(bv, bi, wv[w], wi[w]);
  float s = p.max == -INFINITY ? 0.f : p.sum * expf(p.max - bv);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((t & 31) == 0) ws[t >> 5] = s;
  __syncthreads();
  if (t == 0) {
    float total = 0.f;
    for (int w = 0; w < kArgmaxSplits / 32; ++w) total += ws[w];
    tokens[r] = bi;
    if (logprobs) logprobs[r] = -logf(total);
  }
}

Status launch_argmax(const float* logits, int R, int V, int32_t* tokens, float* logprobs, cudaStream_t stream) {
  if (R == 0) return Status::ok();
  if (R <= kArgmaxMaxRows && V >= 16 * kArgmaxSplits * kArgmaxSplitThreads / 8) {
    argmax_split_kernel<<<dim3(R, kArgmaxSplits), kArgmaxSplitThreads, 0, stream>>>(logits, V);
    MS_CUDA_LAUNCH_CHECK("argmax_split_kernel");
    argmax_merge_kernel<<<R, kArgmaxSplits, 0, stream>>>(tokens, logprobs);
    MS_CUDA_LAUNCH_CHECK("argmax_merge_kernel");
    return Status::ok();
  }
  argmax_kernel<<<R, kArgmaxThreads, 0, stream>>>(logits, V, tokens, logprobs);
  MS_CUDA_LAUNCH_CHECK("argmax_kernel");
  return Status::ok();
}

// ---------------------------------------------------------------------------
// The full sampler (sampling.h describes the method and its differences from
// the CPU sampler). One block of kSampleThreads per row.

namespace {

constexpr int kSampleThreads = 1024;
constexpr int kSampleWarps = kSampleThreads / 32;
constexpr int kRadixBins = 2048;                 // 11-bit digits: passes of 11, 11, 10 bits
constexpr double kMassScale = 17592186044416.0;  // 2^44: weights <= 1, rows <= 2^18 entries: sums < 2^62
constexpr unsigned kFull = 0xffffffffu;
constexpr int kNoIndex = 0x7fffffff;

// The counter-based draw of sampler_uniform (src/sampling/sampler.cpp),
// ported with the same constants; launch_sampler_uniform tests it bit for bit.
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ double device_uniform(uint64_t seed, uint64_t index) {
  const uint64_t x = mix64(mix64(seed) ^ (index * 0xd1b54a32d192ed03ull));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

// Order-preserving unsigned key of a float (-0 and +0 share one key, as
// float comparison makes them equal).
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v == 0.f ? 0.f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_to_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Fixed-point weight exp(v - mx) (v <= mx) for the mass histograms.
__device__ __forceinline__ unsigned long long mass_fx(float v, float mx) {
  return __double2ull_rn(static_cast<double>(expf(v - mx)) * kMassScale);
}

// Shared scratch of the block-level helpers.
struct SampleShared {
  double redd[kSampleWarps];
  unsigned long long redu[kSampleWarps];
  float redf[kSampleWarps];
  int redi[kSampleWarps];
  // radix_select results
  int sel_found;
  uint32_t sel_digit, sel_count;
  unsigned long long sel_above, sel_rem;
  // locate state
  double loc_wsum[kSampleWarps];
  int loc_wlast[kSampleWarps];
  int loc_seg, loc_seg_last, loc_last, loc_result;
  double loc_base, loc_target;
  // row results broadcast to the block
  float mx;
  int arg;
  double lse;
  int n_cand;
  int cand[kMaxTopLogprobs];
};

// Block-wide inclusive / exclusive scan (blockDim.x == kSampleThreads); every
// thread gets its prefixes and the total.
template <typename T>
__device__ void block_scan(T v, T* red, T* incl, T* excl, T* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const T t = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += t;
  }
  T wex = __shfl_up_sync(kFull, v, 1);
  if (lane == 0) wex = T(0);
  if (lane == 31) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = red[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const T t = __shfl_up_sync(kFull, w, o);
      if (lane >= o) w += t;
    }
    red[lane] = w;
  }
  __syncthreads();
  const T base = warp > 0 ? red[warp - 1] : T(0);
  *incl = base + v;
  *excl = base + wex;
  *total = red[kSampleWarps - 1];
  __syncthreads();
}

struct RadixOut {
  bool found = false;
  uint32_t key = 0;                // key of the selected value
  unsigned long long above = 0;    // count (or fixed-point mass) of elements with a larger key
  uint32_t ties = 0;               // elements with exactly this key
  unsigned long long total = 0;    // count (or mass) of all elements in the set
};

// Radix select from the top over the elements with elem(i, &v) true.
// Count mode: the k-th largest value (found when the set has >= k elements).
// Mass mode (kMass): bins accumulate mass_fx(v, mx); selects the value at
// which the descending prefix first reaches ceil(frac * total mass).
// cnt: kRadixBins counters, mass: kRadixBins fixed-point sums (shared).
template <bool kMass, typename Elem>
__device__ RadixOut radix_select(int V, const Elem& elem, float mx, unsigned long long k, double frac, uint32_t* cnt,
                                 unsigned long long* mass, SampleShared* sh) {
  RadixOut r;
  uint32_t prefix = 0, pmask = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 21 : (pass == 1 ? 10 : 0);
    const uint32_t dmask = pass == 2 ? 0x3ffu : 0x7ffu;
    for (int b = threadIdx.x; b < kRadixBins; b += blockDim.x) {
      cnt[b] = 0;
      if (kMass) mass[b] = 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
      float v;
      if (!elem(i, &v)) continue;
      const uint32_t key = order_key(v);
      if ((key & pmask) != prefix) continue;
      const uint32_t d = (key >> shift) & dmask;
      atomicAdd(&cnt[d], 1u);
      if (kMass) atomicAdd(&mass[d], mass_fx(v, mx));
    }
    __syncthreads();
    // Thread t owns bins 2047 - 2t and 2046 - 2t: a scan in descending digit order.
    const int hi = kRadixBins - 1 - 2 * threadIdx.x, lo = hi - 1;
    const unsigned long long a_hi = kMass ? mass[hi] : cnt[hi], a_lo = kMass ? mass[lo] : cnt[lo];
    unsigned long long incl, excl, total;
    block_scan<unsigned long long>(a_hi + a_lo, sh->redu, &incl, &excl, &total);
    unsigned long long rem;
    if (pass == 0) {
      r.total = total;
      rem = kMass ? static_cast<unsigned long long>(ceil(frac * static_cast<double>(total))) : k;
      if (rem < 1) rem = 1;
      if (kMass && rem > total) rem = total;
    } else {
      rem = sh->sel_rem;
    }
    if (threadIdx.x == 0) sh->sel_found = 0;
    __syncthreads();
    if (excl < rem && rem <= incl) {  // exactly one thread
      const bool in_hi = excl + a_hi >= rem;
      const int d = in_hi ? hi : lo;
      const unsigned long long above = in_hi ? excl : excl + a_hi;
      sh->sel_found = 1;
      sh->sel_digit = d;
      sh->sel_count = cnt[d];
      sh->sel_above = above;
      sh->sel_rem = rem - above;
    }
    __syncthreads();
    const bool found = sh->sel_found != 0;
    const uint32_t d = sh->sel_digit, count = sh->sel_count;
    const unsigned long long above = sh->sel_above;
    __syncthreads();
    if (!found) return r;
    prefix |= d << shift;
    pmask |= dmask << shift;
    r.above += above;
    r.ties = count;
  }
  r.found = true;
  r.key = prefix;
  return r;
}

// Inverse-CDF search in ascending index order: the first i whose running sum
// of weight(i) (>= 0) exceeds target_of(total); when rounding runs past the
// end, the last index of positive weight (-1 if none). Two levels: warp
// segments of the row, then one block scan inside the crossing segment.
template <typename W, typename Tgt>
__device__ int locate(int V, const W& weight, const Tgt& target_of, SampleShared* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seg = ((V + kSampleWarps - 1) / kSampleWarps + 31) & ~31;
  {
    const int s0 = min(V, warp * seg), s1 = min(V, s0 + seg);
    double s = 0;
    int last = -1;
    for (int i = s0 + lane; i < s1; i += 32) {
      const double w = weight(i);
      if (w > 0) {
        s += w;
        last = i;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      s += __shfl_xor_sync(kFull, s, o);
      last = max(last, __shfl_xor_sync(kFull, last, o));
    }
    if (lane == 0) {
      sh->loc_wsum[warp] = s;
      sh->loc_wlast[warp] = last;
    }
  }
  __syncthreads();
  if (warp == 0) {
    double incl = sh->loc_wsum[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const double t = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += t;
    }
    double excl = __shfl_up_sync(kFull, incl, 1);
    if (lane == 0) excl = 0;
    const double total = __shfl_sync(kFull, incl, 31);
    const double target = target_of(total);
    const unsigned ball = __ballot_sync(kFull, incl > target);
    int last = sh->loc_wlast[lane];
    for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(kFull, last, o));
    const int k = ball ? __ffs(ball) - 1 : -1;
    if (lane == 0) {
      sh->loc_seg = k;
      sh->loc_last = last;
      sh->loc_target = target;
      sh->loc_result = kNoIndex;
    }
    if (lane == k) {
      sh->loc_base = excl;
      sh->loc_seg_last = sh->loc_wlast[lane];
    }
  }
  __syncthreads();
  const int k = sh->loc_seg;
  if (k < 0) {
    const int r = sh->loc_last;
    __syncthreads();
    return r;
  }
  const int a0 = min(V, k * seg), a1 = min(V, a0 + seg);
  const int q = (a1 - a0 + blockDim.x - 1) / blockDim.x;
  const int c0 = min(a1, a0 + static_cast<int>(threadIdx.x) * q), c1 = min(a1, c0 + q);
  double cs = 0;
  for (int i = c0; i < c1; ++i) cs += weight(i);
  double incl, excl, total;
  block_scan<double>(cs, sh->redd, &incl, &excl, &total);
  const double base = sh->loc_base, target = sh->loc_target;
  if (base + incl > target) {
    double c = base + excl;
    for (int i = c0; i < c1; ++i) {
      const double w = weight(i);
      if (w <= 0) continue;
      c += w;
      if (c > target) {
        atomicMin(&sh->loc_result, i);
        break;
      }
    }
  }
  __syncthreads();
  int r = sh->loc_result;
  if (r == kNoIndex) r = sh->loc_seg_last;
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* __restrict__ logits, int V, const SampleRowParams* __restrict__ rows,
                  const SamplePenalty* __restrict__ penalties, const uint32_t* __restrict__ masks,
                  float* __restrict__ scratch, SampleRowOut* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ SampleShared sh;
  const SampleRowParams p = rows[blockIdx.x];
  const float* raw_row = logits + int64_t(p.logits_row) * V;
  // Step 0: every read of the row goes through the allowed-token mask.
  const uint32_t* mask = p.mask_row >= 0 ? masks + int64_t(p.mask_row) * ((V + 31) / 32) : nullptr;
  auto raw = [raw_row, mask](int i) {
    return mask && !((mask[i >> 5] >> (i & 31)) & 1u) ? -INFINITY : raw_row[i];
  };
  float* l = scratch + int64_t(blockIdx.x) * V;  // (V) penalised, temperature-scaled row
  const bool greedy = p.temperature <= 0.f;
  const bool want_lp = p.logprobs >= 0;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const SamplePenalty* pen = penalties + p.pen_offset;
  uint32_t* bitmap = reinterpret_cast<uint32_t*>(smem);  // (V / 32) penalised tokens, pass 1 only
  uint32_t* cnt = reinterpret_cast<uint32_t*>(smem);     // (kRadixBins) after pass 1
  unsigned long long* mass = reinterpret_cast<unsigned long long*>(smem + kRadixBins * sizeof(uint32_t));

  // Steps 1-3 and 5 in one pass: raw log-sum-exp (online), l = pen(raw) / T,
  // max (and argmax, lowest id on ties) of l.
  const bool has_pen = p.pen_count > 0;
  if (has_pen) {
    for (int w = tid; w < (V + 31) / 32; w += blockDim.x) bitmap[w] = 0;
    __syncthreads();
    for (int e = tid; e < p.pen_count; e += blockDim.x) {
      const int t = pen[e].token;
      atomicOr(&bitmap[t >> 5], 1u << (t & 31));
    }
    __syncthreads();
  }
  float bm = -INFINITY, rm = -INFINITY;
  int bi = kNoIndex;
  double rs = 0;
  for (int i = tid; i < V; i += blockDim.x) {
    const float v = raw(i);
    if (want_lp) {
      if (v > rm) {
        rs = (rm == -INFINITY ? 0.0 : rs * exp(static_cast<double>(rm) - v)) + 1.0;
        rm = v;
      } else if (v != -INFINITY) {
        rs += expf(v - rm);
      }
    }
    if (has_pen && ((bitmap[i >> 5] >> (i & 31)) & 1u)) continue;
    const float x = greedy ? v : __fdiv_rn(v, p.temperature);
    if (!greedy) l[i] = x;
    if (x > bm) {  // strided ascending: the first max this thread sees has its lowest id
      bm = x;
      bi = i;
    }
  }
  for (int e = tid; e < p.pen_count; e += blockDim.x) {
    const SamplePenalty q = pen[e];
    float x = raw(q.token);
    if (p.repetition_penalty != 1.f && q.in_seen)
      x = x > 0.f ? __fdiv_rn(x, p.repetition_penalty) : __fmul_rn(x, p.repetition_penalty);
    if ((p.frequency_penalty != 0.f || p.presence_penalty != 0.f) && q.out_count > 0)
      x = __fsub_rn(x, __fadd_rn(__fmul_rn(static_cast<float>(q.out_count), p.frequency_penalty),
                                 p.presence_penalty));
    if (q.bias != 0.f) x = __fadd_rn(x, q.bias);
    if (!greedy) {
      x = __fdiv_rn(x, p.temperature);
      l[q.token] = x;
    }
    if (x > bm || (x == bm && q.token < bi)) {
      bm = x;
      bi = q.token;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, bm, o);
    const int oi = __shfl_xor_sync(kFull, bi, o);
    if (ov > bm || (ov == bm && oi < bi)) {
      bm = ov;
      bi = oi;
    }
    const float om = __shfl_xor_sync(kFull, rm, o);
    const double os = __shfl_xor_sync(kFull, rs, o);
    if (om != -INFINITY) {
      if (rm == -INFINITY) {
        rm = om;
        rs = os;
      } else if (om > rm) {
        rs = rs * exp(static_cast<double>(rm) - om) + os;
        rm = om;
      } else {
        rs += os * exp(static_cast<double>(om) - rm);
      }
    }
  }
  if (lane == 0) {
    sh.redf[warp] = bm;
    sh.redi[warp] = bi;
  }
  __syncthreads();
  if (tid == 0) {
    float m = sh.redf[0];
    int a = sh.redi[0];
    for (int w = 1; w < kSampleWarps; ++w)
      if (sh.redf[w] > m || (sh.redf[w] == m && sh.redi[w] < a)) {
        m = sh.redf[w];
        a = sh.redi[w];
      }
    sh.mx = m;
    sh.arg = a;
  }
  __syncthreads();
  if (lane == 0) {  // the raw log-sum-exp reuses the reduction slots
    sh.redf[warp] = rm;
    sh.redd[warp] = rs;
  }
  __syncthreads();
  if (tid == 0 && want_lp) {
    float m = -INFINITY;
    for (int w = 0; w < kSampleWarps; ++w) m = fmaxf(m, sh.redf[w]);
    double s = 0;
    for (int w = 0; w < kSampleWarps; ++w)
      if (sh.redf[w] != -INFINITY) s += sh.redd[w] * exp(static_cast<double>(sh.redf[w]) - m);
    sh.lse = static_cast<double>(m) + log(s);
  }
  __syncthreads();
  const float mx = sh.mx;
  int token = sh.arg < V ? sh.arg : 0;  // no max only for an all-NaN row

  if (!greedy) {
    // Step 6: min-p; step 7: top-k. Both keep v >= a threshold.
    float lo = -INFINITY;
    if (p.min_p > 0.f) lo = __fadd_rn(mx, p.log_min_p);
    if (p.top_k > 0 && p.top_k < V) {
      auto kept = [&](int i, float* v) {
        *v = l[i];
        return *v >= lo && *v != -INFINITY;
      };
      const RadixOut r = radix_select<false>(V, kept, mx, static_cast<unsigned long long>(p.top_k), 0.0, cnt, mass, &sh);
      if (r.found) lo = fmaxf(lo, key_to_float(r.key));
    }
    // Step 8: top-p. Keep v > xs, and the first `tie_cut` ids (ascending) of v == xs.
    float xs = -INFINITY;
    int tie_cut = kNoIndex;
    if (p.top_p < 1.f) {
      auto kept = [&](int i, float* v) {
        *v = l[i];
        return *v >= lo && *v != -INFINITY;
      };
      const RadixOut r = radix_select<true>(V, kept, mx, 0, static_cast<double>(p.top_p), cnt, mass, &sh);
      if (r.found) {
        xs = key_to_float(r.key);
        const unsigned long long e = mass_fx(xs, mx);
        const double need = static_cast<double>(p.top_p) * static_cast<double>(r.total) - static_cast<double>(r.above);
        long long j = e > 0 ? static_cast<long long>(ceil(need / static_cast<double>(e))) : r.ties;
        j = j < 1 ? 1 : (j > r.ties ? r.ties : j);
        if (j < r.ties) {
          auto tie = [&](int i) { return l[i] == xs ? 1.0 : 0.0; };
          const double jt = static_cast<double>(j - 1);
          tie_cut = locate(V, tie, [jt](double) { return jt; }, &sh);
        }
      }
    }
    // Step 9: inverse CDF in ascending id order.
    auto weight = [&](int i) {
      const float v = l[i];
      const bool keep = v >= lo && v != -INFINITY && (v > xs || (v == xs && i <= tie_cut));
      return keep ? static_cast<double>(expf(v - mx)) : 0.0;
    };
    const double u = device_uniform(p.seed, p.index);
    token = locate(V, weight, [u](double total) { return u * total; }, &sh);
    if (token < 0) token = sh.arg;  // no positive weight: only possible with non-finite logits
  }

  // Step 1: the chosen token's raw logprob and the top-N.
  const int n_top = want_lp ? min(p.logprobs, V) : 0;
  if (n_top > 0) {
    auto all = [&](int i, float* v) {
      *v = raw(i);
      return true;
    };
    const RadixOut r = radix_select<false>(V, all, 0.f, static_cast<unsigned long long>(n_top), 0.0, cnt, mass, &sh);
    const long long need = n_top - static_cast<long long>(r.above);  // ties wanted at the N-th value
    int tie_cut = kNoIndex;
    if (r.ties > need) {
      auto tie = [&](int i) { return order_key(raw(i)) == r.key ? 1.0 : 0.0; };
      const double jt = static_cast<double>(need - 1);
      tie_cut = locate(V, tie, [jt](double) { return jt; }, &sh);
    }
    if (tid == 0) sh.n_cand = 0;
    __syncthreads();
    for (int i = tid; i < V; i += blockDim.x) {
      const uint32_t key = order_key(raw(i));
      if (key > r.key || (key == r.key && i <= tie_cut)) {
        const int slot = atomicAdd(&sh.n_cand, 1);
        if (slot < kMaxTopLogprobs) sh.cand[slot] = i;
      }
    }
    __syncthreads();
  }
  if (tid == 0) {
    SampleRowOut& o = out[blockIdx.x];
    o.token = token;
    o.logprob = want_lp ? static_cast<float>(static_cast<double>(raw(token)) - sh.lse) : 0.f;
    const int n = n_top > 0 ? min(sh.n_cand, n_top) : 0;
    int ids[kMaxTopLogprobs];
    float lps[kMaxTopLogprobs];
    for (int c = 0; c < n; ++c) {  // insertion sort: logprob desc, then id asc
      const int id = sh.cand[c];
      const float lp = static_cast<float>(static_cast<double>(raw(id)) - sh.lse);
      int at = c;
      while (at > 0 && (lps[at - 1] < lp || (lps[at - 1] == lp && ids[at - 1] > id))) {
        ids[at] = ids[at - 1];
        lps[at] = lps[at - 1];
        --at;
      }
      ids[at] = id;
      lps[at] = lp;
    }
    o.n_top = n;
    for (int c = 0; c < n; ++c) {
      o.top_token[c] = ids[c];
      o.top_logprob[c] = lps[c];
    }
  }
}

__global__ void sampler_uniform_kernel(const uint64_t* seeds, const uint64_t* indices, int n, double* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = device_uniform(seeds[i], indices[i]);
}

}  // namespace

void pack_sample_row(const SamplingParams& p, std::span<const int32_t> prompt, std::span<const int32_t> output,
                     uint64_t seed, int logits_row, int V, SampleRowParams* row,
                     std::vector<SamplePenalty>* penalties) {
  *row = SampleRowParams{};
  row->temperature = p.temperature;
  row->top_p = p.top_p;
  row->top_k = p.top_k;
  row->min_p = p.min_p;
  row->log_min_p = p.min_p > 0.f ? std::log(p.min_p) : 0.f;  // the float overload, as sample_token
  row->presence_penalty = p.presence_penalty;
  row->frequency_penalty = p.frequency_penalty;
  row->repetition_penalty = p.repetition_penalty;
  row->logprobs = p.logprobs;
  row->logits_row = logits_row;
  row->seed = seed;
  row->index = output.size();
  row->mask_row = -1;
  row->pen_offset = static_cast<int32_t>(penalties->size());
  const bool rep = p.repetition_penalty != 1.f;
  const bool freq = p.frequency_penalty != 0.f || p.presence_penalty != 0.f;
  if (!rep && !freq && p.logit_bias.empty()) return;
  // (token, from output) pairs, sorted: one entry per distinct token.
  std::vector<int64_t> keys;
  auto in_range = [V](int32_t t) { return t >= 0 && t < V; };
  if (rep || freq) {
    keys.reserve((rep ? prompt.size() : 0) + output.size());
    if (rep)
      for (int32_t t : prompt)
        if (in_range(t)) keys.push_back(int64_t(t) * 2);
    for (int32_t t : output)
      if (in_range(t)) keys.push_back(int64_t(t) * 2 + 1);
    std::sort(keys.begin(), keys.end());
  }
  // Merge the history entries with logit_bias (sorted by token, validated).
  size_t b = 0;
  const auto& bias = p.logit_bias;
  auto push_bias_below = [&](int64_t limit) {
    for (; b < bias.size() && bias[b].first < limit; ++b) {
      if (!in_range(bias[b].first)) continue;
      SamplePenalty e;
      e.token = bias[b].first;
      e.bias = bias[b].second;
      penalties->push_back(e);
    }
  };
  for (size_t i = 0; i < keys.size();) {
    const int32_t t = static_cast<int32_t>(keys[i] >> 1);
    push_bias_below(t);
    SamplePenalty e;
    e.token = t;
    e.in_seen = 1;
    for (; i < keys.size() && (keys[i] >> 1) == t; ++i) e.out_count += static_cast<int32_t>(keys[i] & 1);
    if (b < bias.size() && bias[b].first == t) e.bias = bias[b++].second;
    penalties->push_back(e);
  }
  push_bias_below(int64_t(V));
  row->pen_count = static_cast<int32_t>(penalties->size()) - row->pen_offset;
}

SampleResult to_sample_result(const SampleRowOut& o, int logprobs) {
  SampleResult r;
  r.token = o.token;
  if (logprobs >= 0) {
    r.logprob = o.logprob;
    for (int c = 0; c < o.n_top && c < kMaxTopLogprobs; ++c) r.top.push_back({o.top_token[c], o.top_logprob[c]});
  }
  return r;
}

Status launch_sample(const float* logits, int V, const SampleRowParams* rows, int R, const SamplePenalty* penalties,
                     const uint32_t* masks, float* scratch, SampleRowOut* out, cudaStream_t stream) {
  if (V <= 0 || V > kMaxSampleVocab)
    return invalid_argument("device sampler: vocabulary of " + std::to_string(V) + " entries (at most " +
                            std::to_string(kMaxSampleVocab) + ")");
  if (R == 0) return Status::ok();
  const size_t hist = kRadixBins * (sizeof(uint32_t) + sizeof(unsigned long long));
  const size_t smem = std::max(hist, size_t((V + 31) / 32) * sizeof(uint32_t));
  sample_kernel<<<R, kSampleThreads, smem, stream>>>(logits, V, rows, penalties, masks, scratch, out);
  MS_CUDA_LAUNCH_CHECK("sample_kernel");
  return Status::ok();
}

Status launch_sampler_uniform(const uint64_t* seeds, const uint64_t* indices, int n, double* out, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  sampler_uniform_kernel<<<(n + 255) / 256, 256, 0, stream>>>(seeds, indices, n, out);
  MS_CUDA_LAUNCH_CHECK("sampler_uniform_kernel");
  return Status::ok();
}

}  // namespace ms::gpu
