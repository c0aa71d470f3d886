// Split-KV decode attention on tensor cores, f16/bf16:
//
// - Same grid, per-sequence splits, partials and reduction as the CUDA-core kernel of
//   attention_decode.cu: a CTA handles one key range of one sequence for one KV head.
// - The query heads of the KV head's GQA group (up to 16 per pass) are the M = 16 rows of
//   mma.m16n8k16, so every K/V row is read once per group: S = Q K^T over a tile of 16 keys is
//   D / 8 MMAs, O += P V another D / 8 (rows past the group are zeros, and their results are
//   dropped). The arithmetic that made the CUDA-core kernels compute-bound at large batches
//   (unpacking, dot products, shuffles per key) becomes a few MMAs per 8 KB of K/V.
// - Each of the 4 warps walks its own tiles (tile i goes to warp i % 4) with its own online
//   softmax (f32, base 2) and its own cp.async ring in shared memory (3 stages), so the K/V
//   stream of a warp never waits for the others: no CTA barrier until the warps' (max, sum, O) are
//   combined at the end. Fragments come from shared memory with ldmatrix (V transposed); rows
//   are padded by 8 elements, which keeps ldmatrix and the copies free of bank conflicts.
// - P is rounded to T for the P V product, as in the prefill kernel (FlashAttention-2); the
//   softmax sums use the unrounded P.
//
// Fragment layouts: cuda/mma.cuh.
#include "cuda/attention_decode.cuh"
#include "cuda/mma.cuh"

namespace troupe::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileKeys = 16;  // keys per warp tile (the k of the P V MMAs)
constexpr int kRows = 16;      // query heads per pass (the M of the MMAs)

template <class T, int D>
constexpr size_t stage_elems() {  // one stage: K then V, kTileKeys padded rows each
  return size_t(2) * kTileKeys * (D + 8);
}

// The cp.async ring depth per warp (two stages measured slower where the long run spends its
// time: docs/engine.md).
constexpr int kStages = 3;

template <class T, int D>
constexpr size_t smem_bytes() {
  constexpr size_t rings = size_t(kWarps) * kStages * stage_elems<T, D>() * sizeof(T);
  constexpr size_t combine = sizeof(float) * size_t(kWarps) * kRows * (D + 2);
  constexpr size_t weights = sizeof(float) * size_t(kCombineMaxGroup) * kCombineMaxSplits;
  constexpr size_t most = rings > combine ? rings : combine;
  return most > weights ? most : weights;
}

// CTAs per SM that the rings let share an SM (228 KB of shared memory): at d = 128, three
// stages take 104 KB (two CTAs).
template <int D>
constexpr int min_ctas() {
  return D > 128 ? 1 : 2;
}

/// After a CTA of a sequence in n_split > 1 splits has written its partials: the last of the
/// sequence's CTAs for this KV head (arrival counter; it resets the counter to zero for the
/// next launch) combines the n_split partials of the group's heads into the output, as
/// decode_reduce_kernel would. The classic threadfence reduction: every thread fences its
/// partial writes before the count, and the last CTA reads the partials through L2.
/// wts: shared memory for kCombineMaxGroup x kCombineMaxSplits floats.
template <class T, int D>
__device__ __forceinline__ void combine_if_last(const AttentionArgs& a, const DecodeCta& c,
                                                int splits, int group,
                                                const float* __restrict__ part_o,
                                                const float* __restrict__ part_ml,
                                                uint32_t* __restrict__ counters, float* wts) {
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* counter = counters + int64_t(c.s) * a.num_kv_heads + c.kvh;
    last = atomicAdd(counter, 1u) == uint32_t(c.n_split - 1);
    if (last) *counter = 0u;  // every other CTA of the pair has counted already
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int n = c.n_split, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int head0 = c.kvh * group;
  // Per head: weight_i = 2^(m_i - M) / L, L = sum_i l_i 2^(m_i - M), one warp per head.
  for (int gi = warp; gi < group; gi += kWarps) {
    const int64_t base = (int64_t(c.s) * a.num_heads + head0 + gi) * splits;
    float m_i[2], l_i[2];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int i = lane + 32 * k;
      m_i[k] = i < n ? __ldcg(part_ml + (base + i) * 2) : -INFINITY;
      l_i[k] = i < n ? __ldcg(part_ml + (base + i) * 2 + 1) : 0.0f;
      m = fmaxf(m, m_i[k]);
    }
    m = warp_max(m);
    float l = 0.0f;
#pragma unroll
    for (int k = 0; k < 2; ++k) l += l_i[k] * exp2f(m_i[k] - m);
    l = warp_sum(l);
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int i = lane + 32 * k;
      if (i < n) wts[gi * kCombineMaxSplits + i] = exp2f(m_i[k] - m) * inv_l;
    }
  }
  __syncthreads();
  T* out = static_cast<T*>(a.out) + int64_t(c.seq.q_begin) * a.num_heads * D + int64_t(head0) * D;
  for (int idx = threadIdx.x; idx < group * D; idx += kThreads) {
    const int gi = idx / D, d = idx % D;
    const int64_t base = (int64_t(c.s) * a.num_heads + head0 + gi) * splits;
    float o = 0.0f;
    for (int i = 0; i < n; ++i)
      o += __ldcg(part_o + (base + i) * D + d) * wts[gi * kCombineMaxSplits + i];
    out[idx] = from_f32<T>(o);
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads, min_ctas<D>())
    decode_mma_kernel(const AttentionArgs a, int splits, float* __restrict__ part_o,
                      float* __restrict__ part_ml, uint32_t* __restrict__ counters) {
  constexpr int S = kStages;
  constexpr int LD = D + 8;  // padded row length in shared memory (elements)
  constexpr int CH = D / 8;  // 16-byte chunks per row
  constexpr int KT = D / 16;
  constexpr int DT = D / 8;
  static_assert(D % 16 == 0, "the MMAs step over the head dim 16 at a time");
  extern __shared__ __align__(16) unsigned char smem[];

  DecodeCta c;
  if (!begin_decode_cta<T, D>(a, splits, c)) return;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  T* ring = reinterpret_cast<T*>(smem) + size_t(warp) * S * stage_elems<T, D>();
  const DecodeInputs<T, D> in = decode_inputs<T, D>(a, c);
  const float scale_log2 = a.scale * kLog2e;
  const int ntiles = (c.end - c.start + kTileKeys - 1) / kTileKeys;
  const int my_tiles = ntiles > warp ? (ntiles - warp + kWarps - 1) / kWarps : 0;

  // This warp's i-th tile (keys from tile_key(i)) into stage st, one commit group either way.
  // Keys past the range, or behind a bad block-table entry, are zero-filled. The tile's 16
  // cache offsets come from key_offset (lane r and r + 16 hold key r's), read a tile ahead so
  // the block-table load is not on the copy's path; each lane then takes the offsets of the
  // rows it copies by shuffle.
  const auto tile_key = [&](int i) { return c.start + (warp + i * kWarps) * kTileKeys; };
  // The offset travels as a cache row index (offset / D: slot * num_kv_heads + kvh, below
  // 2^31 rows for any cache that fits in memory), -1 for none.
  const auto key_offset = [&](int i) -> int {
    const int key = tile_key(i) + (lane & (kTileKeys - 1));
    if (i >= my_tiles || key >= c.end) return -1;
    const int64_t off = kv_offset(a, in.table, key, c.kvh, D);  // -1: a bad table entry
    return off >= 0 ? int(off / D) : -1;
  };
  const auto issue = [&](int i, int st, int off) {
    if (i < my_tiles) {  // warp-uniform
      T* ks = ring + st * stage_elems<T, D>();
      T* vs = ks + kTileKeys * LD;
      static_assert(kTileKeys * CH % 32 == 0, "every lane copies the same number of chunks");
#pragma unroll
      for (int idx = lane; idx < kTileKeys * CH; idx += 32) {
        const int r = idx / CH, cc = idx % CH;
        const int row = __shfl_sync(0xffffffffu, off, r);
        const int64_t src = row >= 0 ? int64_t(row) * D + cc * 8 : 0;
        const int bytes = row >= 0 ? 16 : 0;
        cp_async16(ks + r * LD + cc * 8, in.kc + src, bytes);
        cp_async16(vs + r * LD + cc * 8, in.vc + src, bytes);
      }
    }
    cp_async_commit();
  };

  for (int g0 = 0; g0 < in.group; g0 += kRows) {
    const int gn = min(kRows, in.group - g0);
    const int head0 = c.kvh * in.group + g0;
    // Q as A fragments: rows g and g + 8 are query heads head0 + g, head0 + g + 8 (zeros past
    // the pass's gn heads).
    uint32_t qa[KT][4];
    {
      const T* qg = in.qrow + int64_t(head0 + g) * D + 2 * t4;
      const T* qg8 = qg + 8 * D;
      const bool on = g < gn, on8 = g + 8 < gn;
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
        qa[kk][0] = on ? lds32(qg + kk * 16) : 0u;
        qa[kk][1] = on8 ? lds32(qg8 + kk * 16) : 0u;
        qa[kk][2] = on ? lds32(qg + kk * 16 + 8) : 0u;
        qa[kk][3] = on8 ? lds32(qg8 + kk * 16 + 8) : 0u;
      }
    }
    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8

#pragma unroll
    for (int st = 0; st < S - 1; ++st) issue(st, st, key_offset(st));
    int next_off = key_offset(S - 1);
    for (int i = 0; i < my_tiles; ++i) {
      issue(i + S - 1, (i + S - 1) % S, next_off);
      next_off = key_offset(i + S);
      cp_async_wait<S - 1>();  // this lane's copies of tile i have landed
      __syncwarp();                  // and every lane's
      const T* ks = ring + (i % S) * stage_elems<T, D>();
      const T* vs = ks + kTileKeys * LD;
      const int k0 = tile_key(i);

      // S = Q K^T: n8 tiles of keys 0-7 and 8-15. ldmatrix matrices: (keys 0-7, dims +0..7),
      // (keys 0-7, dims +8..15), (keys 8-15, dims +0..7), (keys 8-15, dims +8..15).
      float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      const T* krow = ks + ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
        uint32_t b[4];
        ldmatrix_x4(b, krow + kk * 16);
        mma16816<T>(s[0], qa[kk], {b[0], b[1]});
        mma16816<T>(s[1], qa[kk], {b[2], b[3]});
      }

      // Scale, mask keys past the range, online softmax per row. This lane's shares of the
      // row sums accumulate in l; the quad's shares are added at the end.
      float alpha[2], sum[2];
      online_softmax_step(
          s, [&](int nt, int e) { return k0 + nt * 8 + 2 * t4 + (e & 1) < c.end; }, scale_log2,
          m, o, alpha, sum);
#pragma unroll
      for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + sum[r];

      // O += P V: P's two C fragments are one A fragment (k = the tile's 16 keys). ldmatrix
      // .trans matrices: (keys 0-7, dims +0..7), (keys 8-15, dims +0..7), (keys 0-7, dims
      // +8..15), (keys 8-15, dims +8..15).
      const uint32_t pa[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]),
                              pack2<T>(s[1][0], s[1][1]), pack2<T>(s[1][2], s[1][3])};
      const T* vrow = vs + (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
#pragma unroll
      for (int dn = 0; dn < KT; ++dn) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vrow + dn * 16);
        mma16816<T>(o[2 * dn], pa, {b[0], b[1]});
        mma16816<T>(o[2 * dn + 1], pa, {b[2], b[3]});
      }
      __syncwarp();  // every lane is done with this stage before the next issue refills it
    }
    cp_async_wait<0>();  // only empty groups can be left, but leave none in flight
    l[0] = quad_sum(l[0]);
    l[1] = quad_sum(l[1]);

    // Combine the warps: red [kWarps][kRows][D] and ml [kWarps][kRows][2] over the rings.
    __syncthreads();  // every warp is done with its ring
    float* red = reinterpret_cast<float*>(smem);
    float* ml = red + kWarps * kRows * D;
    const int ra = g, rb = g + 8;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      const int d = dt * 8 + 2 * t4;
      if (ra < gn) {
        red[(warp * kRows + ra) * D + d] = o[dt][0];
        red[(warp * kRows + ra) * D + d + 1] = o[dt][1];
      }
      if (rb < gn) {
        red[(warp * kRows + rb) * D + d] = o[dt][2];
        red[(warp * kRows + rb) * D + d + 1] = o[dt][3];
      }
    }
    if (t4 == 0) {  // a warp without tiles leaves (-inf, 0): weight 0 below
      ml[(warp * kRows + ra) * 2] = m[0];
      ml[(warp * kRows + ra) * 2 + 1] = l[0];
      ml[(warp * kRows + rb) * 2] = m[1];
      ml[(warp * kRows + rb) * 2 + 1] = l[1];
    }
    __syncthreads();
    for (int idx = tid; idx < gn * D; idx += kThreads) {
      const int r = idx / D, d = idx % D;
      float row_m = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) row_m = fmaxf(row_m, ml[(w * kRows + r) * 2]);
      float row_l = 0.0f, acc = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(ml[(w * kRows + r) * 2] - row_m);
        row_l += ml[(w * kRows + r) * 2 + 1] * f;
        acc += red[(w * kRows + r) * D + d] * f;
      }
      write_decode_result<T, D>(a, c, splits, head0 + r, d, acc, row_m, row_l, part_o, part_ml);
    }
    __syncthreads();  // the next pass refills the rings
  }
  if (c.n_split > 1 && counters != nullptr)
    combine_if_last<T, D>(a, c, splits, in.group, part_o, part_ml, counters,
                          reinterpret_cast<float*>(smem));
}

}  // namespace

void launch_attention_decode_mma(DType dt, const AttentionArgs& a, int splits, float* part_o,
                                 float* part_ml, uint32_t* counters, cudaStream_t stream) {
  dispatch_half_dim(dt, a.head_dim, [&](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;
    const dim3 grid(unsigned(splits), unsigned(a.num_kv_heads), unsigned(a.num_seqs));
    launch_pdl(decode_mma_kernel<T, D>, grid, dim3(kThreads), smem_bytes<T, D>(), stream, a, splits,
               part_o, part_ml, counters);
  });
}

cudaError_t attention_decode_mma_init() {
  return for_each_half_dim([](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;
    return cudaFuncSetAttribute(decode_mma_kernel<T, D>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                int(smem_bytes<T, D>()));
  });
}

}  // namespace troupe::cuda
