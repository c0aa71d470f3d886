// L2 prefetch of a weight matrix (Backend::prefetch_weight): bulk prefetches
// (cp.async.bulk.prefetch.L2, sm_90) issued by a small grid that then exits, so DRAM fills L2
// with the matrix while the next, latency-bound kernels run (decode attention at small batches).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"

namespace troupe::cuda {
namespace {

constexpr int kPrefetchThreads = 32;

// Thread i of the grid prefetches bytes [i * chunk, min((i + 1) * chunk, bytes)) of p. The
// prefetches touch weights, which no kernel writes, so they go out before pdl_wait; the wait
// stays, so this grid ends only after the previous kernel (launch_pdl's rule for the next one).
__global__ void __launch_bounds__(kPrefetchThreads)
    l2_prefetch_kernel(const char* p, uint64_t bytes, uint32_t chunk, bool pdl_early) {
  const uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t off = i * chunk;
  if (off < bytes) {
    const uint32_t size = uint32_t(min(uint64_t(chunk), bytes - off));
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(size)
                 : "memory");
  }
  pdl_wait();
  pdl_trigger(pdl_early);
}

}  // namespace

void launch_l2_prefetch(const void* p, size_t bytes, int num_sms, cudaStream_t stream) {
  // Bulk copies take 16-byte aligned addresses and sizes: trim to the aligned middle.
  const auto start = (reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t(15);
  const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~uintptr_t(15);
  if (end <= start) return;
  const uint64_t n = end - start;
  // One chunk per thread of one 32-thread CTA per SM: every SM's bulk-copy unit takes a share.
  const uint64_t threads = uint64_t(std::max(num_sms, 1)) * kPrefetchThreads;
  const uint64_t chunk = ((n + threads - 1) / threads + 15) & ~uint64_t(15);
  const auto blocks = unsigned((n + chunk * kPrefetchThreads - 1) / (chunk * kPrefetchThreads));
  launch_pdl(l2_prefetch_kernel, dim3(blocks), dim3(kPrefetchThreads), 0, stream,
             reinterpret_cast<const char*>(start), n, uint32_t(chunk));
}

}  // namespace troupe::cuda
