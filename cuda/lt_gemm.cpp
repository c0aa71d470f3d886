#include "cuda/lt_gemm.hpp"

#include "cuda/cuda_check.hpp"

namespace troupe::cuda {
namespace {

// Steps vary T, so plans accumulate; past this many the cache starts over.
constexpr size_t kMaxPlans = 4096;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

}  // namespace

LtGemm::LtGemm() : lt_(&lt_api()) {
  check_cublas(lt_->create(&handle_), "cublasLtCreate");
}

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) destroy(plan);
  if (handle_ != nullptr) lt_->destroy(handle_);
}

void LtGemm::destroy(Plan& p) {
  if (p.a != nullptr) lt_->layout_destroy(p.a);
  if (p.b != nullptr) lt_->layout_destroy(p.b);
  if (p.c != nullptr) lt_->layout_destroy(p.c);
  if (p.desc != nullptr) lt_->desc_destroy(p.desc);
  p = Plan{};
}

// Row-major out[T, N] = x[T, K] w[N, K]^T is, in cuBLASLt's column-major terms,
// D[N, T] = op(A)[N, K] B[K, T] with A = w seen as a K x N matrix (ld K, transposed) and
// B = x seen as K x T (ld K); D is N x T with ld N.
LtGemm::Plan LtGemm::make_plan(const Key& key, bool fuse_bias) {
  Plan p;
  const char* what = "linear: cuBLASLt plan";
  try {
    check_cublas(lt_->desc_create(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    check_cublas(lt_->desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)),
                 what);
    check_cublas(lt_->desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)),
                 what);
    if (fuse_bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      check_cublas(
          lt_->desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), what);
      const cudaDataType_t bt = cuda_type(key.bias);
      check_cublas(
          lt_->desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)),
          what);
    }
    const auto in = cuda_type(key.in), out = cuda_type(key.out);
    check_cublas(lt_->layout_create(&p.a, in, uint64_t(key.k), uint64_t(key.n), key.k), what);
    check_cublas(lt_->layout_create(&p.b, in, uint64_t(key.k), uint64_t(key.t), key.k), what);
    check_cublas(lt_->layout_create(&p.c, out, uint64_t(key.n), uint64_t(key.t), key.n), what);

    cublasLtMatmulPreference_t pref = nullptr;
    check_cublas(lt_->preference_create(&pref), what);
    const uint64_t ws = workspace_bytes_;
    lt_->preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    // Tell the heuristic how the actual pointers are aligned (views may start anywhere).
    const uint32_t aa = key.align_w, ab = key.align_x, ac = key.align_out;
    lt_->preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa,
                                  sizeof(aa));
    lt_->preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab,
                                  sizeof(ab));
    lt_->preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac,
                                  sizeof(ac));
    lt_->preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac,
                                  sizeof(ac));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        lt_->algo_get_heuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    lt_->preference_destroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
      p.algo = result.algo;
      p.ok = true;
      p.bias_fused = fuse_bias;
    } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
      check_cublas(st, "linear: cublasLtMatmulAlgoGetHeuristic");
    }
  } catch (...) {
    destroy(p);
    throw;
  }
  return p;
}

LtGemm::Outcome LtGemm::run(const GemmArgs& a, cudaStream_t stream) {
  const Key key{a.in_dtype,
                a.out_dtype,
                a.bias != nullptr ? a.bias_dtype : a.out_dtype,
                a.bias != nullptr,
                a.t,
                a.n,
                a.k,
                alignment_of(a.x),
                alignment_of(a.w),
                alignment_of(a.out)};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    if (plans_.size() >= kMaxPlans) {
      for (auto& [k, plan] : plans_) destroy(plan);
      plans_.clear();
    }
    Plan plan;
    // The epilogue takes the bias in D's type for sure; other combinations get a separate add.
    if (key.has_bias && key.bias == key.out) {
      plan = make_plan(key, /*fuse_bias=*/true);
      if (!plan.ok) {
        destroy(plan);
        plan = make_plan(key, /*fuse_bias=*/false);
      }
    } else {
      plan = make_plan(key, /*fuse_bias=*/false);
    }
    it = plans_.emplace(key, plan).first;
  }
  Plan& p = it->second;
  if (!p.ok) return Outcome::unsupported;
  if (p.bias_fused) {
    const void* bias = a.bias;
    check_cublas(
        lt_->desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
        "linear: bias pointer");
  }
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st =
      lt_->matmul(handle_, p.desc, &alpha, a.w, p.a, a.x, p.b, &beta, a.out, p.c, a.out, p.c,
                  &p.algo, workspace_, workspace_bytes_, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    p.ok = false;  // remember: this case goes to the fallback from now on
    return Outcome::unsupported;
  }
  check_cublas(st, "linear: cublasLtMatmul");
  return p.bias_fused || !key.has_bias ? Outcome::done : Outcome::done_without_bias;
}

}  // namespace troupe::cuda
