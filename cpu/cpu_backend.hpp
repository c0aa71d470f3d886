// The CPU backend: the reference implementation of every op in runtime/backend/backend.hpp,
// against which the CUDA kernels are tested, and a usable (if slow) engine backend.
//
// - Computes in float32 whatever the checkpoint's dtype (compute_dtype() is always f32), so
//   every float tensor passed to an op must be f32; anything else is a troupe::Error.
// - "Device" memory is 64-byte aligned host memory; upload/download/copy are memcpy; ops
//   run synchronously on the calling thread and a small pool, so synchronize() is a no-op.
// - linear is OpenBLAS's cblas_sgemm (threaded by OpenBLAS itself); the other ops are split
//   over rows across the backend's own thread pool.
// - Every op checks shapes, dtypes and devices, and the index values it follows (token ids,
//   KV slots, block tables, gather indices), and throws troupe::Error naming the op, the
//   argument and its shape.
//
// Threads: a CpuBackend object is NOT thread-safe. Use one Backend object per thread (as
// each executor does). Several objects may run concurrently in one process.
#pragma once

#include <memory>

#include "runtime/backend/backend.hpp"

namespace troupe {

/// `num_threads` is the number of threads each op may use (the caller included); 0 means
/// std::thread::hardware_concurrency(). A positive value also caps OpenBLAS's threads, which
/// is a process-wide OpenBLAS setting: the last backend created with a positive value wins.
[[nodiscard]] std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);

}  // namespace troupe
