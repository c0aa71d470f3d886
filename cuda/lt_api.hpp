// cuBLASLt, opened the first time a CUDA backend needs it rather than when the process starts.
//
// Linked directly, libcublasLt runs its static initialisers in every process that links
// troupe_cuda, before main(): ~0.3 s of CPU and ~25,000 page faults (2026-12-06, the 2-core
// development machine: 85% of the 0.36 s `troupe --version` took), paid by CPU-only runs, by
// every test process and by `troupe bench serving`'s client. Opened with dlopen on first use,
// it costs only the processes that build a CUDA backend, and a machine without cuBLAS still
// runs the CPU backend. Host-only (g++).
#pragma once

#include <cublasLt.h>

#include <string>

namespace troupe::cuda {

/// The cuBLASLt entry points troupe calls: X(member, cuBLASLt's name), listed once here for
/// LtApi's members, load_lt_api's dlsym calls and the test that checks them.
#define TROUPE_LT_ENTRY_POINTS(X)                                   \
  X(create, cublasLtCreate)                                         \
  X(destroy, cublasLtDestroy)                                       \
  X(get_status_name, cublasLtGetStatusName)                         \
  X(matmul, cublasLtMatmul)                                         \
  X(algo_get_heuristic, cublasLtMatmulAlgoGetHeuristic)             \
  X(desc_create, cublasLtMatmulDescCreate)                          \
  X(desc_destroy, cublasLtMatmulDescDestroy)                        \
  X(desc_set_attribute, cublasLtMatmulDescSetAttribute)             \
  X(preference_create, cublasLtMatmulPreferenceCreate)              \
  X(preference_destroy, cublasLtMatmulPreferenceDestroy)            \
  X(preference_set_attribute, cublasLtMatmulPreferenceSetAttribute) \
  X(layout_create, cublasLtMatrixLayoutCreate)                      \
  X(layout_destroy, cublasLtMatrixLayoutDestroy)

/// Those entry points, resolved from the library.
struct LtApi {
#define TROUPE_LT_MEMBER(member, name) decltype(&name) member = nullptr;
  TROUPE_LT_ENTRY_POINTS(TROUPE_LT_MEMBER)
#undef TROUPE_LT_MEMBER
};

/// The soname of the cuBLASLt troupe was compiled against: "libcublasLt.so.<CUBLAS_VER_MAJOR>".
std::string lt_library_name();

/// Opens `library` (dlopen, RTLD_NOW | RTLD_LOCAL; found as the dynamic loader finds any
/// library: LD_LIBRARY_PATH, the binary's RUNPATH, ld.so.cache) and resolves every entry point.
/// Throws troupe::Error naming the library and dlerror()'s reason. The library stays open.
LtApi load_lt_api(const std::string& library);

/// This process's cuBLASLt: lt_library_name() loaded on the first call (thread-safe). If that
/// failed, every call throws the same error.
const LtApi& lt_api();

}  // namespace troupe::cuda
