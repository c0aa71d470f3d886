// The ops a tensor-parallel program adds (runtime/backend/backend.hpp, "tensor parallelism"):
// the vocab-parallel embedding. Run only when a model is split over two or more ranks, so the
// kernels of a one-GPU engine are untouched by them.
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 256;

// One block per token row: the table row of an id inside this shard's range, else zeros. Ids
// outside the vocabulary set kErrEmbeddingId (and leave a zero row).
__global__ void __launch_bounds__(kThreads)
    embedding_shard_kernel(const uint32_t* __restrict__ table, int64_t rows, int64_t vocab_start,
                           int64_t vocab_size, const int32_t* __restrict__ ids,
                           uint32_t* __restrict__ out, int64_t n_tokens, int64_t row_words,
                           int* err) {
  for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
    const int64_t id = ids[t];
    const int64_t row = id - vocab_start;
    uint32_t* dst = out + t * row_words;
    if (id < 0 || id >= vocab_size) {
      if (threadIdx.x == 0) atomicOr(err, int(kErrEmbeddingId));
    }
    if (id < 0 || id >= vocab_size || row < 0 || row >= rows) {
      for (int64_t w = threadIdx.x; w < row_words; w += kThreads) dst[w] = 0u;
      continue;
    }
    const uint32_t* src = table + row * row_words;
    for (int64_t w = threadIdx.x; w < row_words; w += kThreads) dst[w] = src[w];
  }
}

}  // namespace

void launch_embedding_shard(const void* table, int64_t rows, int64_t vocab_start,
                            int64_t vocab_size, const int32_t* ids, void* out, int64_t n_tokens,
                            int64_t row_bytes, int* err, cudaStream_t stream) {
  if (n_tokens <= 0 || row_bytes <= 0) return;
  const unsigned grid = unsigned(n_tokens < (int64_t(1) << 30) ? n_tokens : (int64_t(1) << 30));
  embedding_shard_kernel<<<grid, kThreads, 0, stream>>>(
      static_cast<const uint32_t*>(table), rows, vocab_start, vocab_size, ids,
      static_cast<uint32_t*>(out), n_tokens, row_bytes / 4, err);
}

}  // namespace troupe::cuda
