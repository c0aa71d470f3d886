// linear through cuBLASLt: out[T, N] = x[T, K] @ w[N, K]^T (+ bias[N]), row-major, f32
// accumulation (CUBLAS_COMPUTE_32F, which never uses TF32, so f32 matches the CPU closely).
// The bias rides the BIAS epilogue where cuBLASLt offers one; otherwise the caller adds it.
// Plans (descriptors + the heuristic's algorithm) are cached per shape, dtypes and pointer
// alignment, so a steady-state step makes no heuristic queries. Host-only (g++).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>

#include "cuda/lt_api.hpp"
#include "runtime/backend/dtype.hpp"

namespace troupe::cuda {

struct GemmArgs {
  DType in_dtype;  // x and w
  const void* x;   // [t, k]
  const void* w;   // [n, k]
  DType bias_dtype;
  const void* bias;  // [n] or nullptr
  DType out_dtype;
  void* out;  // [t, n]
  int64_t t, n, k;
};

class LtGemm {
 public:
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void set_workspace(void* workspace, size_t bytes) {
    workspace_ = workspace;
    workspace_bytes_ = bytes;
  }

  enum class Outcome { done, done_without_bias, unsupported };
  /// Enqueues the matmul. done_without_bias: the caller must add the bias itself;
  /// unsupported: cuBLASLt has no algorithm for this case (nothing was enqueued).
  [[nodiscard]] Outcome run(const GemmArgs& a, cudaStream_t stream);

 private:
  struct Key {
    DType in, out, bias;
    bool has_bias;
    int64_t t, n, k;
    uint32_t align_x, align_w, align_out;
    auto operator<=>(const Key&) const = default;
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;          // an algorithm was found
    bool bias_fused = false;  // the epilogue adds the bias
  };

  Plan make_plan(const Key& key, bool fuse_bias);
  void destroy(Plan& p);

  const LtApi* lt_;  // loaded by the constructor (lt_api.hpp)
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace troupe::cuda
