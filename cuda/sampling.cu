// Sampling on the GPU, one CTA of 1024 threads per row, in sampling_row.hpp's order:
//
//   raw log-softmax (logprob and rank of the sampled token, top-N) -> logit bias and penalties
//   (applied by mods_kernel into a scratch copy of the row, only for rows that have any) ->
//   greedy argmax, or: temperature -> min_p -> top_k -> top_p -> exponential race with the
//   same Philox draws as the CPU reference (argmax_i p_i / q_i, q_i = -log u(seed, offset, i)).
//
// No sort: top_k and top_p become thresholds on the sortable bit pattern ("key") of the
// tempered logit, found by a 4-level radix search (8 bits a level) over the row. top_k counts
// elements; top_p sums probability mass in 2^-40 fixed point (integer sums: deterministic and
// order-independent). The race then takes the argmax over the surviving tokens. Ties in every
// argmax go to the lower token id; ranks order tokens by (logit desc, id asc), so the top-N
// list holds ranks 1..N.
//
// Float operations that the CPU reference also performs (bias add, penalties, temperature) use
// explicitly rounded intrinsics so that nvcc cannot contract them into FMAs.
#include <climits>

#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "runtime/sampling/philox.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr double kMassScale = 1099511627776.0;  // 2^40
constexpr int kNoTokenLeft = kSampleNoTokenLeft;

struct Shared {
  float red_f[32];
  int red_i[32];
  unsigned long long red_u[32];
  unsigned hist_count[256];
  unsigned long long hist_mass[256];
  int sel_bin;
  long long sel_rest;           // top-k: elements still to skip
  unsigned long long sel_mass;  // top-p: admitted mass above the selected bin
  int n_cand;
  int warp_off[kWarps + 1];
  float cand_v[kMaxTopLogprobs];
  int cand_i[kMaxTopLogprobs];
};

__device__ __forceinline__ float sane(float v) {
  return v != v ? -INFINITY : v;
}

/// Monotone map of a float to uint32 (-0 folded into +0).
__device__ __forceinline__ uint32_t key_of(float f) {
  const uint32_t b = __float_as_uint(f + 0.0f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ uint64_t mass_of(float e) {
  return uint64_t(__double2ull_rn(double(e) * kMassScale));
}

// ---- block reductions for 1024 threads (sh.red_* as scratch) ----

__device__ int block_sum_int(int v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) sh.red_i[warp] = v;
  __syncthreads();
  v = sh.red_i[lane];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ unsigned long long block_sum_u64(unsigned long long v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) sh.red_u[warp] = v;
  __syncthreads();
  v = sh.red_u[lane];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// (value, index) with the largest value, lower index on ties; every thread gets the winner.
__device__ void block_argmax(float& v, int& idx, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) {
      v = ov;
      idx = oi;
    }
  }
  __syncthreads();
  if (lane == 0) {
    sh.red_f[warp] = v;
    sh.red_i[warp] = idx;
  }
  __syncthreads();
  v = sh.red_f[lane];
  idx = sh.red_i[lane];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) {
      v = ov;
      idx = oi;
    }
  }
}

/// Greedy: the first index of the largest processed logit; -1 when every logit is -inf/NaN.
__device__ int row_argmax(const float* x, int vocab, Shared& sh) {
  float best = -INFINITY;
  int idx = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = sane(x[i]);
    if (v > best || (v == best && i < idx)) {
      best = v;
      idx = i;
    }
  }
  block_argmax(best, idx, sh);
  return best == -INFINITY || idx == INT_MAX ? kNoTokenLeft : idx;
}

// What the filters see of token i: its tempered logit y, key and unnormalised probability e.
struct Tempered {
  const float* x;
  float temperature;
  float y_max;
  float min_p;
  __device__ __forceinline__ float y(int i) const { return __fdiv_rn(sane(x[i]), temperature); }
  __device__ __forceinline__ float e(float yv) const { return expf(__fsub_rn(yv, y_max)); }
  /// Not banned (-inf) and, for min_p: p_i >= min_p * p_max  <=>  exp(y_i - y_max) >= min_p.
  __device__ __forceinline__ bool alive(float yv, float ev) const {
    return yv > -INFINITY && (min_p <= 0.0f || ev >= min_p);
  }
};

/// Key of the k-th largest value among the elements `keep` admits (its key and value in
/// `key_fn`), or 0 (admit everything) when fewer than k are admitted.
template <class KeyFn, class KeepFn>
__device__ uint32_t radix_kth_largest(int vocab, int k, KeyFn key_fn, KeepFn keep, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  long long rest = k;  // how many of the elements matching `prefix` are still above the target
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.hist_count[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      if (!keep(i)) continue;
      const uint32_t key = key_fn(i);
      if ((key & mask) == prefix) atomicAdd(&sh.hist_count[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      long long above = 0;
      int sel = -1;
      for (int b = 255; b >= 0; --b) {
        if (above + sh.hist_count[b] >= rest) {
          sel = b;
          break;
        }
        above += sh.hist_count[b];
      }
      sh.sel_bin = sel;
      sh.sel_rest = sel < 0 ? 0 : rest - above;
    }
    __syncthreads();
    const int sel = sh.sel_bin;
    rest = sh.sel_rest;
    if (sel < 0) return 0;  // fewer than k admitted (only possible at the first level)
    prefix |= uint32_t(sel) << shift;
    mask |= 255u << shift;
  }
  return prefix;
}

/// top_p threshold: the smallest key whose elements have strictly-more-likely mass below
/// top_p * total, among the elements `keep` admits. Never excludes the most likely token.
template <class KeepFn>
__device__ uint32_t radix_top_p(int vocab, const Tempered& tp, float top_p, KeepFn keep,
                                Shared& sh) {
  unsigned long long total = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float y = tp.y(i);
    const float e = tp.e(y);
    if (keep(i, y, e)) total += mass_of(e);
  }
  total = block_sum_u64(total, sh);
  const double target = double(top_p) * double(total);
  uint32_t prefix = 0, mask = 0;
  unsigned long long above = 0;  // mass of admitted elements with keys above the prefix range
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) {
      sh.hist_count[b] = 0;
      sh.hist_mass[b] = 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float y = tp.y(i);
      const uint32_t key = key_of(y);
      if ((key & mask) != prefix) continue;
      const float e = tp.e(y);
      if (!keep(i, y, e)) continue;
      const unsigned b = (key >> shift) & 255u;
      atomicAdd(&sh.hist_count[b], 1u);
      atomicAdd(&sh.hist_mass[b], (unsigned long long)mass_of(e));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // Bin b holds a kept element iff the mass above it is < target; take the lowest such
      // non-empty bin (the mass above only grows as b falls).
      unsigned long long run = above;
      int sel = -1;
      unsigned long long sel_above = above;
      for (int b = 255; b >= 0; --b) {
        if (sh.hist_count[b] == 0) continue;
        if (double(run) < target) {
          sel = b;
          sel_above = run;
        } else {
          break;
        }
        run += sh.hist_mass[b];
      }
      sh.sel_bin = sel;
      sh.sel_mass = sel_above;
    }
    __syncthreads();
    const int sel = sh.sel_bin;
    if (sel < 0) return 0;  // no admitted element at all (cannot happen: the max is admitted)
    above = sh.sel_mass;
    prefix |= uint32_t(sel) << shift;
    mask |= 255u << shift;
  }
  return prefix;
}

__device__ int choose_token(const float* x, int vocab, const SampleRowParams& p, Shared& sh) {
  if (p.greedy) return row_argmax(x, vocab, sh);
  float x_max = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) x_max = fmaxf(x_max, sane(x[i]));
  x_max = block_max(x_max, sh.red_f);
  if (x_max == -INFINITY) return kNoTokenLeft;  // every token banned
  Tempered tp{x, p.temperature, __fdiv_rn(x_max, p.temperature), p.min_p};

  uint32_t threshold = 0;
  if (p.top_k > 0 && p.top_k < vocab) {
    threshold = radix_kth_largest(
        vocab, p.top_k, [&](int i) { return key_of(tp.y(i)); },
        [&](int i) {
          const float y = tp.y(i);
          return tp.alive(y, tp.e(y));
        },
        sh);
  }
  if (p.top_p < 1.0f) {
    const uint32_t k_thr = threshold;
    threshold = radix_top_p(
        vocab, tp, p.top_p,
        [&](int, float y, float e) { return tp.alive(y, e) && key_of(y) >= k_thr; }, sh);
  }

  float best = -1.0f;
  int idx = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float y = tp.y(i);
    const float e = tp.e(y);
    if (!tp.alive(y, e) || key_of(y) < threshold) continue;
    const float q = -logf(philox::uniform(p.seed, p.offset, uint32_t(i)));
    const float score = e / q;
    if (score > best || (score == best && i < idx)) {
      best = score;
      idx = i;
    }
  }
  block_argmax(best, idx, sh);
  return idx == INT_MAX ? kNoTokenLeft : idx;
}

/// Exclusive position of this thread's flag among the block's flags, in thread order; the
/// total goes to `total`.
__device__ int block_rank(bool flag, int& total, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  __syncthreads();
  if (lane == 0) sh.warp_off[warp] = __popc(ballot);
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int c = sh.warp_off[w];
      sh.warp_off[w] = run;
      run += c;
    }
    sh.warp_off[kWarps] = run;
  }
  __syncthreads();
  total = sh.warp_off[kWarps];
  return sh.warp_off[warp] + __popc(ballot & ((1u << lane) - 1u));
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* __restrict__ logits, int vocab,
                  const SampleRowParams* __restrict__ rows, const float* __restrict__ scratch,
                  int32_t* __restrict__ results) {
  __shared__ Shared sh;
  const int r = blockIdx.x;
  const SampleRowParams p = rows[r];
  const float* raw = logits + int64_t(r) * vocab;
  const float* x = p.scratch_row >= 0 ? scratch + int64_t(p.scratch_row) * vocab : raw;

  // Raw log-softmax normaliser.
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) mx = fmaxf(mx, sane(raw[i]));
  mx = block_max(mx, sh.red_f);
  int32_t* res = results + p.out_offset;
  if (mx == -INFINITY || mx == INFINITY) {  // as the CPU reference: no usable distribution
    if (threadIdx.x == 0) {
      res[0] = mx == INFINITY ? kSampleRawInf : kSampleRawAllNegInf;
      res[3] = 0;
    }
    return;
  }
  const float shift = mx;
  float se = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) se += expf(sane(raw[i]) - shift);
  se = block_sum(se, sh.red_f);
  const float lse = shift + logf(se);

  const int token = choose_token(x, vocab, p, sh);
  if (token < 0) {
    if (threadIdx.x == 0) {
      res[0] = token;
      res[3] = 0;
    }
    return;
  }

  // Logprob and rank of the sampled token under the raw distribution.
  const float raw_t = sane(raw[token]);
  int better = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = sane(raw[i]);
    better += (v > raw_t || (v == raw_t && i < token)) ? 1 : 0;
  }
  better = block_sum_int(better, sh);
  const int n_top = p.num_logprobs > 0 ? p.num_logprobs : 0;
  if (threadIdx.x == 0) {
    res[0] = token;
    res[1] = __float_as_int(raw_t - lse);
    res[2] = better + 1;
    res[3] = n_top;
  }
  if (n_top == 0) return;

  // Top-N raw logprobs: the N-th largest key, then the larger elements (fewer than N, any
  // order, ranked below) and the ties at that key in id order until N are taken.
  const uint32_t kn = radix_kth_largest(
      vocab, n_top, [&](int i) { return key_of(sane(raw[i])); }, [](int) { return true; }, sh);
  if (threadIdx.x == 0) sh.n_cand = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = sane(raw[i]);
    if (key_of(v) > kn) {
      const int slot = atomicAdd(&sh.n_cand, 1);
      if (slot < kMaxTopLogprobs) {
        sh.cand_v[slot] = v;
        sh.cand_i[slot] = i;
      }
    }
  }
  __syncthreads();
  const int n_gt = min(sh.n_cand, n_top);
  int filled = n_gt;
  for (int c0 = 0; c0 < vocab && filled < n_top; c0 += kThreads) {
    const int i = c0 + threadIdx.x;
    const float v = i < vocab ? sane(raw[i]) : -INFINITY;
    const bool tie = i < vocab && key_of(v) == kn;
    int total = 0;
    const int pos = block_rank(tie, total, sh);
    if (tie && filled + pos < n_top) {
      sh.cand_v[filled + pos] = v;
      sh.cand_i[filled + pos] = i;
    }
    filled += total;  // the same on every thread
  }
  __syncthreads();
  int32_t* top = res + kSampleResultHeader;
  for (int c = threadIdx.x; c < n_top; c += kThreads) {
    const float v = sh.cand_v[c];
    const int i = sh.cand_i[c];
    int pos = c;
    if (c < n_gt) {  // rank among the strictly larger ones
      pos = 0;
      for (int o = 0; o < n_gt; ++o) {
        const float ov = sh.cand_v[o];
        pos += (ov > v || (ov == v && sh.cand_i[o] < i)) ? 1 : 0;
      }
    }
    top[3 * pos] = i;
    top[3 * pos + 1] = __float_as_int(v - lse);
    top[3 * pos + 2] = pos + 1;
  }
}

// Rows with a bias or penalties: scratch row = raw row, then each modified token rewritten.
__global__ void __launch_bounds__(kThreads)
    mods_kernel(const float* __restrict__ logits, int vocab,
                const SampleRowParams* __restrict__ rows, const SampleMod* __restrict__ mods,
                const float* __restrict__ biases, float* __restrict__ scratch) {
  const SampleRowParams p = rows[blockIdx.x];
  if (p.scratch_row < 0) return;
  const float* raw = logits + int64_t(blockIdx.x) * vocab;
  float* x = scratch + int64_t(p.scratch_row) * vocab;
  for (int i = threadIdx.x; i < vocab; i += kThreads) x[i] = raw[i];
  __syncthreads();
  for (int m = threadIdx.x; m < p.mod_count; m += kThreads) {
    const SampleMod mod = mods[p.mod_begin + m];
    // Order as vLLM: logit bias, then repetition, frequency and presence penalties.
    float v = sane(raw[mod.token]);
    for (int b = 0; b < mod.bias_count; ++b) v = __fadd_rn(v, biases[mod.bias_begin + b]);
    if (mod.in_history && p.repetition_penalty != 1.0f)
      v = v > 0.0f ? __fdiv_rn(v, p.repetition_penalty) : __fmul_rn(v, p.repetition_penalty);
    if (mod.output_count > 0) {
      v = __fsub_rn(v, __fmul_rn(p.frequency_penalty, float(mod.output_count)));
      v = __fsub_rn(v, p.presence_penalty);
    }
    x[mod.token] = v;
  }
}

}  // namespace

void launch_sample(const float* logits, int64_t vocab, int32_t num_rows,
                   const SampleRowParams* rows, const SampleMod* mods, const float* biases,
                   float* scratch, int32_t num_scratch_rows, int32_t* results,
                   cudaStream_t stream) {
  if (num_rows <= 0 || vocab <= 0) return;
  if (num_scratch_rows > 0)
    mods_kernel<<<unsigned(num_rows), kThreads, 0, stream>>>(logits, int(vocab), rows, mods, biases,
                                                             scratch);
  sample_kernel<<<unsigned(num_rows), kThreads, 0, stream>>>(logits, int(vocab), rows, scratch,
                                                             results);
}

}  // namespace troupe::cuda
