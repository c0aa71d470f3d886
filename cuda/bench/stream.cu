// troupe_cuda_opbench's "stream" group: how fast this GPU can read HBM, measured three ways,
// the ceiling for memory-bound kernels (decode attention streams the KV cache) next to the
// device-to-device copy rate (bytes read + written) that docs/benchmarks.md uses as the floor.
//
//   contiguous : every thread reads 16-byte vectors, four in flight, grid-stride over the buffer;
//   kv rows    : decode attention's pattern over a paged cache laid out [slot][kv head][d]: one
//                CTA per (sequence, KV head) reads that head's 256-byte K and V rows of each of
//                its keys (a 2 KB stride between keys at 8 KV heads, d = 128, bf16);
//   head-major : the same bytes laid out [block][kv head][16 keys][d], so each (block, head)
//                is a 4 KB run;
//   bulk (TMA) : one thread per CTA streams 16 KB chunks into a 4-stage shared-memory ring with
//                cp.async.bulk and mbarriers, three CTAs per SM.
// Every kernel folds what it read into a value it writes only if it is a sentinel, so the reads
// cannot be optimised away.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "cuda/bench/stream.hpp"

namespace troupe::cuda_bench {
namespace {

__global__ void read_contiguous(const uint4* __restrict__ src, size_t n, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldcs(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// grid (kv_heads, seqs), 128 threads; K and V are [seqs * ctx][kv_heads][128] bf16 (256 B rows).
__global__ void read_kv_rows(const uint4* __restrict__ k, const uint4* __restrict__ v, int ctx,
                             unsigned* sink) {
  const int h = blockIdx.x, heads = gridDim.x, s = blockIdx.y;
  constexpr int kChunks = 16;  // 16-byte chunks per 256-byte row
  const int total = ctx * kChunks;
  unsigned acc = 0;
  int i = threadIdx.x;
  for (; i + 3 * int(blockDim.x) < total; i += 4 * blockDim.x) {
    uint4 a[4], b[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = i + u * blockDim.x;
      const size_t off =
          (size_t(s) * ctx + j / kChunks) * heads * kChunks + size_t(h) * kChunks + j % kChunks;
      a[u] = __ldcs(k + off);
      b[u] = __ldcs(v + off);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= a[u].x ^ a[u].w ^ b[u].y ^ b[u].z;
  }
  for (; i < total; i += blockDim.x) {
    const size_t off =
        (size_t(s) * ctx + i / kChunks) * heads * kChunks + size_t(h) * kChunks + i % kChunks;
    const uint4 a = __ldcs(k + off), b = __ldcs(v + off);
    acc ^= a.x ^ b.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// The same K and V bytes laid out [block][kv head][16 keys][128], so a CTA reads 4 KB runs:
// grid (kv_heads, seqs), 128 threads, blocks_per_seq blocks of 16 keys a sequence.
__global__ void read_kv_head_major(const uint4* __restrict__ k, const uint4* __restrict__ v,
                                   int blocks_per_seq, unsigned* sink) {
  const int h = blockIdx.x, heads = gridDim.x, s = blockIdx.y;
  constexpr int kChunks = 16 * 16;  // 16-byte chunks per (block, head): 16 keys x 256 bytes
  const int total = blocks_per_seq * kChunks;
  unsigned acc = 0;
  int i = threadIdx.x;
  const auto at = [&](int j) {
    return (size_t(s) * blocks_per_seq + j / kChunks) * heads * kChunks + size_t(h) * kChunks +
           j % kChunks;
  };
  for (; i + 3 * int(blockDim.x) < total; i += 4 * blockDim.x) {
    uint4 a[4], b[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const size_t off = at(i + u * blockDim.x);
      a[u] = __ldcs(k + off);
      b[u] = __ldcs(v + off);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= a[u].x ^ a[u].w ^ b[u].y ^ b[u].z;
  }
  for (; i < total; i += blockDim.x) {
    const uint4 a = __ldcs(k + at(i)), b = __ldcs(v + at(i));
    acc ^= a.x ^ b.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

constexpr int kBulkChunk = 16384;
constexpr int kBulkStages = 4;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One CTA of 32 threads (lane 0 works) streams bytes_per_cta from src + blockIdx.x * that.
__global__ void read_bulk(const char* __restrict__ src, size_t bytes_per_cta, unsigned* sink) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t bar[kBulkStages];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < kBulkStages; ++s)
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const char* base = src + size_t(blockIdx.x) * bytes_per_cta;
  const int n = int(bytes_per_cta / kBulkChunk);
  const auto issue = [&](int i) {
    const int s = i % kBulkStages;
    const uint32_t b = smem_addr(&bar[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(kBulkChunk)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(smem_addr(ring + s * kBulkChunk)),
        "l"(base + size_t(i) * kBulkChunk), "r"(kBulkChunk), "r"(b)
        : "memory");
  };
  for (int i = 0; i < kBulkStages && i < n; ++i) issue(i);
  unsigned acc = 0;
  for (int i = 0; i < n; ++i) {
    const int s = i % kBulkStages;
    const uint32_t b = smem_addr(&bar[s]);
    const uint32_t phase = uint32_t(i / kBulkStages) & 1u;
    uint32_t done = 0;
    while (!done)
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(b), "r"(phase)
          : "memory");
    acc ^= *reinterpret_cast<const unsigned*>(ring + s * kBulkChunk);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (i + kBulkStages < n) issue(i + kBulkStages);
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

#define STREAM_CHECK(call)                                                   \
  do {                                                                       \
    const cudaError_t e_ = (call);                                           \
    if (e_ != cudaSuccess) {                                                 \
      std::printf("stream: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      return;                                                                \
    }                                                                        \
  } while (0)

template <class Launch>
double time_ms(int iters, cudaEvent_t a, cudaEvent_t b, Launch&& launch) {
  for (int i = 0; i < 2; ++i) launch();
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) launch();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, a, b);
  return double(ms) / iters;
}

}  // namespace

void bench_stream(int iters) {
  int sms = 0;
  STREAM_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t bytes = size_t(4) << 30;  // 4 GiB: far past the 50 MB L2
  void* buf = nullptr;
  unsigned* sink = nullptr;
  STREAM_CHECK(cudaMalloc(&buf, bytes));
  STREAM_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  STREAM_CHECK(cudaMemset(buf, 1, bytes));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const auto report = [&](const char* what, double moved, double ms) {
    std::printf("%-58s %10.1f us %9.1f GB/s\n", what, ms * 1e3, moved / (ms * 1e-3) / 1e9);
    std::fflush(stdout);
  };
  {
    const double ms = time_ms(iters, a, b, [&] {
      cudaMemcpyAsync(static_cast<char*>(buf) + bytes / 2, buf, bytes / 2,
                      cudaMemcpyDeviceToDevice);
    });
    report("stream: cudaMemcpy D2D 2 GiB (read + write counted)", double(bytes), ms);
  }
  for (int per_sm : {4, 8, 16}) {
    for (int threads : {256, 512}) {
      const double ms = time_ms(iters, a, b, [&] {
        read_contiguous<<<sms * per_sm, threads>>>(static_cast<const uint4*>(buf), bytes / 16,
                                                   sink);
      });
      char name[96];
      std::snprintf(name, sizeof name, "stream: read 4 GiB contiguous, %d CTAs/SM x %d threads",
                    per_sm, threads);
      report(name, double(bytes), ms);
    }
  }
  {
    // The 1000 x 1000 run's steady decode step: 232 sequences x 1,536 keys, 8 KV heads, d = 128.
    const int seqs = 232, ctx = 1536, heads = 8;
    const size_t half = size_t(seqs) * ctx * heads * 256;  // K, then V
    const auto* k = static_cast<const uint4*>(buf);
    const auto* v = reinterpret_cast<const uint4*>(static_cast<const char*>(buf) + half);
    // 16 KB in flight a CTA (128 threads x 8 loads of 16 bytes); unused dynamic shared memory
    // caps the CTAs an SM holds, so the bytes in flight an SM: 2 to 16 CTAs, 32 to 256 KB.
    STREAM_CHECK(cudaFuncSetAttribute(read_kv_rows, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      112 * 1024));
    STREAM_CHECK(cudaFuncSetAttribute(read_kv_head_major,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, 112 * 1024));
    for (int per_sm : {16, 8, 4, 2}) {
      const int smem = per_sm == 16 ? 0 : (228 / per_sm - 2) * 1024;
      const double ms = time_ms(iters, a, b, [&] {
        read_kv_head_major<<<dim3(heads, seqs), 128, smem>>>(k, v, ctx / 16, sink);
      });
      char name[112];
      std::snprintf(name, sizeof name,
                    "stream: KV head-major 232 x 1536 x 8 heads, <= %d CTAs/SM (%d KB)", per_sm,
                    16 * per_sm);
      report(name, 2.0 * double(half), ms);
    }
    for (int per_sm : {16, 8, 4, 2}) {
      const int smem = per_sm == 16 ? 0 : (228 / per_sm - 2) * 1024;
      const double ms = time_ms(
          iters, a, b, [&] { read_kv_rows<<<dim3(heads, seqs), 128, smem>>>(k, v, ctx, sink); });
      char name[112];
      std::snprintf(name, sizeof name,
                    "stream: KV rows 232 seqs x 1536 keys x 8 heads, <= %d CTAs/SM (%d KB)", per_sm,
                    16 * per_sm);
      report(name, 2.0 * double(half), ms);
    }
  }
  {
    const int per_sm = 3;
    const int ctas = sms * per_sm;
    const size_t per_cta = (bytes / ctas) / kBulkChunk * kBulkChunk;
    const int smem = kBulkChunk * kBulkStages;
    STREAM_CHECK(
        cudaFuncSetAttribute(read_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const double ms = time_ms(iters, a, b, [&] {
      read_bulk<<<ctas, 32, smem>>>(static_cast<const char*>(buf), per_cta, sink);
    });
    report("stream: read 4 GiB with cp.async.bulk, 16 KB x 4 stages, 3 CTAs/SM",
           double(per_cta) * ctas, ms);
  }
  STREAM_CHECK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(sink);
  cudaFree(buf);
}

}  // namespace troupe::cuda_bench
