// Scenario "nccl": one rank per GPU (device = rank) joins with the test's unique id (id=hex),
// all_reduce_sum in f32 and bf16 and all_gather, on its own stream; reports the largest error
// against a float64 reference (in units of the dtype's rounding bound) and a hash of the bits.
#ifdef TROUPE_PEER_NCCL

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "peer.hpp"
#include "runtime/backend/dtype.hpp"
#include "runtime/error.hpp"
#include "transport/nccl/custom_all_reduce.hpp"
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

// Scenario "custom-ar": CustomAllReduce with the test's bootstrap; rank r on device r % the
// devices there are (two ranks share a GPU where there is one). For each size (elements) and
// dtype: the sum of every rank's data_for(r, n, salt) rounded to the dtype, eagerly, then the
// same call captured in a CUDA graph and replayed after fresh uploads; reports whether the bits
// equal the sum in rank order in float (one rounding to the dtype), and a hash.
void scenario_custom_ar(const Args& a) {
  const auto rank = int32_t(a.num("rank")), size = int32_t(a.num("size"));
  int devices = 0;
  cuda_ok(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  cuda_ok(cudaSetDevice(rank % devices), "cudaSetDevice");
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  CustomAllReduceSettings s;
  s.timeout = std::chrono::milliseconds(a.num("timeout_ms", 10000));
  CustomAllReduce c(rank, size, s);
  c.connect(bootstrap(c.blob()), stream);
  // With nccl_id= (one GPU per rank): NCCL on the same data, to compare bits.
  std::unique_ptr<NcclCollectives> nccl;
  if (a.kv.count("nccl_id"))
    nccl = std::make_unique<NcclCollectives>(rank, size, from_hex(a.str("nccl_id")), stream);
  const auto run = [&](void* dev, const std::vector<uint8_t>& host, DType dt, int64_t n,
                       bool graph) {
    cuda_ok(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream),
            "upload");
    const Tensor t(dev, dt, Device{DeviceKind::cuda, rank % devices}, {n});
    if (!graph) {
      c.all_reduce_sum(t);
      return;
    }
    cudaGraph_t g;
    cudaGraphExec_t exec;
    cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
    c.all_reduce_sum(t);
    cuda_ok(cudaStreamEndCapture(stream, &g), "end capture");
    cuda_ok(cudaGraphInstantiate(&exec, g, 0), "instantiate");
    for (int i = 0; i < 3; ++i) {  // replays from fresh inputs: each gives the same sum
      if (i > 0)
        cuda_ok(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream),
                "upload");
      cuda_ok(cudaGraphLaunch(exec, stream), "graph launch");
    }
    c.synchronize();
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  };
  for (int64_t n64 : a.nums("sizes")) {
    const auto n = size_t(n64);
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const size_t es = dtype_size(dt);
      // Every rank's data as the dtype holds it, and the expected sum.
      std::vector<std::vector<float>> all;
      for (int32_t r = 0; r < size; ++r) {
        std::vector<uint8_t> b(n * es);
        all.push_back(data_for(r, n, 3));
        convert_floats(all.back().data(), DType::f32, b.data(), dt, n);
        convert_floats(b.data(), dt, all.back().data(), DType::f32, n);
      }
      std::vector<float> sum(n, 0.0f);
      for (int32_t r = 0; r < size; ++r)
        for (size_t i = 0; i < n; ++i) sum[i] += all[size_t(r)][i];
      std::vector<uint8_t> want(n * es), host(n * es), got(n * es);
      convert_floats(sum.data(), DType::f32, want.data(), dt, n);
      convert_floats(all[size_t(rank)].data(), DType::f32, host.data(), dt, n);
      void* dev = nullptr;
      cuda_ok(cudaMalloc(&dev, n * es + 16), "cudaMalloc");
      for (const bool graph : {false, true}) {
        run(dev, host, dt, int64_t(n), graph);
        c.synchronize();
        cuda_ok(cudaMemcpy(got.data(), dev, n * es, cudaMemcpyDeviceToHost), "download");
        say(fmt::format("RESULT op=custom_ar dtype={} n={} graph={} exact={} hash={}",
                        dtype_name(dt), n, int(graph), int(got == want),
                        hash_hex(got.data(), got.size())));
      }
      if (nccl) {  // NCCL's sum of the same data: the largest distance in units in the last place
        cuda_ok(cudaMemcpy(dev, host.data(), n * es, cudaMemcpyHostToDevice), "upload");
        nccl->all_reduce_sum(
            Tensor(dev, dt, Device{DeviceKind::cuda, rank % devices}, {int64_t(n)}));
        nccl->synchronize();
        std::vector<uint8_t> theirs(n * es);
        cuda_ok(cudaMemcpy(theirs.data(), dev, n * es, cudaMemcpyDeviceToHost), "download");
        run(dev, host, dt, int64_t(n), false);
        c.synchronize();
        cuda_ok(cudaMemcpy(got.data(), dev, n * es, cudaMemcpyDeviceToHost), "download");
        int64_t worst = 0;
        for (size_t i = 0; i < n; ++i) {
          int64_t x = 0, y = 0;  // sign-magnitude bit patterns as ordered integers
          std::memcpy(&x, got.data() + i * es, es);
          std::memcpy(&y, theirs.data() + i * es, es);
          const int64_t sign = int64_t(1) << (8 * es - 1);
          x = (x & sign) ? -(x & (sign - 1)) : x;
          y = (y & sign) ? -(y & (sign - 1)) : y;
          worst = std::max(worst, std::abs(x - y));
        }
        say(fmt::format("RESULT op=custom_vs_nccl dtype={} n={} ulps={}", dtype_name(dt), n,
                        worst));
      }
      cudaFree(dev);
    }
  }
  if (a.num("stop_rank", -1) >= 0) {  // one rank stops calling; the other must fail in time
    std::vector<uint8_t> host(64 * 4, 0);
    void* dev = nullptr;
    cuda_ok(cudaMalloc(&dev, host.size()), "cudaMalloc");
    if (rank != a.num("stop_rank")) {
      try {
        run(dev, host, DType::f32, 64, false);
        c.synchronize();
        say("RESULT op=stopped_peer error=none");
      } catch (const std::exception& e) {
        std::string msg = e.what();  // one token on the RESULT line
        std::replace(msg.begin(), msg.end(), ' ', '_');
        say("RESULT op=stopped_peer error=" + msg);
      }
    } else {  // stays alive (its buffer mapped) until the other rank has given up
      std::this_thread::sleep_for(s.timeout + std::chrono::seconds(2));
    }
    cudaFree(dev);
  }
  cudaStreamDestroy(stream);
}

}  // namespace troupe::peer

#endif  // TROUPE_PEER_NCCL
