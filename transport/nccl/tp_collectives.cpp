#include "transport/nccl/tp_collectives.hpp"

#include <cuda_runtime.h>

#include "runtime/error.hpp"

namespace troupe {

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("tensor-parallel collectives: {} failed: {}", what, cudaGetErrorString(e));
  }
}

}  // namespace

CudaTpCollectives::CudaTpCollectives(std::shared_ptr<NcclCollectives> nccl,
                                     std::shared_ptr<CustomAllReduce> custom, void* stream_ptr)
    : nccl_(std::move(nccl)), custom_(std::move(custom)) {
  if (!nccl_) fail("tensor-parallel collectives: no NCCL communicator");
  if (!custom_ || nccl_->size() == 1) return;
  if (custom_->size() != nccl_->size() || custom_->rank() != nccl_->rank())
    fail("tensor-parallel collectives: the custom all-reduce is rank {} of {}, NCCL rank {} of {}",
         custom_->rank(), custom_->size(), nccl_->rank(), nccl_->size());
  auto* stream = static_cast<cudaStream_t>(stream_ptr);
  int device = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  size_t max_bytes = 8 << 10;
  while (custom_->takes(max_bytes * 2)) max_bytes *= 2;
  void* scratch = nullptr;
  cuda_ok(cudaMalloc(&scratch, max_bytes), "cudaMalloc");
  cuda_ok(cudaMemsetAsync(scratch, 0, max_bytes, stream), "cudaMemset");
  cudaEvent_t begin = nullptr, end = nullptr;
  cuda_ok(cudaEventCreate(&begin), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&end), "cudaEventCreate");
  std::vector<float> us;
  constexpr int kWarm = 5, kCalls = 20;
  try {
    for (size_t bytes = 8 << 10; bytes <= max_bytes; bytes *= 2) {
      const Tensor t(scratch, DType::bf16, Device{DeviceKind::cuda, device}, {int64_t(bytes / 2)});
      for (int path = 0; path < 2; ++path) {
        Collectives& c = path == 0 ? static_cast<Collectives&>(*nccl_) : *custom_;
        for (int i = 0; i < kWarm; ++i) c.all_reduce_sum(t);
        cuda_ok(cudaEventRecord(begin, stream), "cudaEventRecord");
        for (int i = 0; i < kCalls; ++i) c.all_reduce_sum(t);
        cuda_ok(cudaEventRecord(end, stream), "cudaEventRecord");
        if (path == 0)
          nccl_->synchronize();
        else
          custom_->synchronize();
        float ms = 0;
        cuda_ok(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
        us.push_back(ms * 1000.0f / float(kCalls));
      }
    }
    // Every rank the same numbers: NCCL's sum gives every rank the same bits.
    cuda_ok(cudaMemcpyAsync(scratch, us.data(), us.size() * sizeof(float), cudaMemcpyHostToDevice,
                            stream),
            "upload");
    nccl_->all_reduce_sum(
        Tensor(scratch, DType::f32, Device{DeviceKind::cuda, device}, {int64_t(us.size())}));
    cuda_ok(cudaMemcpyAsync(us.data(), scratch, us.size() * sizeof(float), cudaMemcpyDeviceToHost,
                            stream),
            "download");
    nccl_->synchronize();
  } catch (...) {
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    cudaFree(scratch);
    throw;
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  cudaFree(scratch);
  bool custom_wins = true;
  size_t i = 0;
  for (size_t bytes = 8 << 10; bytes <= max_bytes; bytes *= 2, i += 2) {
    timings_.push_back(AllReduceTiming{bytes, us[i], us[i + 1]});
    custom_wins = custom_wins && us[i + 1] < us[i];
    if (custom_wins) crossover_ = bytes;
  }
  if (crossover_ == 0) custom_.reset();  // never faster: NCCL for everything
}

void CudaTpCollectives::all_reduce_sum(const Tensor& x) {
  if (custom_ && x.nbytes() <= crossover_)
    custom_->all_reduce_sum(x);
  else
    nccl_->all_reduce_sum(x);
}

}  // namespace troupe
