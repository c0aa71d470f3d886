// The one-shot all-reduce kernel of CustomAllReduce (custom_all_reduce.hpp has the protocol).
#include <cstdint>

#include "cuda/device_common.cuh"
#include "transport/nccl/custom_all_reduce_kernel.hpp"

namespace troupe::car {
namespace {

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// One call. Grid: kBlocks CTAs of kThreads; CTA b owns the 16-byte chunks b, b + kBlocks, ...
/// (elements, when the message is not made of whole aligned chunks) in both phases, so it only
/// needs the peers' CTAs b to have arrived.
template <class T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    one_shot_kernel(T* __restrict__ x, int64_t n, const Peers peers, int rank, int size,
                    uint32_t* __restrict__ counters, int* __restrict__ err, uint64_t timeout_ns) {
  __shared__ uint32_t gen_s;
  const int b = blockIdx.x, tid = threadIdx.x;
  if (tid == 0) gen_s = counters[b] + 1;
  __syncthreads();
  const uint32_t gen = gen_s;
  const size_t half = kDataOffset + size_t(gen & 1u) * peers.max_bytes;
  constexpr int kPer = 16 / int(sizeof(T));
  const int64_t units = kVec ? n / kPer : n;
  const int64_t stride = int64_t(kBlocks) * kThreads;

  // Phase 1: this CTA's share of x into this rank's half.
  char* mine = peers.base[rank] + half;
  for (int64_t i = int64_t(b) * kThreads + tid; i < units; i += stride) {
    if constexpr (kVec)
      reinterpret_cast<int4*>(mine)[i] = reinterpret_cast<const int4*>(x)[i];
    else
      reinterpret_cast<T*>(mine)[i] = x[i];
  }
  __syncthreads();
  // Arrive at every peer (and at self), then wait for every peer's CTA b.
  if (tid < size) {
    uint32_t* flags = reinterpret_cast<uint32_t*>(peers.base[tid]);
    store_release_sys(flags + b * kMaxRanks + rank, gen);
    const uint32_t* mine_flags = reinterpret_cast<const uint32_t*>(peers.base[rank]);
    const uint64_t start = global_ns();
    while (int32_t(load_acquire_sys(mine_flags + b * kMaxRanks + tid) - gen) < 0) {
      if (global_ns() - start > timeout_ns) {
        atomicOr(err, 1 << tid);  // which peer did not come
        break;
      }
    }
  }
  __syncthreads();

  // Phase 2: the sum over ranks, in rank order, of this CTA's share.
  for (int64_t i = int64_t(b) * kThreads + tid; i < units; i += stride) {
    if constexpr (kVec) {
      float acc[kPer];
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[e] = 0.0f;
      for (int r = 0; r < size; ++r) {
        const int4 v = __ldcv(reinterpret_cast<const int4*>(peers.base[r] + half) + i);
        const T* t = reinterpret_cast<const T*>(&v);
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[e] = __fadd_rn(acc[e], cuda::to_f32(t[e]));
      }
      int4 o;
      T* ot = reinterpret_cast<T*>(&o);
#pragma unroll
      for (int e = 0; e < kPer; ++e) ot[e] = cuda::from_f32<T>(acc[e]);
      reinterpret_cast<int4*>(x)[i] = o;
    } else {
      float acc = 0.0f;
      for (int r = 0; r < size; ++r) {
        const T* src = reinterpret_cast<const T*>(peers.base[r] + half);
        acc = __fadd_rn(acc, cuda::to_f32(src[i]));
      }
      x[i] = cuda::from_f32<T>(acc);
    }
  }
  if (tid == 0) counters[b] = gen;
}

template <class T>
cudaError_t launch_typed(void* x, int64_t n, const Peers& peers, int rank, int size,
                         uint32_t* counters, int* err, uint64_t timeout_ns, cudaStream_t stream) {
  const bool vec = (n * int64_t(sizeof(T))) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (vec)
    one_shot_kernel<T, true><<<kBlocks, kThreads, 0, stream>>>(static_cast<T*>(x), n, peers, rank,
                                                               size, counters, err, timeout_ns);
  else
    one_shot_kernel<T, false><<<kBlocks, kThreads, 0, stream>>>(static_cast<T*>(x), n, peers, rank,
                                                                size, counters, err, timeout_ns);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_one_shot(int dtype, void* x, int64_t n, const Peers& peers, int rank, int size,
                            uint32_t* counters, int* err, uint64_t timeout_ns,
                            cudaStream_t stream) {
  switch (dtype) {
    case 0:
      return launch_typed<float>(x, n, peers, rank, size, counters, err, timeout_ns, stream);
    case 1:
      return launch_typed<__half>(x, n, peers, rank, size, counters, err, timeout_ns, stream);
    default:
      return launch_typed<__nv_bfloat16>(x, n, peers, rank, size, counters, err, timeout_ns,
                                         stream);
  }
}

}  // namespace troupe::car
