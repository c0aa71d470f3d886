// Paged attention for decode rows (sequences with exactly one query row this step), f16/bf16,
// on CUDA cores, flash-decoding style: what runs where the tensor-core kernel
// (attention_decode_mma.cu, used everywhere else) cannot, a cache of more than 2^31 rows, which
// its 32-bit row index does not reach (only possible at head dims below 64).
//
// - Grid (split, KV head, sequence). A CTA handles one KV range of one sequence for all the
//   query heads of one GQA group (up to 8 at a time), so each K/V row is read once per group.
// - K and V reach the CTA through shared memory with cp.async in two stages (below); keys are
//   walked in sub-chunks of SUB keys split over key groups of LPK lanes that each hold 8 of the
//   d features (16-byte loads): (1) scores, reduced over the key group by shuffles; (2) an
//   online-softmax update per head in f32, base 2; (3) P V. The key groups' partial sums meet
//   in shared memory at the end.
// - A sequence with one split has its CTA write the normalised output. With several, each
//   writes unnormalised partial sums plus (max, sum) per (sequence, head, split) into the
//   workspace, and decode_reduce_kernel rescales and combines them.
// - The host's split count (from num_seqs and max_seq_len) only bounds the grid. Each sequence
//   splits its own keys: n = min(splits, ceil(kv_len / split_keys)) parts of
//   ceil(kv_len / n) keys, from its length on the device. So a CUDA graph captured with
//   max_seq_len at its bound still gives a short sequence few, long-enough splits, and the
//   result of a sequence depends on (splits, its kv_len) only, not on where the batch's longest
//   sequence stands.
// - Rows past the last sequence (padding of a graph's batch) are zeroed by all CTAs together,
//   grid-stride, instead of by a kernel of their own.
#include "cuda/attention_decode.cuh"
#include "cuda/mma.cuh"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 128;

template <int D>
constexpr int lanes_per_key() {
  return D / 8 <= 8 ? 8 : D / 8 <= 16 ? 16 : 32;
}

/// A pass's gn query heads (from head0), pre-scaled by scale * log2(e), into qs [GM][D], its
/// running max and sum reset, and this thread's accumulators zeroed. The caller's next barrier
/// publishes the shared ones.
template <class T, int D, int GM>
__device__ __forceinline__ void begin_pass(const T* qrow, int head0, int gn, float scale_log2,
                                           float* qs, float* m_s, float* l_s,
                                           float (&acc)[GM][8]) {
#pragma unroll
  for (int gi = 0; gi < GM; ++gi)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[gi][e] = 0.0f;
  for (int idx = threadIdx.x; idx < gn * D; idx += kThreads) {
    const int gi = idx / D, d = idx % D;
    qs[gi * D + d] = to_f32(qrow[int64_t(head0 + gi) * D + d]) * scale_log2;
  }
  if (threadIdx.x < GM) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }
}

/// One chunk of cn keys for the pass's gn heads: (1) scores into sc [GM][SUB], reduced over
/// each key group by shuffles; (2) the online-softmax update, one warp per head, base 2;
/// (3) acc = acc * alpha + P V. Key jj = it * NG + grp for it < KPG; k_of(it, kf) and
/// v_of(it, vf) give this lane's 8 features of that key (zeros where the key is past cn).
/// Every lane runs every iteration, so the shuffles see whole warps. Ends with a barrier.
template <int D, int GM, int LPK, int NG, int KPG, int SUB, class KOf, class VOf>
__device__ __forceinline__ void attend_chunk(const KOf& k_of, const VOf& v_of, int cn, int gn,
                                             const float* qs, float* sc, float* m_s,
                                             float* l_s, float* alpha_s, float (&acc)[GM][8]) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = tid / LPK, li = tid % LPK;
  const bool lane_on = li < D / 8;
#pragma unroll
  for (int it = 0; it < KPG; ++it) {
    const int jj = it * NG + grp;
    float kf[8];
    k_of(it, kf);
#pragma unroll
    for (int gi = 0; gi < GM; ++gi) {
      if (gi < gn) {
        float dot = 0.0f;
        if (lane_on) {
#pragma unroll
          for (int e = 0; e < 8; ++e) dot += kf[e] * qs[gi * D + li * 8 + e];
        }
#pragma unroll
        for (int off = LPK / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (li == 0 && jj < cn) sc[gi * SUB + jj] = dot;
      }
    }
  }
  __syncthreads();

  for (int gi = warp; gi < gn; gi += kThreads / 32) {
    float mx = -INFINITY;
    for (int jj = lane; jj < cn; jj += 32) mx = fmaxf(mx, sc[gi * SUB + jj]);
    mx = warp_max(mx);
    const float m_old = m_s[gi];
    const float m_new = fmaxf(m_old, mx);
    float sum = 0.0f;
    for (int jj = lane; jj < cn; jj += 32) {
      const float p = exp2f(sc[gi * SUB + jj] - m_new);
      sc[gi * SUB + jj] = p;
      sum += p;
    }
    sum = warp_sum(sum);
    // Every lane has read m_s[gi] above; order those reads before lane 0's write (the
    // shuffles carry values, not memory order: racecheck's warp-level WAR hazard).
    __syncwarp();
    if (lane == 0) {
      const float alpha = exp2f(m_old - m_new);  // 0 on the first chunk
      alpha_s[gi] = alpha;
      l_s[gi] = l_s[gi] * alpha + sum;
      m_s[gi] = m_new;
    }
  }
  __syncthreads();

#pragma unroll
  for (int gi = 0; gi < GM; ++gi) {
    if (gi < gn) {
      const float alpha = alpha_s[gi];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[gi][e] *= alpha;
    }
  }
  if (lane_on) {
#pragma unroll
    for (int it = 0; it < KPG; ++it) {
      const int jj = it * NG + grp;
      if (jj >= cn) continue;
      float vf[8];
      v_of(it, vf);
#pragma unroll
      for (int gi = 0; gi < GM; ++gi) {
        if (gi < gn) {
          const float p = sc[gi * SUB + jj];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[gi][e] += p * vf[e];
        }
      }
    }
  }
  __syncthreads();  // sc and alpha_s are rewritten by the next chunk
}

/// The end of a pass: the key groups' accumulators meet in red [NG][GM][D]; a CTA that holds
/// its whole sequence writes the normalised output, else its unnormalised part and (max, sum)
/// for decode_reduce_kernel. Ends with a barrier (qs, m_s, l_s and red are reused).
template <class T, int D, int GM, int NG>
__device__ __forceinline__ void finish_pass(const AttentionArgs& a, const DecodeCta& c,
                                            int splits, int head0, int gn,
                                            const float (&acc)[GM][8], const float* m_s,
                                            const float* l_s, float* red,
                                            float* __restrict__ part_o,
                                            float* __restrict__ part_ml) {
  constexpr int LPK = lanes_per_key<D>();
  const int tid = threadIdx.x, grp = tid / LPK, li = tid % LPK;
  if (li < D / 8) {
#pragma unroll
    for (int gi = 0; gi < GM; ++gi)
      if (gi < gn)
#pragma unroll
        for (int e = 0; e < 8; ++e) red[(grp * GM + gi) * D + li * 8 + e] = acc[gi][e];
  }
  __syncthreads();
  for (int idx = tid; idx < gn * D; idx += kThreads) {
    const int gi = idx / D, d = idx % D;
    float o = 0.0f;
#pragma unroll
    for (int gr = 0; gr < NG; ++gr) o += red[(gr * GM + gi) * D + d];
    write_decode_result<T, D>(a, c, splits, head0 + gi, d, o, m_s[gi], l_s[gi], part_o, part_ml);
  }
  __syncthreads();
}

// ---- the kernel ----
//
// While the CTA computes on chunk i (scores, the softmax update, P V, all reading shared
// memory), the copies of chunk i + 1 are in flight, so the KV stream never waits on the
// arithmetic. Registers hold only the accumulators (up to 4 or 8 heads of a GQA group a pass).
// The key groups' partial sums meet in the (then idle) stage buffers at the end.

template <int D>
constexpr int pipe_keys() {  // keys per stage
  return D > 128 ? 32 : 64;
}

template <class T, int D, int GM>
constexpr size_t pipe_smem_bytes() {
  constexpr int SUB = pipe_keys<D>();
  constexpr int NG = kThreads / lanes_per_key<D>();
  constexpr size_t stages = size_t(2) * 2 * SUB * D * sizeof(T);  // 2 stages of K and V
  constexpr size_t red = size_t(NG) * GM * D * sizeof(float);     // aliases the stages
  static_assert(red <= stages, "the key groups' partial sums must fit the stage buffers");
  return stages + sizeof(float) * (size_t(GM) * D + size_t(GM) * SUB + 3 * GM);
}

template <class T, int D, int GM>
__global__ void __launch_bounds__(kThreads)
    decode_pipelined_kernel(const AttentionArgs a, int splits, float* __restrict__ part_o,
                            float* __restrict__ part_ml) {
  constexpr int CH = D / 8;
  constexpr int LPK = lanes_per_key<D>();
  constexpr int NG = kThreads / LPK;
  constexpr int SUB = pipe_keys<D>();
  constexpr int KPG = SUB / NG;  // keys per key group per stage
  static_assert(KPG * NG == SUB, "a stage must split evenly over the key groups");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ks = reinterpret_cast<T*>(smem_raw);                  // [2][SUB][D]
  T* vs = ks + 2 * SUB * D;                                // [2][SUB][D]
  float* qs = reinterpret_cast<float*>(vs + 2 * SUB * D);  // [GM][D]
  float* sc = qs + GM * D;                                 // [GM][SUB]
  float* m_s = sc + GM * SUB;
  float* l_s = m_s + GM;
  float* alpha_s = l_s + GM;
  float* red = reinterpret_cast<float*>(smem_raw);  // [NG][GM][D], after the last stage

  DecodeCta c;
  if (!begin_decode_cta<T, D>(a, splits, c)) return;
  const int nchunks = (c.end - c.start + SUB - 1) / SUB;
  const int tid = threadIdx.x;
  const int grp = tid / LPK, li = tid % LPK;
  const bool lane_on = li < CH;
  const DecodeInputs<T, D> in = decode_inputs<T, D>(a, c);

  // Copies of chunk ci into stage st: every (key, 16-byte chunk) of K and V; keys past the
  // range (or behind a bad block-table entry) are zero-filled.
  const auto issue = [&](int ci, int st) {
    const int c0 = c.start + ci * SUB;
    const int cn = min(SUB, c.end - c0);
    for (int idx = tid; idx < SUB * CH; idx += kThreads) {
      const int jj = idx / CH, cc = idx % CH;
      int64_t off = -1;
      if (jj < cn) off = kv_offset(a, in.table, c0 + jj, c.kvh, D);
      const int64_t src = off >= 0 ? off + cc * 8 : 0;
      const int bytes = off >= 0 ? 16 : 0;
      cp_async16(ks + (st * SUB + jj) * D + cc * 8, in.kc + src, bytes);
      cp_async16(vs + (st * SUB + jj) * D + cc * 8, in.vc + src, bytes);
    }
  };

  for (int g0 = 0; g0 < in.group; g0 += GM) {
    const int gn = min(GM, in.group - g0);
    const int head0 = c.kvh * in.group + g0;
    float acc[GM][8];
    begin_pass<T, D, GM>(in.qrow, head0, gn, a.scale * kLog2e, qs, m_s, l_s, acc);

    issue(0, 0);
    cp_async_commit();
    for (int ci = 0; ci < nchunks; ++ci) {
      const int st = ci & 1;
      const int cn = min(SUB, c.end - (c.start + ci * SUB));
      if (ci + 1 < nchunks) issue(ci + 1, st ^ 1);
      cp_async_commit();   // possibly empty: keeps the group count uniform
      cp_async_wait<1>();  // this thread's copies of chunk ci have landed
      __syncthreads();     // everyone's have (and qs, m_s, l_s are set)
      const T* kst = ks + st * SUB * D;
      const T* vst = vs + st * SUB * D;
      attend_chunk<D, GM, LPK, NG, KPG, SUB>(
          [&](int it, float(&kf)[8]) {
            if (lane_on) {
              load16(kst + (it * NG + grp) * D + li * 8, kf);
            } else {
#pragma unroll
              for (int e = 0; e < 8; ++e) kf[e] = 0.0f;
            }
          },
          [&](int it, float(&vf)[8]) { load16(vst + (it * NG + grp) * D + li * 8, vf); }, cn,
          gn, qs, sc, m_s, l_s, alpha_s, acc);
    }
    cp_async_wait<0>();
    __syncthreads();  // no copy still lands in the stages that red reuses
    finish_pass<T, D, GM, NG>(a, c, splits, head0, gn, acc, m_s, l_s, red, part_o, part_ml);
  }
}

// One CTA per (query head, sequence): out = sum_i o_i 2^(m_i - M) / sum_i l_i 2^(m_i - M).
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    decode_reduce_kernel(const AttentionArgs a, int splits, const float* __restrict__ part_o,
                         const float* __restrict__ part_ml) {
  pdl_wait();
  const int h = blockIdx.x, s = blockIdx.y;
  const SeqInfo seq = load_seq(a, s);
  if (!seq.ok || seq.q_len != 1) return;
  // Parts the decode kernel wrote; with one, it wrote the output itself.
  const int n = seq_splits(seq.kv_len, splits, a.decode_split_keys);
  if (n == 1) return;
  const int64_t base = (int64_t(s) * a.num_heads + h) * splits;
  float m_max = -INFINITY;
  for (int i = 0; i < n; ++i) m_max = fmaxf(m_max, part_ml[(base + i) * 2]);
  float l = 0.0f;
  for (int i = 0; i < n; ++i)
    l += part_ml[(base + i) * 2 + 1] * exp2f(part_ml[(base + i) * 2] - m_max);
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
  T* out = static_cast<T*>(a.out) + int64_t(seq.q_begin) * a.num_heads * D + int64_t(h) * D;
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float o = 0.0f;
    for (int i = 0; i < n; ++i)
      o += part_o[(base + i) * D + d] * exp2f(part_ml[(base + i) * 2] - m_max);
    out[d] = from_f32<T>(o * inv_l);
  }
}

template <class T, int D>
void launch_typed(const AttentionArgs& a, int splits, float* part_o, float* part_ml,
                  cudaStream_t stream) {
  const dim3 grid(unsigned(splits), unsigned(a.num_kv_heads), unsigned(a.num_seqs));
  const int group = a.num_kv_heads > 0 ? a.num_heads / a.num_kv_heads : 1;
  if (group <= 4)
    launch_pdl(decode_pipelined_kernel<T, D, 4>, grid, dim3(kThreads), pipe_smem_bytes<T, D, 4>(),
               stream, a, splits, part_o, part_ml);
  else
    launch_pdl(decode_pipelined_kernel<T, D, 8>, grid, dim3(kThreads), pipe_smem_bytes<T, D, 8>(),
               stream, a, splits, part_o, part_ml);
}

}  // namespace

cudaError_t attention_decode_init() {
  // The CUDA-core kernel's attributes are left alone: it runs only below d = 64, where its
  // shared memory fits the default limit.
  return attention_decode_mma_init();
}

void launch_attention_decode(DType dt, const AttentionArgs& a, int splits,
                             const DecodeWorkspace& ws, cudaStream_t stream) {
  // The tensor-core kernel indexes cache rows (slot * num_kv_heads + head) in 32 bits; a cache
  // of more rows (only possible at head dims below 64) takes the CUDA-core kernel.
  const bool mma = int64_t(a.num_blocks) * a.block_size * a.num_kv_heads <= int64_t(INT32_MAX);
  // Launched even when the host maxima say there is nothing to do: every CTA checks its
  // sequence against them, so inconsistent metadata is reported rather than left unwritten.
  if (a.num_seqs <= 0 || a.num_heads <= 0) return;
  if (splits < 1) splits = 1;
  float* part_o = ws.data;
  float* part_ml =
      splits > 1 ? ws.data + int64_t(a.num_seqs) * a.num_heads * splits * a.head_dim : nullptr;
  bool combined = false;  // the decode kernel's last CTAs combine the splits themselves
  if (mma) {
    combined = splits > 1 && mma_can_combine(a, splits, ws);
    launch_attention_decode_mma(dt, a, splits, part_o, part_ml, combined ? ws.counters : nullptr,
                                stream);
  }
  dispatch_half_dim(dt, a.head_dim, [&](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;
    if (!mma) launch_typed<T, D>(a, splits, part_o, part_ml, stream);
    if (splits > 1 && !combined) {
      const dim3 rgrid(unsigned(a.num_heads), unsigned(a.num_seqs));
      launch_pdl(decode_reduce_kernel<T, D>, rgrid, dim3(kThreads), 0, stream, a, splits,
                 static_cast<const float*>(part_o), static_cast<const float*>(part_ml));
    }
  });
}

}  // namespace troupe::cuda
