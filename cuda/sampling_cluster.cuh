// The machinery of the cluster sampler (sampling.cu, whose file comment explains the method):
// block and cluster reductions, the exchange through distributed shared memory, what a CTA
// sees of its slice, and the cluster-wide radix selection behind top-N, top_k and top_p.
// Included by sampling.cu only (everything is internal to it). nvcc only.
#pragma once

#include <cooperative_groups.h>

#include <climits>
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "runtime/sampling/philox.hpp"

namespace troupe::cuda {
namespace {

namespace cg = cooperative_groups;
using u64 = unsigned long long;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCluster = 16;  // the largest cluster Hopper allows (non-portable above 8)
constexpr int kCap = 1024;       // candidates gathered into every CTA of a cluster
constexpr double kMassScale = 1099511627776.0;  // 2^40
constexpr int kNoTokenLeft = kSampleNoTokenLeft;
constexpr int kLastCoarseLevel = 5;  // levels 0-1: distance bucket, 2-5: key, 6-9: token id
constexpr int kLastExactLevel = 9;

static_assert(kMaxTopLogprobs <= kCap, "a top-N list must fit the gathered candidates");
static_assert(kCap == 2 * kThreads, "mass_cut and bitonic_sort take two entries per thread");

// Written by its CTA, read by every CTA of the cluster after a cluster barrier.
struct Exchange {
  unsigned cnt[256];  // histogram of this CTA's slice (bin 255 stays 0: see cluster_select)
  u64 mass[256];
  u64 u[2];
  float f;
  int i;
};

struct alignas(16) Shared {
  Exchange ex[2];     // alternate exchanges use alternate halves: see Ctx::next_exchange
  u64 list[kCap];     // this CTA's candidates (read by the whole cluster)
  u64 sorted[kCap];   // every CTA's candidates, sorted (local)
  u64 bin_mass[256];  // summed histogram and its exclusive prefix (local)
  u64 bin_mass_before[256];
  unsigned bin_cnt[256];
  unsigned bin_cnt_before[256];
  u64 part_sum[kMaxCluster];   // in rank 0: each CTA's fixed-point sum of exp(raw - max)
  int part_rank[kMaxCluster];  // in rank 0: each CTA's count of tokens ranked before the token
  int offs[kMaxCluster + 1];
  u64 red_u64[kWarps];
  unsigned red_u32[kWarps];
  float red_f[kWarps];
  int red_i[kWarps];
  u64 tot_n, tot_m;
  float bc_f;
  int bc_i;
  int list_n;
  int sel;
};

constexpr size_t kSharedBytes = sizeof(Shared);

__device__ __forceinline__ int lane_id() {
  return threadIdx.x & 31;
}
__device__ __forceinline__ int warp_id() {
  return threadIdx.x >> 5;
}

__device__ __forceinline__ float sane(float v) {
  return v != v ? -INFINITY : v;
}

/// Monotone map of a float to uint32 (-0 folded into +0).
__device__ __forceinline__ uint32_t key_of(float f) {
  const uint32_t b = __float_as_uint(f + 0.0f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/// Inverse of key_of.
__device__ __forceinline__ float value_of_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/// round(e * 2^40) for e in [0, 1]. In float: e * 2^40 only moves the exponent (no rounding,
/// no overflow, nothing subnormal), so the float-to-integer rounding sees the same value that
/// the double product would hold, without the two double conversions.
__device__ __forceinline__ u64 mass_of(float e) {
  return __float2ull_rn(__fmul_rn(e, float(kMassScale)));
}

/// A candidate as one sortable word: key descending, then token id ascending.
__device__ __forceinline__ u64 entry_of(uint32_t key, int id) {
  return (u64(~key) << 32) | uint32_t(id);
}
__device__ __forceinline__ uint32_t entry_key(u64 s) {
  return ~uint32_t(s >> 32);
}
__device__ __forceinline__ int entry_id(u64 s) {
  return int(uint32_t(s));
}

/// (v1, i1) comes before (v2, i2): larger value, then lower id. A strict total order as long
/// as no value is NaN, so every lane of a butterfly ends with the same winner.
__device__ __forceinline__ bool before(float v1, int i1, float v2, int i2) {
  return v1 > v2 || (v1 == v2 && i1 < i2);
}

// ---- block reductions for kThreads threads; every thread gets the result ----

__device__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (before(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

__device__ void block_argmax(float& v, int& i, Shared& sh) {
  warp_argmax(v, i);
  __syncthreads();  // red_* may still be read by a previous reduction
  if (lane_id() == 0) {
    sh.red_f[warp_id()] = v;
    sh.red_i[warp_id()] = i;
  }
  __syncthreads();
  v = lane_id() < kWarps ? sh.red_f[lane_id()] : -INFINITY;
  i = lane_id() < kWarps ? sh.red_i[lane_id()] : INT_MAX;
  warp_argmax(v, i);
}

template <class T>
__device__ T warp_total(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class T>
__device__ T block_total(T v, T* scratch) {
  v = warp_total(v);
  __syncthreads();
  if (lane_id() == 0) scratch[warp_id()] = v;
  __syncthreads();
  v = lane_id() < kWarps ? scratch[lane_id()] : T(0);
  return warp_total(v);
}

__device__ u64 block_sum_u64(u64 v, Shared& sh) {
  return block_total<u64>(v, sh.red_u64);
}
__device__ unsigned block_sum_u32(unsigned v, Shared& sh) {
  return block_total<unsigned>(v, sh.red_u32);
}

/// Exclusive prefix sum over the block in thread order; `total` gets the sum of all.
template <class T>
__device__ T block_exclusive_scan(T v, T* scratch, T& total) {
  T incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane_id() >= o) incl += t;
  }
  __syncthreads();
  if (lane_id() == 31) scratch[warp_id()] = incl;
  __syncthreads();
  T before_warp = 0, all = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const T t = scratch[w];
    if (w < warp_id()) before_warp += t;
    all += t;
  }
  total = all;
  return before_warp + incl - v;
}

/// Sorts a[0, n) ascending (n a power of two <= 2 * kThreads).
__device__ void bitonic_sort(u64* a, int n) {
  for (int k = 2; k <= n; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n; i += kThreads) {
        const int p = i ^ j;
        if (p > i) {
          const u64 x = a[i], y = a[p];
          if ((x > y) == ((i & k) == 0)) {
            a[i] = y;
            a[p] = x;
          }
        }
      }
      __syncthreads();
    }
}

// ---- the cluster ----

struct Ctx {
  Shared& sh;
  int csize;  // CTAs in the cluster
  int rank;   // this CTA's place in it
  int phase;  // exchanges so far

  /// The exchange buffer for the next exchange. Alternating halves lets a CTA fill the next
  /// one while slower CTAs still read the previous one: a CTA writes half h again only after
  /// the barrier of the exchange in between, which every CTA reaches only after its reads.
  __device__ Exchange& next_exchange() { return sh.ex[phase++ & 1]; }

  template <class T>
  __device__ T* remote(T* p, int r) const {
    return cg::this_cluster().map_shared_rank(p, r);
  }
  __device__ void sync() const { cg::this_cluster().sync(); }
};

/// After a barrier: the cluster-wide argmax of the (f, i) that every CTA left in `ex`.
__device__ void cluster_argmax(Exchange& ex, Ctx& cx, float& v, int& i) {
  if (warp_id() == 0) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    if (lane_id() < cx.csize) {
      const Exchange* rx = cx.remote(&ex, lane_id());
      bv = rx->f;
      bi = rx->i;
    }
    warp_argmax(bv, bi);
    if (lane_id() == 0) {
      cx.sh.bc_f = bv;
      cx.sh.bc_i = bi;
    }
  }
  __syncthreads();
  v = cx.sh.bc_f;
  i = cx.sh.bc_i;
}

/// Block argmax, then cluster argmax: one exchange.
__device__ void all_argmax(float& v, int& i, Ctx& cx) {
  block_argmax(v, i, cx.sh);
  Exchange& ex = cx.next_exchange();
  if (threadIdx.x == 0) {
    ex.f = v;
    ex.i = i;
  }
  cx.sync();
  cluster_argmax(ex, cx, v, i);
}

// ---- what a CTA sees of its slice ----

/// The CTA's part [lo, lo + n) of a row: cached in shared memory, or in global memory.
template <bool kCached>
struct Slice {
  const float* s;  // [n] shared, sanitised (kCached)
  const float* g;  // [n] global (!kCached)
  int lo, n;
  __device__ __forceinline__ float at(int j) const {
    if constexpr (kCached)
      return s[j];
    else
      return sane(__ldg(g + j));
  }
  /// Elements 4q .. 4q + 3 (those at or past n are -inf).
  __device__ __forceinline__ void at4(int q, float (&v)[4]) const {
    if constexpr (kCached) {
      const float4 t = reinterpret_cast<const float4*>(s)[q];  // the cache is padded to 4
      v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
      for (int c = 0; c < 4; ++c)
        if (4 * q + c >= n) v[c] = -INFINITY;
    } else {
      for (int c = 0; c < 4; ++c) v[c] = 4 * q + c < n ? sane(__ldg(g + 4 * q + c)) : -INFINITY;
    }
  }
};

/// Raw logits for top-N: every element takes part.
template <bool kCached>
struct RawSource {
  Slice<kCached> x;
  __device__ int n() const { return x.n; }
  __device__ int lo() const { return x.lo; }
  __device__ __forceinline__ bool eval_value(float xv, float& v, float& e) const {
    v = xv;
    e = 0.0f;
    return true;
  }
  __device__ __forceinline__ bool eval(int j, float& v, float& e) const {
    return eval_value(x.at(j), v, e);
  }
};

/// Tempered processed logits y = x / T for the filters and the race; an element takes part
/// while it is alive (not -inf, p >= min_p * p_max) and its key is >= k_thr.
template <bool kCached>
struct TemperedSource {
  Slice<kCached> x;
  float temperature;
  bool unit_temperature;  // x / 1 == x: skip the division
  float y_max;
  float min_p;
  uint32_t k_thr;
  bool need_e;  // e = exp(y - y_max) is needed (min_p, masses, the race)
  __device__ int n() const { return x.n; }
  __device__ int lo() const { return x.lo; }
  __device__ __forceinline__ bool eval_value(float xv, float& y, float& e) const {
    y = unit_temperature ? xv : __fdiv_rn(xv, temperature);
    e = 0.0f;
    if (!(y > -INFINITY)) return false;
    if (need_e) e = expf(__fsub_rn(y, y_max));
    if (min_p > 0.0f && !(e >= min_p)) return false;
    return key_of(y) >= k_thr;
  }
  __device__ __forceinline__ bool eval(int j, float& y, float& e) const {
    return eval_value(x.at(j), y, e);
  }
};

// ---- cluster-wide selection (top-N, top_k, top_p) ----

struct SelectSpec {
  bool by_mass;  // false: the k-th element (count); true: the top_p cut (mass)
  u64 k;
  float top_p;
  bool exact;    // count rule down to single elements (top-N needs the exact set)
  float vmax;    // the largest value (bucket origin)
  bool fine_ok;  // vmax is finite: use the distance buckets
};

struct Selection {
  bool all;      // count rule: fewer than k elements take part, so nothing is cut
  uint32_t thr;  // the smallest key kept
  int n;         // sh.sorted[0, n) holds every kept element, most likely first; -1: not gathered
};

/// An element's place in the composite order: distance bucket, then entry (key, id).
struct Digits {
  uint32_t fine;  // min(65535, (vmax - v) * 2048): monotone non-increasing in v
  u64 s;
};

__device__ __forceinline__ Digits digits_of(float v, int id, const SelectSpec& sp) {
  Digits d;
  d.fine = 0;
  if (sp.fine_ok) {
    const float t = __fmul_rn(__fsub_rn(sp.vmax, v), 2048.0f);
    d.fine = t < 65535.0f ? __float2uint_rz(t) : 65535u;
  }
  d.s = entry_of(key_of(v), id);
  return d;
}

// Levels: 0 and 1 take the high and low byte of `fine`; level L >= 2 takes byte L - 2 (from
// the top) of the entry. f_sel holds the selected fine digits, s_pref the selected entry bytes.
__device__ __forceinline__ int digit(int level, const Digits& d) {
  if (level == 0) return int(d.fine >> 8);
  if (level == 1) return int(d.fine & 255u);
  return int((d.s >> (64 - 8 * (level - 1))) & 255u);
}

/// The element lies in the range that `level` splits (all previous digits selected).
__device__ __forceinline__ bool in_range(int level, const Digits& d, uint32_t f_sel, u64 s_pref,
                                         bool fine_ok) {
  if (level == 0) return true;
  if (level == 1) return (d.fine >> 8) == (f_sel >> 8);
  if (fine_ok && d.fine != f_sel) return false;
  return level == 2 || (d.s >> (64 - 8 * (level - 2))) == s_pref;
}

/// The element comes before or inside the bin just selected at `level` (s_pref / f_sel
/// include that bin).
__device__ __forceinline__ bool at_or_before(int level, const Digits& d, uint32_t f_sel, u64 s_pref,
                                             bool fine_ok) {
  if (level == 0) return (d.fine >> 8) <= (f_sel >> 8);
  if (level == 1) return d.fine <= f_sel;
  if (fine_ok && d.fine != f_sel) return d.fine < f_sel;
  return (d.s >> (64 - 8 * (level - 1))) <= s_pref;
}

/// Every element of the cluster at or before the selected bin, sorted into sh.sorted; returns
/// how many (the caller checked that they fit).
template <class Src>
__device__ int gather(const Src& src, int level, uint32_t f_sel, u64 s_pref, const SelectSpec& sp,
                      Ctx& cx) {
  Shared& sh = cx.sh;
  if (threadIdx.x == 0) sh.list_n = 0;
  __syncthreads();
  const int lane = lane_id();
  for (int base = 0; base < src.n(); base += kThreads) {  // uniform: every lane votes
    const int j = base + int(threadIdx.x);
    bool take = false;
    u64 s = 0;
    if (j < src.n()) {
      float v, e;
      if (src.eval(j, v, e)) {
        const Digits d = digits_of(v, src.lo() + j, sp);
        take = at_or_before(level, d, f_sel, s_pref, sp.fine_ok);
        s = d.s;
      }
    }
    const unsigned ball = __ballot_sync(0xffffffffu, take);
    if (ball != 0) {
      int first = 0;
      if (lane == 0) first = atomicAdd(&sh.list_n, __popc(ball));
      first = __shfl_sync(0xffffffffu, first, 0);
      if (take) {
        const int slot = first + __popc(ball & ((1u << lane) - 1u));
        if (slot < kCap) sh.list[slot] = s;
      }
    }
  }
  cx.sync();  // every CTA's list is complete
  if (warp_id() == 0) {
    int incl = lane < cx.csize ? min(*cx.remote(&sh.list_n, lane), kCap) : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int t = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += t;
    }
    if (lane < cx.csize) sh.offs[lane + 1] = incl;
    if (lane == 0) sh.offs[0] = 0;
  }
  __syncthreads();
  const int total = min(sh.offs[cx.csize], kCap);
  for (int t = threadIdx.x; t < total; t += kThreads) {
    int r = 0;
    while (r + 1 < cx.csize && sh.offs[r + 1] <= t) ++r;
    sh.sorted[t] = cx.remote(sh.list, r)[t - sh.offs[r]];
  }
  int padded = 1;
  while (padded < total) padded <<= 1;
  for (int t = total + threadIdx.x; t < padded; t += kThreads) sh.sorted[t] = ~0ull;
  __syncthreads();
  bitonic_sort(sh.sorted, padded);
  return total;
}

/// Number of entries of sh.sorted[0, n) whose key is >= thr (they come first).
__device__ int count_at_least(int n, uint32_t thr, Shared& sh) {
  const int i0 = 2 * int(threadIdx.x), i1 = i0 + 1;
  const unsigned c = (i0 < n && entry_key(sh.sorted[i0]) >= thr ? 1u : 0u) +
                     (i1 < n && entry_key(sh.sorted[i1]) >= thr ? 1u : 0u);
  return int(block_sum_u32(c, sh));
}

/// The top_p cut over sh.sorted[0, n) (every admitted element, most likely first): keeps each
/// key whose strictly more likely mass is < target (top_p times the total of the n entries
/// when `target` < 0). Returns how many entries stay; `thr` gets the smallest kept key.
__device__ int mass_cut(int n, double target, float top_p, float y_max, Shared& sh, uint32_t& thr) {
  const int i0 = 2 * int(threadIdx.x), i1 = i0 + 1;
  const u64 m0 =
      i0 < n ? mass_of(expf(__fsub_rn(value_of_key(entry_key(sh.sorted[i0])), y_max))) : 0ull;
  const u64 m1 =
      i1 < n ? mass_of(expf(__fsub_rn(value_of_key(entry_key(sh.sorted[i1])), y_max))) : 0ull;
  u64 total = 0;
  const u64 before0 = block_exclusive_scan<u64>(m0 + m1, sh.red_u64, total);
  const u64 before1 = before0 + m0;
  if (target < 0.0) target = double(top_p) * double(total);
  const unsigned kept = (i0 < n && double(before0) < target ? 1u : 0u) +
                        (i1 < n && double(before1) < target ? 1u : 0u);
  const int c = int(block_sum_u32(kept, sh));
  thr = entry_key(sh.sorted[max(c, 1) - 1]);  // c >= 1: the first entry has nothing before it
  return count_at_least(n, thr, sh);
}

/// The threshold of a count rule (the k-th element's key) or of the top_p mass rule over the
/// elements `src` admits, across the cluster. See the file comment.
template <class Src>
__device__ Selection cluster_select(const Src& src, const SelectSpec& sp, Ctx& cx) {
  Shared& sh = cx.sh;
  const int tid = threadIdx.x;
  const int first = sp.fine_ok ? 0 : 2;
  const int last = sp.exact ? kLastExactLevel : kLastCoarseLevel;
  uint32_t f_sel = 0;
  u64 s_pref = 0;
  u64 better_n = 0, better_m = 0;  // elements (and their mass) before the current range
  double target = 0.0;
  for (int level = first;; ++level) {
    Exchange& ex = cx.next_exchange();
    for (int b = tid; b < 256; b += kThreads) {
      ex.cnt[b] = 0;
      ex.mass[b] = 0;
    }
    __syncthreads();
    // Bin 255 (the far tail at level 0, where most of a row lands) gets no atomics: it is the
    // range's total minus the other bins. Runs of one bin are added in one atomic.
    u64 tot_n = 0, tot_m = 0;
    int run_d = -1;
    unsigned run_n = 0;
    u64 run_m = 0;
    for (int j = tid; j < src.n(); j += kThreads) {
      float v, e;
      if (!src.eval(j, v, e)) continue;
      const Digits d = digits_of(v, src.lo() + j, sp);
      if (!in_range(level, d, f_sel, s_pref, sp.fine_ok)) continue;
      const int dg = digit(level, d);
      const u64 m = sp.by_mass ? mass_of(e) : 0ull;
      ++tot_n;
      tot_m += m;
      if (dg == 255) continue;
      if (dg != run_d) {
        if (run_d >= 0) {
          atomicAdd(&ex.cnt[run_d], run_n);
          if (sp.by_mass) atomicAdd(&ex.mass[run_d], run_m);
        }
        run_d = dg;
        run_n = 0;
        run_m = 0;
      }
      ++run_n;
      run_m += m;
    }
    if (run_d >= 0) {
      atomicAdd(&ex.cnt[run_d], run_n);
      if (sp.by_mass) atomicAdd(&ex.mass[run_d], run_m);
    }
    tot_n = block_sum_u64(tot_n, sh);
    tot_m = block_sum_u64(tot_m, sh);
    if (tid == 0) {
      ex.u[0] = tot_n;
      ex.u[1] = tot_m;
    }
    cx.sync();

    // Sum the histograms over the cluster (fixed rank order; integers, so exact).
    unsigned c = 0;
    u64 m = 0, all_n = 0, all_m = 0;
    if (tid < 255) {
      // Unrolled over the largest cluster so that every remote load is in flight at once.
#pragma unroll
      for (int r = 0; r < kMaxCluster; ++r) {
        if (r < cx.csize) {
          const Exchange* rx = cx.remote(&ex, r);
          c += rx->cnt[tid];
          m += rx->mass[tid];
        }
      }
    } else if (tid == 255) {
#pragma unroll
      for (int r = 0; r < kMaxCluster; ++r) {
        if (r < cx.csize) {
          const Exchange* rx = cx.remote(&ex, r);
          all_n += rx->u[0];
          all_m += rx->u[1];
        }
      }
    }
    unsigned c_total = 0;
    u64 m_total = 0;
    const unsigned c_before = block_exclusive_scan<unsigned>(c, sh.red_u32, c_total);
    const u64 m_before = block_exclusive_scan<u64>(m, sh.red_u64, m_total);
    if (tid == 255) {
      c = unsigned(all_n) - c_before;
      m = all_m - m_before;
      sh.tot_n = all_n;
      sh.tot_m = all_m;
    }
    if (tid < 256) {
      sh.bin_cnt[tid] = c;
      sh.bin_cnt_before[tid] = c_before;
      sh.bin_mass[tid] = m;
      sh.bin_mass_before[tid] = m_before;
    }
    if (tid == 0) sh.sel = -1;
    __syncthreads();
    if (level == first) {
      if (!sp.by_mass && sh.tot_n < sp.k) return Selection{true, 0u, -1};
      if (sp.by_mass) target = double(sp.top_p) * double(sh.tot_m);
    }
    // Count rule: the first bin where the running count reaches k. Mass rule: the last
    // non-empty bin whose strictly-earlier mass is still below target.
    if (tid < 256) {
      if (!sp.by_mass) {
        if (better_n + c_before < sp.k && better_n + c_before + c >= sp.k) sh.sel = tid;
      } else if (c > 0 && double(better_m + m_before) < target) {
        atomicMax(&sh.sel, tid);
      }
    }
    __syncthreads();
    const int sel = sh.sel;
    if (sel < 0) return Selection{true, 0u, -1};  // unreachable: the range always qualifies
    better_n += sh.bin_cnt_before[sel];
    better_m += sh.bin_mass_before[sel];
    const u64 candidates = better_n + sh.bin_cnt[sel];
    if (level == 0)
      f_sel = uint32_t(sel) << 8;
    else if (level == 1)
      f_sel |= uint32_t(sel);
    else
      s_pref = (s_pref << 8) | u64(sel);

    if (candidates <= u64(kCap)) {
      const int n = gather(src, level, f_sel, s_pref, sp, cx);
      uint32_t thr = 0;
      int kept = 0;
      if (sp.by_mass) {
        kept = mass_cut(n, target, sp.top_p, sp.vmax, sh, thr);
      } else {
        thr = entry_key(sh.sorted[min(int(sp.k), max(n, 1)) - 1]);
        kept = count_at_least(n, thr, sh);
      }
      return Selection{false, thr, kept};
    }
    if (level == last) return Selection{false, ~uint32_t(s_pref), -1};
    // Not reached for exact selections: at level 9 a bin is one element, so candidates <= k.
  }
}

}  // namespace
}  // namespace troupe::cuda
