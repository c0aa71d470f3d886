// Scenario "nccl": one rank per GPU (device = rank) joins with the test's unique id (id=hex),
// all_reduce_sum in f32 and bf16 and all_gather, on its own stream; reports the largest error
// against a float64 reference (in units of the dtype's rounding bound) and a hash of the bits.
#ifdef TROUPE_PEER_NCCL

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

#include "peer.hpp"
#include "runtime/backend/dtype.hpp"
#include "runtime/error.hpp"
#include "transport/nccl/nccl_collectives.hpp"

namespace troupe::peer {

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("peer: {} failed: {}", what, cudaGetErrorString(e));
}

}  // namespace

void scenario_nccl(const Args& a) {
  const auto rank = int32_t(a.num("rank")), size = int32_t(a.num("size"));
  cuda_ok(cudaSetDevice(rank), "cudaSetDevice");
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  NcclCollectives c(rank, size, from_hex(a.str("id")), stream,
                    NcclSettings{std::chrono::milliseconds(a.num("timeout_ms", 60000))});
  for (int64_t n64 : a.nums("sizes")) {
    const size_t n = size_t(n64);
    std::vector<std::vector<float>> all;
    for (int32_t r = 0; r < size; ++r) all.push_back(data_for(r, n, 1));
    for (DType dt : {DType::f32, DType::bf16}) {
      const size_t es = dtype_size(dt);
      std::vector<uint8_t> host(n * es);
      convert_floats(all[size_t(rank)].data(), DType::f32, host.data(), dt, n);
      void* dev = nullptr;
      cuda_ok(cudaMalloc(&dev, n * es), "cudaMalloc");
      cuda_ok(cudaMemcpyAsync(dev, host.data(), n * es, cudaMemcpyHostToDevice, stream), "upload");
      c.all_reduce_sum(Tensor(dev, dt, Device{DeviceKind::cuda, rank}, {int64_t(n)}));
      cuda_ok(cudaMemcpyAsync(host.data(), dev, n * es, cudaMemcpyDeviceToHost, stream),
              "download");
      c.synchronize();
      std::vector<float> got(n);
      convert_floats(host.data(), dt, got.data(), DType::f32, n);
      // Bound: each of size-1 additions rounds once (unit roundoff u of the dtype), inputs
      // rounded to the dtype too.
      const double u = dt == DType::f32 ? 0x1p-24 : 0x1p-8;
      double worst = 0;
      for (size_t i = 0; i < n; ++i) {
        double ref = 0, mag = 0;
        for (int32_t r = 0; r < size; ++r) {
          ref += all[size_t(r)][i];
          mag += std::fabs(all[size_t(r)][i]);
        }
        worst = std::max(worst, std::fabs(got[i] - ref) / (mag * u * double(size + 1)));
      }
      say(fmt::format("RESULT op=all_reduce_sum dtype={} n={} err_bound={:.3f} hash={}",
                      dtype_name(dt), n, worst, hash_hex(host.data(), host.size())));
      cudaFree(dev);
    }
    std::vector<float> in = data_for(rank, n, 2), out(n * size_t(size));
    void *din = nullptr, *dout = nullptr;
    cuda_ok(cudaMalloc(&din, n * 4), "cudaMalloc");
    cuda_ok(cudaMalloc(&dout, out.size() * 4), "cudaMalloc");
    cuda_ok(cudaMemcpyAsync(din, in.data(), n * 4, cudaMemcpyHostToDevice, stream), "upload");
    c.all_gather(Tensor(din, DType::f32, Device{DeviceKind::cuda, rank}, {int64_t(n)}),
                 Tensor(dout, DType::f32, Device{DeviceKind::cuda, rank}, {size, int64_t(n)}));
    cuda_ok(cudaMemcpyAsync(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost, stream),
            "download");
    c.synchronize();
    bool same = true;
    for (int32_t r = 0; r < size; ++r)
      same = same && std::memcmp(out.data() + size_t(r) * n, data_for(r, n, 2).data(), n * 4) == 0;
    say(fmt::format("RESULT op=all_gather dtype=float32 n={} exact={} hash={}", n, int(same),
                    hash_hex(out.data(), out.size() * 4)));
    cudaFree(din);
    cudaFree(dout);
  }
  cudaStreamDestroy(stream);
}

}  // namespace troupe::peer

#endif  // TROUPE_PEER_NCCL
