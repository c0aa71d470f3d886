// Paged causal attention for query rows of prefills and chunked prefills (sequences with two
// or more query rows this step), f16/bf16, FlashAttention-2 style:
//
// - One CTA of 4 warps per (64-query tile, query head, sequence); each warp owns 16 query rows.
// - The CTA walks the keys its tile can see in tiles of BN (64; 32 for d = 256 to bound
//   registers), copying each K/V tile from the paged cache (through the block table) into
//   shared memory, then computes S = Q K^T and O += P V with mma.sync.m16n8k16 (f32
//   accumulators) and an online softmax in f32 (base-2, the scale folded into the exponent).
// - Fragments are read from shared memory with plain 32-bit loads (A = Q or P, B = K rows) and,
//   for V, two 16-bit loads per register; rows are padded by 8 elements so that these reads are
//   free of bank conflicts. No cp.async pipeline, no ldmatrix, no K/V reuse across the heads of a
//   GQA group: correct and simple first (later: cp.async double buffering, ldmatrix.trans,
//   GQA packing, wgmma).
//
// (Fragment layouts: cuda/mma.cuh.)
#include "cuda/attention_common.cuh"
#include "cuda/mma.cuh"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kBlockM = 64;    // query rows per CTA

template <int D>
constexpr int block_n() {
  return D > 128 ? 32 : 64;
}

template <int D>
constexpr int smem_bytes() {
  return (kBlockM + 2 * block_n<D>()) * (D + 8) * 2;
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) prefill_kernel(const AttentionArgs a) {
  constexpr int BN = block_n<D>();
  constexpr int LD = D + 8;   // padded row length in shared memory (elements)
  constexpr int CH = D / 8;   // 16-byte chunks per row
  constexpr int NT = BN / 8;  // n8 tiles of S per warp
  constexpr int DT = D / 8;   // n8 tiles of O per warp
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);  // [kBlockM][LD]
  T* ks = qs + kBlockM * LD;           // [BN][LD]
  T* vs = ks + BN * LD;                // [BN][LD]

  const int s = blockIdx.z, h = blockIdx.y, m0 = blockIdx.x * kBlockM;
  const SeqInfo seq = load_seq(a, s);
  if (!seq.ok) {
    if (blockIdx.x == 0 && h == 0 && threadIdx.x == 0) atomicOr(a.err, int(kErrSeqLayout));
    return;
  }
  if (seq.q_len < 2 || m0 >= seq.q_len) return;  // decodes go to the split-KV kernel

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int group = a.num_heads / a.num_kv_heads, kvh = h / group;
  const int ctx = seq.kv_len - seq.q_len;  // position of the sequence's first query row
  const int64_t q_stride = int64_t(a.num_heads) * D;
  const T* q = static_cast<const T*>(a.q);
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  const int32_t* table = a.block_tables + int64_t(s) * a.max_blocks;

  // Q tile [kBlockM, D]; rows past the sequence are zeros (computed, never written).
  for (int idx = tid; idx < kBlockM * CH; idx += kThreads) {
    const int r = idx / CH, c = idx % CH;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (m0 + r < seq.q_len)
      v = *reinterpret_cast<const uint4*>(q + int64_t(seq.q_begin + m0 + r) * q_stride +
                                          int64_t(h) * D + c * 8);
    *reinterpret_cast<uint4*>(qs + r * LD + c * 8) = v;
  }

  // Keys [0, n_end) are visible to at least one row of the tile.
  const int n_end = ctx + min(m0 + kBlockM, seq.q_len);
  const int row_a = m0 + warp * 16 + g, row_b = row_a + 8;  // query rows within the sequence
  const int pos_a = ctx + row_a, pos_b = ctx + row_b;
  const float scale_log2 = a.scale * kLog2e;

  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8

  for (int n0 = 0; n0 < n_end; n0 += BN) {
    __syncthreads();  // every warp is done with the previous K/V tile (and Q is stored)
    for (int idx = tid; idx < BN * CH; idx += kThreads) {
      const int r = idx / CH, c = idx % CH, j = n0 + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
      if (j < seq.kv_len) {
        const int64_t off = kv_offset(a, table, j, kvh, D);
        if (off >= 0) {
          kv = *reinterpret_cast<const uint4*>(kc + off + c * 8);
          vv = *reinterpret_cast<const uint4*>(vc + off + c * 8);
        }
      }
      *reinterpret_cast<uint4*>(ks + r * LD + c * 8) = kv;
      *reinterpret_cast<uint4*>(vs + r * LD + c * 8) = vv;
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows x BN keys.
    float sc[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const T* qa = qs + (warp * 16 + g) * LD + kk * 16 + t4 * 2;
      const uint32_t af[4] = {lds32(qa), lds32(qa + 8 * LD), lds32(qa + 8), lds32(qa + 8 * LD + 8)};
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const T* kb = ks + (nt * 8 + g) * LD + kk * 16 + t4 * 2;
        const uint32_t bf[2] = {lds32(kb), lds32(kb + 8)};
        mma16816<T>(sc[nt], af, bf);
      }
    }

    // Causal mask, scale, online softmax (a row's 4 owners are the lanes of one quad).
    float alpha[2], sum[2];
    online_softmax_step(
        sc,
        [&](int nt, int e) {
          const int col = n0 + nt * 8 + t4 * 2 + (e & 1);
          return col <= (e < 2 ? pos_a : pos_b) && col < seq.kv_len;
        },
        scale_log2, m, o, alpha, sum);
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + quad_sum(sum[r]);

    // O += P V: P's C fragments of two adjacent n8 tiles form one A fragment (k = 16 keys).
    const uint16_t* vs16 = reinterpret_cast<const uint16_t*>(vs);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t af[4] = {pack2<T>(sc[2 * kk][0], sc[2 * kk][1]),
                              pack2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                              pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                              pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        const uint16_t* vb = vs16 + (kk * 16 + t4 * 2) * LD + dt * 8 + g;
        const uint32_t bf[2] = {uint32_t(vb[0]) | (uint32_t(vb[LD]) << 16),
                                uint32_t(vb[8 * LD]) | (uint32_t(vb[9 * LD]) << 16)};
        mma16816<T>(o[dt], af, bf);
      }
    }
  }

  // Normalise and store this warp's rows that belong to the sequence.
  const float inv_a = l[0] > 0.0f ? 1.0f / l[0] : 0.0f;
  const float inv_b = l[1] > 0.0f ? 1.0f / l[1] : 0.0f;
  T* out = static_cast<T*>(a.out);
  T* out_a = out + int64_t(seq.q_begin + row_a) * q_stride + int64_t(h) * D + t4 * 2;
  T* out_b = out + int64_t(seq.q_begin + row_b) * q_stride + int64_t(h) * D + t4 * 2;
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
    if (row_a < seq.q_len)
      *reinterpret_cast<uint32_t*>(out_a + dt * 8) = pack2<T>(o[dt][0] * inv_a, o[dt][1] * inv_a);
    if (row_b < seq.q_len)
      *reinterpret_cast<uint32_t*>(out_b + dt * 8) = pack2<T>(o[dt][2] * inv_b, o[dt][3] * inv_b);
  }
}

}  // namespace

void launch_attention_prefill(DType dt, const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_seqs <= 0 || a.max_query_len < 2 || a.num_heads <= 0) return;
  dispatch_half_dim(dt, a.head_dim, [&](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;
    const dim3 grid(unsigned((a.max_query_len + kBlockM - 1) / kBlockM), unsigned(a.num_heads),
                    unsigned(a.num_seqs));
    prefill_kernel<T, D><<<grid, kThreads, smem_bytes<D>(), stream>>>(a);
  });
}

cudaError_t attention_prefill_init() {
  return for_each_half_dim([](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;
    return cudaFuncSetAttribute(prefill_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                smem_bytes<D>());
  });
}

}  // namespace troupe::cuda
