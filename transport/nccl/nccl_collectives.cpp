#include "transport/nccl/nccl_collectives.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "runtime/error.hpp"

namespace troupe {

namespace {

using Clock = std::chrono::steady_clock;

// Before anything of NCCL runs in this process (it reads its parameters once).
void force_nvls_off() {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
}

std::string last_error(ncclComm_t comm) {
  const char* s = ncclGetLastError(comm);
  return s != nullptr && *s != 0 ? fmt::format(" ({})", s) : std::string();
}

}  // namespace

struct NcclCollectives::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  NcclSettings settings;
  std::string broken;
  std::string who;  // "nccl rank 1 of 2"

  [[noreturn]] void abort_and_fail(const std::string& why) {
    broken = why;
    if (comm != nullptr) {
      ncclCommAbort(comm);
      comm = nullptr;
    }
    fail("{}: {}", who, why);
  }

  // After a call on a non-blocking communicator: waits while NCCL says "in progress".
  void settle(ncclResult_t r, std::string_view op) {
    if (r != ncclSuccess && r != ncclInProgress)
      abort_and_fail(fmt::format("{} failed: {}{}", op, ncclGetErrorString(r), last_error(comm)));
    const auto deadline = Clock::now() + settings.timeout;
    while (r == ncclInProgress) {
      if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) r = ncclInternalError;
      if (r == ncclInProgress) {
        if (Clock::now() > deadline)
          abort_and_fail(
              fmt::format("{} still in progress after the {} ms timeout (a rank "
                          "missing?)",
                          op, settings.timeout.count()));
        std::this_thread::yield();
      }
    }
    if (r != ncclSuccess)
      abort_and_fail(fmt::format("{} failed: {}{}", op, ncclGetErrorString(r), last_error(comm)));
  }

  void usable(std::string_view op) const {
    if (comm == nullptr)
      fail("{}: {} refused: the communicator was aborted after an error ({})", who, op, broken);
  }
};

Blob NcclCollectives::make_unique_id() {
  force_nvls_off();
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) fail("nccl: ncclGetUniqueId failed: {}", ncclGetErrorString(r));
  const auto* b = reinterpret_cast<const uint8_t*>(&id);
  return Blob(b, b + sizeof id);
}

NcclCollectives::NcclCollectives(int32_t rank, int32_t size, std::span<const uint8_t> unique_id,
                                 void* stream, NcclSettings settings)
    : rank_(rank), size_(size), impl_(std::make_unique<Impl>()) {
  if (size < 1) fail("nccl: size {} must be at least 1", size);
  if (rank < 0 || rank >= size) fail("nccl: rank {} is outside [0, size {})", rank, size);
  if (unique_id.size() != sizeof(ncclUniqueId))
    fail("nccl: the unique id has {} bytes, NCCL's has {}", unique_id.size(), sizeof(ncclUniqueId));
  if (settings.timeout.count() <= 0)
    fail("nccl settings: timeout {} ms must be positive", settings.timeout.count());
  impl_->settings = settings;
  impl_->stream = static_cast<cudaStream_t>(stream);
  impl_->who = fmt::format("nccl rank {} of {}", rank, size);
  force_nvls_off();
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof id);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // init returns at once; settle() polls it with a deadline
  const ncclResult_t r = ncclCommInitRankConfig(&impl_->comm, size, id, rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    const std::string detail = last_error(impl_->comm);
    if (impl_->comm != nullptr) ncclCommAbort(impl_->comm);
    impl_->comm = nullptr;
    fail("{}: ncclCommInitRankConfig failed: {}{}", impl_->who, ncclGetErrorString(r), detail);
  }
  impl_->settle(r, "ncclCommInitRankConfig");
}

NcclCollectives::~NcclCollectives() {
  ncclComm_t comm = impl_->comm;
  if (comm == nullptr) return;
  ncclResult_t r = ncclCommFinalize(comm);
  const auto deadline = Clock::now() + impl_->settings.timeout;
  while (r == ncclInProgress && Clock::now() < deadline) {
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
    std::this_thread::yield();
  }
  if (r == ncclSuccess)
    ncclCommDestroy(comm);
  else
    ncclCommAbort(comm);  // a peer is gone or the finalize hung: do not wait for it
}

void NcclCollectives::all_reduce_sum(const Tensor& x) {
  impl_->usable("all_reduce_sum");
  if (x.empty() || x.numel() == 0) fail("{}: all_reduce_sum of an empty tensor", impl_->who);
  if (x.device.kind != DeviceKind::cuda)
    fail("{}: all_reduce_sum needs a CUDA tensor, got {}", impl_->who, describe(x));
  ncclDataType_t dt;
  switch (x.dtype) {
    case DType::f32:
      dt = ncclFloat32;
      break;
    case DType::f16:
      dt = ncclFloat16;
      break;
    case DType::bf16:
      dt = ncclBfloat16;
      break;
    default:
      fail("{}: all_reduce_sum takes float32, float16 or bfloat16, got {}", impl_->who,
           describe(x));
  }
  impl_->settle(
      ncclAllReduce(x.data, x.data, size_t(x.numel()), dt, ncclSum, impl_->comm, impl_->stream),
      "ncclAllReduce");
}

void NcclCollectives::all_gather(const Tensor& in, const Tensor& out) {
  impl_->usable("all_gather");
  if (in.empty() || out.empty() || in.numel() == 0)
    fail("{}: all_gather of an empty tensor", impl_->who);
  if (in.device.kind != DeviceKind::cuda || out.device.kind != DeviceKind::cuda)
    fail("{}: all_gather needs CUDA tensors, got {} into {}", impl_->who, describe(in),
         describe(out));
  if (in.dtype != out.dtype || out.numel() != int64_t(size_) * in.numel())
    fail("{}: all_gather of {} into {}: out must be {} x {} elements of the same dtype", impl_->who,
         describe(in), describe(out), size_, in.numel());
  impl_->settle(
      ncclAllGather(in.data, out.data, in.nbytes(), ncclUint8, impl_->comm, impl_->stream),
      "ncclAllGather");
}

void NcclCollectives::check() {
  impl_->usable("check");
  ncclResult_t r = ncclSuccess;
  if (ncclCommGetAsyncError(impl_->comm, &r) != ncclSuccess) r = ncclInternalError;
  if (r != ncclSuccess && r != ncclInProgress)
    impl_->abort_and_fail(
        fmt::format("asynchronous error: {}{}", ncclGetErrorString(r), last_error(impl_->comm)));
}

void NcclCollectives::synchronize() {
  impl_->usable("synchronize");
  const auto deadline = Clock::now() + impl_->settings.timeout;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(impl_->stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady)
      impl_->abort_and_fail(fmt::format("the stream failed: {}", cudaGetErrorString(q)));
    check();
    if (Clock::now() > deadline)
      impl_->abort_and_fail(
          fmt::format("the stream's collectives did not finish within the {} ms "
                      "timeout (a rank stopped?)",
                      impl_->settings.timeout.count()));
    std::this_thread::yield();
  }
}

}  // namespace troupe
