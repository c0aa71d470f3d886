// Paged causal attention for query rows of prefills and chunked prefills (sequences with two
// or more query rows this step), f16/bf16, FlashAttention-2 style:
//
// - One CTA of 4 warps per (128-query tile, query head, sequence); each warp owns 32 query rows
//   in two m16 tiles up to d = 128 (16 rows, a 64-query tile, past it).
// - The CTA walks the keys its tile can see in tiles of BN = 32. K/V tiles come from the
//   paged cache (through the block table) by cp.async into
//   a two-stage ring in shared memory: tile i + 1 is in flight while tile i is multiplied.
// - S = Q K^T and O += P V with mma.sync.m16n8k16 (f32 accumulators), fragments read with
//   ldmatrix (Q and K as stored, V transposed), and an online softmax in f32 (base-2, the scale
//   folded into the exponent). Rows are padded by 8 elements, so the ldmatrix row addresses
//   of a matrix fall in distinct banks.
// - No K/V reuse across the query heads of a GQA group (the group's CTAs meet in L2).
//
// (Fragment layouts: cuda/mma.cuh.)
#include "cuda/attention_common.cuh"
#include "cuda/mma.cuh"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps

/// Keys per K/V tile: 32 (64-key tiles took more registers and shared memory and measured
/// slower on the H200: docs/engine.md).
constexpr int kBlockN = 32;

constexpr int kStages = 2;  // K/V tiles in the cp.async ring

/// Query rows per CTA: each of the 4 warps owns WM tiles of 16 rows.
template <int WM>
constexpr int block_m() {
  return 4 * 16 * WM;
}

template <int D, int WM>
constexpr int smem_bytes() {
  return (block_m<WM>() + 2 * kStages * kBlockN) * (D + 8) * 2;
}

// WM = 1 (past d = 128, where two tiles' accumulators would spill): a warp's 16 query rows meet
// each K/V fragment it reads from shared memory; WM = 2 (up to d = 128): 32 rows in two m16
// tiles share every K and V fragment (FlashAttention-2's register blocking: half the shared-memory
// reads per MMA, twice the accumulators). Each row's sums run in the same order either way, and the
// tiles past a row's diagonal that the wider CTA walks are fully masked (p = 0, alpha = 1), so the
// bits are the same.
template <class T, int D, int WM>
__global__ void __launch_bounds__(kThreads) prefill_kernel(const AttentionArgs a) {
  constexpr int BN = kBlockN;
  constexpr int LD = D + 8;   // padded row length in shared memory (elements)
  constexpr int CH = D / 8;   // 16-byte chunks per row
  constexpr int NT = BN / 8;  // n8 tiles of S per m16 tile
  constexpr int DT = D / 8;   // n8 tiles of O per m16 tile
  constexpr int BM = block_m<WM>();
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);    // [BM][LD]
  T* ks = qs + BM * LD;                  // [kStages][BN][LD]
  T* vs = ks + kStages * BN * LD;        // [kStages][BN][LD]

  // Grid (heads, sequences, query tiles from the last): see launch_attention_prefill.
  const int qt = int(gridDim.z - 1 - blockIdx.z);
  const int h = int(blockIdx.x);
  const int s = int(blockIdx.y);
  const int m0 = qt * BM;
  const SeqInfo seq = load_seq(a, s);
  if (!seq.ok) {
    if (qt == 0 && h == 0 && threadIdx.x == 0) atomicOr(a.err, int(kErrSeqLayout));
    return;
  }
  // Decodes go to the split-KV kernel, except in batch-invariant mode.
  if (seq.q_len < (a.all_rows_prefill ? 1 : 2) || m0 >= seq.q_len) return;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int group = a.num_heads / a.num_kv_heads, kvh = h / group;
  const int ctx = seq.kv_len - seq.q_len;  // position of the sequence's first query row
  const int64_t q_stride = int64_t(a.num_heads) * D;
  const T* q = static_cast<const T*>(a.q);
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  const int32_t* table = a.block_tables + int64_t(s) * a.max_blocks;

  // Q tile [BM, D]; rows past the sequence are zeros (computed, never written).
  for (int idx = tid; idx < BM * CH; idx += kThreads) {
    const int r = idx / CH, c = idx % CH;
    const bool in = m0 + r < seq.q_len;
    const T* src = in ? q + int64_t(seq.q_begin + m0 + r) * q_stride + int64_t(h) * D + c * 8 : q;
    cp_async16(qs + r * LD + c * 8, src, in ? 16 : 0);
  }
  // K/V tile of keys [n0, n0 + BN) into ring stage `stage`; keys past kv_len, and keys whose
  // block-table entry is bad (reported), are zeros.
  const auto load_tile = [&](int n0, int stage) {
    T* kd = ks + stage * BN * LD;
    T* vd = vs + stage * BN * LD;
    for (int idx = tid; idx < BN * CH; idx += kThreads) {
      const int r = idx / CH, c = idx % CH, j = n0 + r;
      const int64_t off = j < seq.kv_len ? kv_offset(a, table, j, kvh, D) : -1;
      const int bytes = off >= 0 ? 16 : 0;
      cp_async16(kd + r * LD + c * 8, off >= 0 ? kc + off + c * 8 : kc, bytes);
      cp_async16(vd + r * LD + c * 8, off >= 0 ? vc + off + c * 8 : vc, bytes);
    }
  };

  // Keys [0, n_end) are visible to at least one row of the tile.
  const int n_end = ctx + min(m0 + BM, seq.q_len);
  const int tiles = (n_end + BN - 1) / BN;
  // This warp's rows: m16 tile mt holds rows row0 + 16 mt + g and + 8 (within the sequence).
  const int row0 = m0 + warp * 16 * WM;
  const float scale_log2 = a.scale * kLog2e;

  float o[WM][DT][4];
#pragma unroll
  for (int mt = 0; mt < WM; ++mt)
#pragma unroll
    for (int i = 0; i < DT; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
  float m[WM][2], l[WM][2];  // rows g and g + 8 of each m16 tile
#pragma unroll
  for (int mt = 0; mt < WM; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;

  load_tile(0, 0);
  cp_async_commit();  // group 0: Q and the first K/V tile
  // ldmatrix row addresses of this lane: A (Q) rows lane % 16, column half lane / 16; B of
  // S (K rows) key (lane % 8) + 8 (lane / 16), column half (lane / 8) % 2; B of O (V
  // transposed) key lane % 16, column half lane / 16.
  const T* qa = qs + (warp * 16 * WM + (lane & 15)) * LD + (lane >> 4) * 8;
  const int k_row = ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8;
  const int v_row = (lane & 15) * LD + (lane >> 4) * 8;

  for (int it = 0; it < tiles; ++it) {
    const int stage = it % kStages, n0 = it * BN;
    // The next tile goes into the other stage, which every warp left at the barrier that
    // ended the previous iteration.
    if (it + 1 < tiles) load_tile(n0 + BN, (it + 1) % kStages);
    cp_async_commit();  // (possibly empty) group it + 1
    cp_async_wait<1>();  // group it (this tile, and Q) has landed for this thread
    __syncthreads();     // ... and for every thread
    const T* kt = ks + stage * BN * LD;
    const T* vt = vs + stage * BN * LD;

    // S = Q K^T for this warp's WM x 16 rows x BN keys: each K fragment serves every m16 tile.
    float sc[WM][NT][4];
#pragma unroll
    for (int mt = 0; mt < WM; ++mt)
#pragma unroll
      for (int i = 0; i < NT; ++i) sc[mt][i][0] = sc[mt][i][1] = sc[mt][i][2] = sc[mt][i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[WM][4];
#pragma unroll
      for (int mt = 0; mt < WM; ++mt) ldmatrix_x4(af[mt], qa + mt * 16 * LD + kk * 16);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bk[4];
        ldmatrix_x4(bk, kt + np * 16 * LD + k_row + kk * 16);
#pragma unroll
        for (int mt = 0; mt < WM; ++mt)
          mma16816_x2<T>(sc[mt][2 * np], sc[mt][2 * np + 1], af[mt], bk);
      }
    }

    // Causal mask, scale, online softmax (a row's 4 owners are the lanes of one quad). Tiles
    // whose every key is visible to the m16 tile's first row (so to all its rows; then also
    // below kv_len when that row is the sequence's) skip the mask: the same bits with ~5
    // integer ops less per score, on all but the diagonal tiles. An m16 tile of padding rows
    // only (first row past q_len) may then score zero-filled keys; its rows are never written.
#pragma unroll
    for (int mt = 0; mt < WM; ++mt) {
      const int first = row0 + mt * 16;
      const int pos_a = ctx + first + g, pos_b = pos_a + 8;
      float alpha[2], sum[2];
      if (n0 + BN - 1 <= ctx + first)
        online_softmax_step(
            sc[mt], [](int, int) { return true; }, scale_log2, m[mt], o[mt], alpha, sum);
      else
        online_softmax_step(
            sc[mt],
            [&](int nt, int e) {
              const int col = n0 + nt * 8 + t4 * 2 + (e & 1);
              return col <= (e < 2 ? pos_a : pos_b) && col < seq.kv_len;
            },
            scale_log2, m[mt], o[mt], alpha, sum);
#pragma unroll
      for (int r = 0; r < 2; ++r) l[mt][r] = l[mt][r] * alpha[r] + quad_sum(sum[r]);
    }

    // O += P V: P's C fragments of two adjacent n8 tiles form one A fragment (k = 16 keys);
    // each V fragment serves every m16 tile.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t af[WM][4];
#pragma unroll
      for (int mt = 0; mt < WM; ++mt) {
        af[mt][0] = pack2<T>(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
        af[mt][1] = pack2<T>(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
        af[mt][2] = pack2<T>(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
        af[mt][3] = pack2<T>(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < DT / 2; ++dp) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, vt + kk * 16 * LD + v_row + dp * 16);
#pragma unroll
        for (int mt = 0; mt < WM; ++mt)
          mma16816_x2<T>(o[mt][2 * dp], o[mt][2 * dp + 1], af[mt], bv);
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
  cp_async_wait<0>();

  // Normalise and store this warp's rows that belong to the sequence.
  T* out = static_cast<T*>(a.out);
#pragma unroll
  for (int mt = 0; mt < WM; ++mt) {
    const int row_a = row0 + mt * 16 + g, row_b = row_a + 8;
    const float inv_a = l[mt][0] > 0.0f ? 1.0f / l[mt][0] : 0.0f;
    const float inv_b = l[mt][1] > 0.0f ? 1.0f / l[mt][1] : 0.0f;
    T* out_a = out + int64_t(seq.q_begin + row_a) * q_stride + int64_t(h) * D + t4 * 2;
    T* out_b = out + int64_t(seq.q_begin + row_b) * q_stride + int64_t(h) * D + t4 * 2;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      if (row_a < seq.q_len)
        *reinterpret_cast<uint32_t*>(out_a + dt * 8) =
            pack2<T>(o[mt][dt][0] * inv_a, o[mt][dt][1] * inv_a);
      if (row_b < seq.q_len)
        *reinterpret_cast<uint32_t*>(out_b + dt * 8) =
            pack2<T>(o[mt][dt][2] * inv_b, o[mt][dt][3] * inv_b);
    }
  }
}

}  // namespace

void launch_attention_prefill(DType dt, const AttentionArgs& a, cudaStream_t stream) {
  // With the prompts ordered first, the grid spans them only: every other sequence would add
  // a slab of CTAs that read its lengths and exit.
  const int32_t seqs = a.num_prefill_seqs >= 0 && !a.all_rows_prefill
                           ? min(a.num_prefill_seqs, a.num_seqs)
                           : a.num_seqs;
  if (seqs <= 0 || a.max_query_len < (a.all_rows_prefill ? 1 : 2) || a.num_heads <= 0) return;
  dispatch_half_dim(dt, a.head_dim, [&](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;
    const auto launch = [&](auto kernel, int bm, int smem) {
      // CTAs start in grid order (x fastest): every head's last (heaviest) query tile starts
      // first, so the light ones fill the last wave.
      const auto tiles = unsigned((a.max_query_len + bm - 1) / bm);
      const dim3 grid(unsigned(a.num_heads), unsigned(seqs), tiles);
      kernel<<<grid, kThreads, size_t(smem), stream>>>(a);
    };
    if constexpr (D <= 128)  // past d = 128 two m16 tiles' accumulators spill
      launch(prefill_kernel<T, D, 2>, block_m<2>(), smem_bytes<D, 2>());
    else
      launch(prefill_kernel<T, D, 1>, block_m<1>(), smem_bytes<D, 1>());
  });
}

cudaError_t attention_prefill_init() {
  return for_each_half_dim([](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;
    if constexpr (D <= 128)
      return cudaFuncSetAttribute(prefill_kernel<T, D, 2>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D, 2>());
    else
      return cudaFuncSetAttribute(prefill_kernel<T, D, 1>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D, 1>());
  });
}

}  // namespace troupe::cuda
