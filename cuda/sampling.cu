// Sampling on the GPU, in sampling_row.hpp's order, one thread-block cluster per row:
//
//   raw log-softmax (logprob and rank of the sampled token, top-N) -> logit bias and penalties
//   -> greedy argmax, or: temperature -> min_p -> top_k -> top_p -> exponential race with the
//   same Philox draws as the CPU reference (argmax_i p_i / q_i, q_i = -log u(seed, offset, i)).
//
// Layout. The C CTAs of a cluster (C = 1..16, chosen per launch by plan_sample) split the row
// into C contiguous slices. A CTA loads its slice once into shared memory ("cached" plans;
// rows too long for that read global memory on every pass instead) and the CTAs exchange
// partial results through distributed shared memory, one cluster barrier per exchange. Logit
// bias and penalties are applied to the cached slice in place (uncached plans: mods_kernel
// writes a processed copy of the row first); the raw values of the few modified tokens are
// read back from global memory where they are needed (rank).
//
// Selection without a sort of the row. top_k, top_p and top-N are thresholds on a composite
// order of the elements: first a 16-bit bucket of the distance to the row's maximum (1/2048
// wide, so the first 8 bits already split the 32 units below the maximum into 1/8-wide bins),
// then the sortable bit pattern ("key") of the value, then the token id. A radix search walks
// that order 8 bits a level: each CTA histograms its slice, the histograms are summed over the
// cluster, and the bin holding the threshold is picked (by count for top_k / top-N; by
// probability mass in 2^-40 fixed point for top_p). As soon as the elements at or before that
// bin number at most kCap (normally after the first level), every CTA gathers them from all
// slices, sorts them and finishes locally: top_k, top_p and the race then touch only those
// candidates. Rows with more candidates than that (many near-equal logits, top_k > kCap) keep
// refining to an exact key and race over the whole slice.
//
// Determinism: every decision is an integer count or sum, a max, or an argmax with ties to the
// lower id, so the result does not depend on how the row is split: a row draws the same token,
// with the same logprob bits, in any batch and under any plan. The raw log-softmax normaliser
// is a 2^-40 fixed-point sum for the same reason. Float operations that the CPU reference also
// performs (bias add, penalties, temperature) use explicitly rounded intrinsics so that nvcc
// cannot contract them into FMAs.
#include <atomic>
#include <climits>
#include <mutex>
#include <vector>

#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/sampling_cluster.cuh"
#include "runtime/sampling/philox.hpp"

namespace troupe::cuda {
namespace {

constexpr int kMaxSlice = 40960;       // logits a CTA caches in shared memory (160 KB)
constexpr int kTargetSlice = 16384;    // slice size aimed at when rows fill the GPU
constexpr int kMinSpreadSlice = 2048;  // no smaller slices just to spread few rows wider

// ---- per-row phases ----

/// vLLM's order for one modified token: logit bias, then repetition, frequency and presence
/// penalties; `v` is its raw logit.
__device__ float modified_logit(float v, const SampleMod& mod, const SampleRowParams& p,
                                const float* biases) {
  for (int b = 0; b < mod.bias_count; ++b) v = __fadd_rn(v, biases[mod.bias_begin + b]);
  if (mod.in_history && p.repetition_penalty != 1.0f)
    v = v > 0.0f ? __fdiv_rn(v, p.repetition_penalty) : __fmul_rn(v, p.repetition_penalty);
  if (mod.output_count > 0) {
    v = __fsub_rn(v, __fmul_rn(p.frequency_penalty, float(mod.output_count)));
    v = __fsub_rn(v, p.presence_penalty);
  }
  return sane(v);
}

/// The exponential race over sh.sorted[0, n); every CTA computes the same winner.
__device__ int race_sorted(int n, float y_max, const SampleRowParams& p, Shared& sh) {
  float best = -INFINITY;
  int idx = INT_MAX;
  for (int t = threadIdx.x; t < n; t += kThreads) {
    const u64 s = sh.sorted[t];
    const int i = entry_id(s);
    const float e = expf(__fsub_rn(value_of_key(entry_key(s)), y_max));
    const float q = -logf(philox::uniform(p.seed, p.offset, uint32_t(i)));
    const float score = e / q;
    if (score == score && before(score, i, best, idx)) {
      best = score;
      idx = i;
    }
  }
  block_argmax(best, idx, sh);
  return idx == INT_MAX ? kNoTokenLeft : idx;
}

/// The exponential race over the whole slice (groups of 4 tokens share one Philox block).
template <bool kCached>
__device__ int race_slice(const TemperedSource<kCached>& src, const SampleRowParams& p, Ctx& cx) {
  float best = -INFINITY;
  int idx = INT_MAX;
  const int groups = (src.n() + 3) / 4;
  for (int g = threadIdx.x; g < groups; g += kThreads) {
    float xv[4], e[4];
    bool ok[4];
    bool any = false;
    src.x.at4(g, xv);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      float y;
      ok[c] = src.eval_value(xv[c], y, e[c]);
      any = any || ok[c];
    }
    if (!any) continue;
    const uint32_t first = uint32_t(src.lo() + 4 * g);  // a multiple of 4: lane c is entry c
    const philox::U4 r = philox::philox4x32_10(
        philox::U4{first >> 2, 0u, uint32_t(p.offset), uint32_t(p.offset >> 32)}, uint32_t(p.seed),
        uint32_t(p.seed >> 32));
    const uint32_t bits[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (!ok[c]) continue;
      const float q = -logf(philox::to_open_unit(bits[c]));
      const float score = e[c] / q;
      const int i = int(first) + c;
      if (score == score && before(score, i, best, idx)) {
        best = score;
        idx = i;
      }
    }
  }
  all_argmax(best, idx, cx);
  return idx == INT_MAX ? kNoTokenLeft : idx;
}

/// Greedy or sampled token from the processed logits `x`; kNoTokenLeft when none is left.
template <bool kCached>
__device__ int choose_token(const Slice<kCached>& x, int vocab, const SampleRowParams& p,
                            float raw_max, int raw_argmax, Ctx& cx) {
  const bool modified = p.mod_count > 0;
  if (p.greedy) {
    if (!modified) return raw_argmax;
    float best = -INFINITY;
    int idx = INT_MAX;
    for (int j = threadIdx.x; j < x.n; j += kThreads) {
      const float v = x.at(j);
      if (before(v, x.lo + j, best, idx)) {
        best = v;
        idx = x.lo + j;
      }
    }
    all_argmax(best, idx, cx);
    return best == -INFINITY || idx == INT_MAX ? kNoTokenLeft : idx;
  }
  float x_max = raw_max;
  if (modified) {
    float m = -INFINITY;
    for (int j = threadIdx.x; j < x.n; j += kThreads) m = fmaxf(m, x.at(j));
    int unused = 0;
    all_argmax(m, unused, cx);
    x_max = m;
  }
  if (x_max == -INFINITY) return kNoTokenLeft;  // every token banned
  const float y_max = __fdiv_rn(x_max, p.temperature);
  // A tempered logit overflowed to +inf: no distribution is left (as the CPU reference, whose
  // race then scores every token NaN), whatever the plan.
  if (y_max == INFINITY) return kNoTokenLeft;
  const bool fine_ok = isfinite(y_max);
  TemperedSource<kCached> src{x,  p.temperature, p.temperature == 1.0f, y_max, p.min_p,
                              0u, p.min_p > 0.0f};
  uint32_t thr = 0;
  int n_sorted = -1;  // >= 0: sh.sorted[0, n_sorted) holds every survivor
  if (p.top_k > 0 && p.top_k < vocab) {
    const Selection s =
        cluster_select(src, SelectSpec{false, u64(p.top_k), 0.0f, false, y_max, fine_ok}, cx);
    if (!s.all) {
      thr = s.thr;
      n_sorted = s.n;
    }
  }
  if (p.top_p < 1.0f) {
    if (n_sorted >= 0) {
      n_sorted = mass_cut(n_sorted, -1.0, p.top_p, y_max, cx.sh, thr);
    } else {
      TemperedSource<kCached> admitted = src;
      admitted.k_thr = thr;
      admitted.need_e = true;
      const Selection s =
          cluster_select(admitted, SelectSpec{true, 0, p.top_p, false, y_max, fine_ok}, cx);
      if (!s.all) {
        thr = s.thr;
        n_sorted = s.n;
      }
    }
  }
  if (n_sorted >= 0) return race_sorted(n_sorted, y_max, p, cx.sh);
  TemperedSource<kCached> survivors = src;
  survivors.k_thr = thr;
  survivors.need_e = true;
  return race_slice(survivors, p, cx);
}

/// One row per cluster; see the file comment. `slice` logits per CTA (a multiple of 4). Two
/// CTAs per SM: 64 registers a thread, with spills (built for one CTA per SM it spills nothing
/// but ran slower: 415 against 314 us for 256 plain rows on the H200).
template <bool kCached>
__global__ void __launch_bounds__(kThreads, 2)
    sample_kernel(const float* __restrict__ logits, int vocab, int slice,
                  const SampleRowParams* __restrict__ rows, const SampleMod* __restrict__ mods,
                  const float* __restrict__ biases, const float* __restrict__ scratch,
                  int32_t* __restrict__ results) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  float* cache = reinterpret_cast<float*>(smem + kSharedBytes);  // [slice] when kCached
  Ctx cx{sh, int(cg::this_cluster().num_blocks()), int(cg::this_cluster().block_rank()), 0};
  const int tid = threadIdx.x;
  const int row = int(blockIdx.x) / cx.csize;
  const SampleRowParams p = rows[row];
  const int lo = min(cx.rank * slice, vocab);
  const int n = min(slice, vocab - lo);
  const float* raw = logits + int64_t(row) * vocab;
  const float* x_row =
      !kCached && p.scratch_row >= 0 ? scratch + int64_t(p.scratch_row) * vocab : raw;
  const Slice<kCached> raw_slice{cache, raw + lo, lo, n};
  const Slice<kCached> x_slice{cache, x_row + lo, lo, n};
  int32_t* res = results + p.out_offset;
  int32_t* top = res + kSampleResultHeader;

  // Raw maximum and its first index (cached plans: load the slice on the way).
  float mx = -INFINITY;
  int ai = INT_MAX;
  const auto consider = [&](float v, int i) {
    if (before(v, i, mx, ai)) {
      mx = v;
      ai = i;
    }
  };
  if ((vocab & 3) == 0 && aligned_to(logits, 16)) {  // then every slice starts 16-byte aligned
    const float4* src4 = reinterpret_cast<const float4*>(raw + lo);
    for (int q = tid; q < n / 4; q += kThreads) {
      const float4 t = __ldg(src4 + q);
      const float v[4] = {sane(t.x), sane(t.y), sane(t.z), sane(t.w)};
      if constexpr (kCached)
        reinterpret_cast<float4*>(cache)[q] = make_float4(v[0], v[1], v[2], v[3]);
      for (int c = 0; c < 4; ++c) consider(v[c], lo + 4 * q + c);
    }
  } else {
    for (int j = tid; j < n; j += kThreads) {
      const float v = sane(__ldg(raw + lo + j));
      if constexpr (kCached) cache[j] = v;
      consider(v, lo + j);
    }
  }
  all_argmax(mx, ai, cx);  // also makes the cache visible to the whole CTA

  int code = 0;  // < 0: an error code instead of a token
  int token = kNoTokenLeft;
  int before_token = 0;
  u64 exp_sum = 0;
  const int n_top = max(p.num_logprobs, 0);
  // num_logprobs = -1: no logprob at all (vLLM's logprobs=None), so neither the normaliser
  // nor the sampled token's rank is computed: two of a plain row's four passes.
  const bool want_logprob = p.num_logprobs >= 0;
  if (mx == -INFINITY || mx == INFINITY) {  // as the CPU reference: no usable distribution
    code = mx == INFINITY ? kSampleRawInf : kSampleRawAllNegInf;
  } else {
    // Raw log-softmax normaliser: sum of exp(raw - max) in 2^-40 fixed point (exact integer
    // sums, so the same bits whatever the split); summed over the cluster at the end.
    if (want_logprob) {
      for (int j = tid; j < n; j += kThreads)
        exp_sum += mass_of(expf(__fsub_rn(raw_slice.at(j), mx)));
      exp_sum = block_sum_u64(exp_sum, sh);
    }

    // Top-N raw logprobs, before the cache is modified: rank 0 writes (token, raw value,
    // rank) now and turns the values into logprobs once the normaliser is known.
    if (n_top > 0) {
      const RawSource<kCached> src{raw_slice};
      const Selection s =
          cluster_select(src, SelectSpec{false, u64(n_top), 0.0f, true, mx, true}, cx);
      if (cx.rank == 0)
        for (int c = tid; c < n_top; c += kThreads) {
          const u64 e = c < s.n ? sh.sorted[c] : ~0ull;
          top[3 * c] = entry_id(e);
          top[3 * c + 1] = __float_as_int(value_of_key(entry_key(e)));
          top[3 * c + 2] = c + 1;
        }
    }

    if constexpr (kCached) {
      if (p.mod_count > 0) {
        __syncthreads();  // the raw cache is no longer read
        for (int m = tid; m < p.mod_count; m += kThreads) {
          const SampleMod mod = mods[p.mod_begin + m];
          if (mod.token >= lo && mod.token < lo + n)
            cache[mod.token - lo] = modified_logit(cache[mod.token - lo], mod, p, biases);
        }
        __syncthreads();
      }
    }

    token = choose_token(x_slice, vocab, p, mx, ai, cx);
    if (token < 0) {
      code = token;
    } else if (want_logprob && (p.greedy == 0 || p.mod_count > 0)) {
      // Rank of the token under the raw logits. The slice holds processed values, which equal
      // the raw ones except at modified tokens: count over the slice, then swap in the raw
      // value of each modified token. (Greedy, unmodified: the token is the first maximum.)
      const float raw_t = sane(__ldg(raw + token));
      const auto ahead = [&](float v, int i) {
        return v > raw_t || (v == raw_t && i < token) ? 1 : 0;
      };
      int count = 0;
      for (int j = tid; j < n; j += kThreads) count += ahead(x_slice.at(j), lo + j);
      for (int m = tid; m < p.mod_count; m += kThreads) {
        const int t = mods[p.mod_begin + m].token;
        if (t >= lo && t < lo + n)
          count += ahead(sane(__ldg(raw + t)), t) - ahead(x_slice.at(t - lo), t);
      }
      before_token = int(block_sum_u32(unsigned(count), sh));
    }
  }

  // Every CTA hands its partial rank and sum to rank 0; after this barrier no CTA touches
  // another's shared memory, so the others may exit.
  if (tid == 0) {
    *cx.remote(&sh.part_rank[cx.rank], 0) = before_token;
    *cx.remote(&sh.part_sum[cx.rank], 0) = exp_sum;
  }
  cx.sync();
  if (cx.rank != 0) return;
  if (code < 0) {
    if (tid == 0) {
      res[0] = code;
      res[3] = 0;
    }
    return;
  }
  u64 sum = 0;
  int ahead_total = 0;
  for (int r = 0; r < cx.csize; ++r) {
    sum += sh.part_sum[r];
    ahead_total += sh.part_rank[r];
  }
  if (!want_logprob) {  // n_top = 0 too
    if (tid == 0) {
      res[0] = token;
      res[1] = __float_as_int(0.0f);
      res[2] = 0;
      res[3] = 0;
    }
    return;
  }
  // sum >= 2^40: the maximum itself contributes exp(0) = 1.
  const double lse = double(mx) + log(double(sum) * (1.0 / kMassScale));
  if (tid == 0) {
    res[0] = token;
    res[1] = __float_as_int(float(double(sane(__ldg(raw + token))) - lse));
    res[2] = ahead_total + 1;
    res[3] = n_top;
  }
  for (int c = tid; c < n_top; c += kThreads)  // the same thread wrote entry c above
    top[3 * c + 1] = __float_as_int(float(double(__int_as_float(top[3 * c + 1])) - lse));
}

// Uncached plans: rows with a bias or penalties get a processed copy (scratch row = raw row,
// then each modified token rewritten).
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
    x[mod.token] = modified_logit(sane(raw[mod.token]), mod, p, biases);
  }
}

// ---- planning (host) ----

struct FitEntry {
  int device, cluster, cached;
  size_t smem;
  bool fits;
};

struct DeviceState {
  bool ready = false;
  int sms = 0;
};

std::mutex g_plan_mutex;
std::vector<DeviceState> g_devices;  // by device index
std::vector<FitEntry> g_fits;
std::atomic<int> g_force_cluster{0};
std::atomic<int> g_force_cached{-1};

using SampleKernel = void (*)(const float*, int, int, const SampleRowParams*, const SampleMod*,
                              const float*, const float*, int32_t*);

SampleKernel sample_kernel_of(bool cached) {
  return cached ? sample_kernel<true> : sample_kernel<false>;
}

int round_up4(int64_t v) {
  return int((v + 3) / 4 * 4);
}

cudaLaunchConfig_t sample_config(int rows, int cluster, size_t smem, cudaStream_t stream,
                                 cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(rows) * unsigned(cluster), 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = unsigned(cluster);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Under g_plan_mutex: kernel attributes set once per device, and its SM count.
cudaError_t device_state(int device, DeviceState** out) {
  if (g_devices.size() <= size_t(device)) g_devices.resize(size_t(device) + 1);
  DeviceState& d = g_devices[size_t(device)];
  if (!d.ready) {
    cudaError_t e = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device);
    for (bool cached : {true, false}) {
      const SampleKernel k = sample_kernel_of(cached);
      const size_t smem = kSharedBytes + (cached ? size_t(kMaxSlice) * sizeof(float) : 0);
      if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    }
    if (e != cudaSuccess) return e;
    d.ready = true;
  }
  *out = &d;
  return cudaSuccess;
}

// Under g_plan_mutex: whether a cluster of `cluster` CTAs with `smem` bytes each can run.
bool cluster_fits(int device, int cluster, bool cached, size_t smem) {
  for (const FitEntry& f : g_fits)
    if (f.device == device && f.cluster == cluster && f.cached == int(cached) && f.smem == smem)
      return f.fits;
  cudaLaunchAttribute attr{};
  const cudaLaunchConfig_t cfg = sample_config(1, cluster, smem, nullptr, &attr);
  int count = 0;
  const cudaError_t e = cudaOccupancyMaxActiveClusters(&count, sample_kernel_of(cached), &cfg);
  if (e != cudaSuccess) cudaGetLastError();  // an unsupported size: not sticky, just "no"
  const bool fits = e == cudaSuccess && count > 0;
  g_fits.push_back(FitEntry{device, cluster, int(cached), smem, fits});
  return fits;
}

}  // namespace

void override_sample_plan(int32_t cluster, int32_t cached) {
  g_force_cluster.store(cluster);
  g_force_cached.store(cached);
}

cudaError_t plan_sample(int64_t vocab, int32_t num_rows, SamplePlan* plan) {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const std::lock_guard<std::mutex> lock(g_plan_mutex);
  DeviceState* d = nullptr;
  e = device_state(device, &d);
  if (e != cudaSuccess) return e;
  const int force_cluster = g_force_cluster.load(), force_cached = g_force_cached.load();
  const auto slice_of = [&](int c) { return round_up4((vocab + c - 1) / c); };
  int cluster = 1;
  if (force_cluster > 0) {
    cluster = force_cluster < kMaxCluster ? force_cluster : kMaxCluster;
  } else {
    // Slices of about kTargetSlice when rows fill the GPU; wider clusters when they do not.
    while (cluster < kMaxCluster && slice_of(cluster) > kTargetSlice) cluster *= 2;
    while (cluster < kMaxCluster && int64_t(num_rows) * cluster < 2 * int64_t(d->sms) &&
           slice_of(2 * cluster) >= kMinSpreadSlice)
      cluster *= 2;
    if (slice_of(cluster) > kMaxSlice) cluster = kMaxCluster;  // uncached: spread widest
  }
  for (;;) {
    const int slice = slice_of(cluster);
    const bool cached = force_cached != 0 && slice <= kMaxSlice;
    const size_t smem = kSharedBytes + (cached ? size_t(slice) * sizeof(float) : 0);
    if (cluster == 1 || cluster_fits(device, cluster, cached, smem)) {
      plan->cluster = cluster;
      plan->slice = slice;
      plan->cached = cached ? 1 : 0;
      plan->smem_bytes = int32_t(smem);
      return cudaSuccess;
    }
    cluster /= 2;  // the device cannot co-schedule that many CTAs: narrower, longer slices
  }
}

cudaError_t launch_sample(const SamplePlan& plan, const float* logits, int64_t vocab,
                          int32_t num_rows, const SampleRowParams* rows, const SampleMod* mods,
                          const float* biases, float* scratch, int32_t num_scratch_rows,
                          int32_t* results, cudaStream_t stream) {
  if (num_rows <= 0 || vocab <= 0) return cudaSuccess;
  if (!plan.cached && num_scratch_rows > 0) {
    mods_kernel<<<unsigned(num_rows), kThreads, 0, stream>>>(logits, int(vocab), rows, mods, biases,
                                                             scratch);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  cudaLaunchAttribute attr{};
  const cudaLaunchConfig_t cfg =
      sample_config(num_rows, plan.cluster, size_t(plan.smem_bytes), stream, &attr);
  return cudaLaunchKernelEx(&cfg, sample_kernel_of(plan.cached != 0), logits, int(vocab),
                            plan.slice, rows, mods, biases, static_cast<const float*>(scratch),
                            results);
}

}  // namespace troupe::cuda
