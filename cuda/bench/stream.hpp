// troupe_cuda_opbench's "stream" group (stream.cu): HBM read rates, the ceiling for
// memory-bound kernels.
#pragma once

namespace troupe::cuda_bench {

/// Prints the device-to-device copy rate and three read rates (contiguous 16-byte loads, decode
/// attention's K/V row pattern, cp.async.bulk), each the mean of `iters` runs.
void bench_stream(int iters);

}  // namespace troupe::cuda_bench
