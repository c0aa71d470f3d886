#include "transport/nccl/custom_all_reduce.hpp"

#include <cuda_runtime.h>

#include <cstring>
#include <thread>

#include "runtime/error.hpp"
#include "transport/nccl/custom_all_reduce_kernel.hpp"

namespace troupe {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x54434152;  // "TCAR"

static_assert(CustomAllReduce::kMaxRanks == car::kMaxRanks);

}  // namespace

struct CustomAllReduce::Impl {
  cudaStream_t stream = nullptr;
  CustomAllReduceSettings settings;
  int device = 0;
  std::string who;         // "custom all-reduce rank 1 of 2"
  char* buffer = nullptr;  // this rank's IPC buffer
  uint32_t* counters = nullptr;
  int* err = nullptr;
  car::Peers peers{};
  std::vector<char*> opened;  // the peers' buffers opened here (closed in the destructor)
  std::vector<PeerName> names;
  bool connected = false;
  std::string broken;

  void cuda_ok(cudaError_t e, std::string_view what) const {
    if (e != cudaSuccess) {
      cudaGetLastError();
      fail("{}: {} failed: {}", who, what, cudaGetErrorString(e));
    }
  }
};

CustomAllReduce::CustomAllReduce(int32_t rank, int32_t size, CustomAllReduceSettings settings)
    : rank_(rank), size_(size), impl_(std::make_unique<Impl>()) {
  if (size < 1 || size > kMaxRanks)
    fail("custom all-reduce: size {} is outside [1, {}]", size, kMaxRanks);
  if (rank < 0 || rank >= size)
    fail("custom all-reduce: rank {} is outside [0, size {})", rank, size);
  if (settings.max_bytes == 0 || settings.max_bytes % 16 != 0)
    fail("custom all-reduce settings: max_bytes {} must be a positive multiple of 16",
         settings.max_bytes);
  if (settings.timeout.count() <= 0)
    fail("custom all-reduce settings: timeout {} ms must be positive", settings.timeout.count());
  Impl& m = *impl_;
  m.settings = settings;
  m.who = fmt::format("custom all-reduce rank {} of {}", rank, size);
  if (settings.device >= 0) m.cuda_ok(cudaSetDevice(settings.device), "cudaSetDevice");
  m.cuda_ok(cudaGetDevice(&m.device), "cudaGetDevice");
  const size_t bytes = car::kDataOffset + 2 * settings.max_bytes;
  // cudaMalloc (not the stream-ordered pool): the memory cudaIpcGetMemHandle exports.
  void* p = nullptr;
  m.cuda_ok(cudaMalloc(&p, bytes), fmt::format("cudaMalloc of the {}-byte IPC buffer", bytes));
  m.buffer = static_cast<char*>(p);
  m.cuda_ok(cudaMalloc(&p, car::kBlocks * sizeof(uint32_t) + sizeof(int)), "cudaMalloc");
  m.counters = static_cast<uint32_t*>(p);
  m.err = reinterpret_cast<int*>(m.counters + car::kBlocks);
  // Zero before any peer can see the buffer (they write flags only after connect).
  m.cuda_ok(cudaMemset(m.buffer, 0, car::kDataOffset), "cudaMemset");
  m.cuda_ok(cudaMemset(m.counters, 0, car::kBlocks * sizeof(uint32_t) + sizeof(int)), "cudaMemset");
  m.cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  m.peers.max_bytes = settings.max_bytes;
}

CustomAllReduce::~CustomAllReduce() {
  Impl& m = *impl_;
  // Not the stream: it may be gone already (the backend that owns it can go first). cudaFree
  // waits for the device's work, whose waits are bounded (a waiting CTA gives up).
  for (char* p : m.opened) cudaIpcCloseMemHandle(p);
  if (m.counters != nullptr) cudaFree(m.counters);
  if (m.buffer != nullptr) cudaFree(m.buffer);
  cudaGetLastError();
}

Blob CustomAllReduce::blob() const {
  const Impl& m = *impl_;
  cudaIpcMemHandle_t h;
  m.cuda_ok(cudaIpcGetMemHandle(&h, m.buffer), "cudaIpcGetMemHandle");
  const auto* hb = reinterpret_cast<const uint8_t*>(&h);
  BlobWriter w(kMagic);
  w.i32(rank_).peer(PeerName::self()).i32(m.device).u64(m.settings.max_bytes);
  w.bytes(std::span<const uint8_t>(hb, sizeof h));
  return w.take();
}

void CustomAllReduce::connect(std::span<const Blob> blobs, void* stream) {
  Impl& m = *impl_;
  if (m.connected) fail("{}: connect called twice", m.who);
  m.stream = static_cast<cudaStream_t>(stream);
  if (blobs.size() != size_t(size_))
    fail("{}: connect got {} blobs for {} ranks", m.who, blobs.size(), size_);
  const PeerName self = PeerName::self();
  for (int32_t r = 0; r < size_; ++r) {
    BlobReader rd(blobs[size_t(r)], kMagic, fmt::format("custom all-reduce blob of rank {}", r));
    const int32_t their_rank = rd.i32();
    const PeerName name = rd.peer();
    const int32_t device = rd.i32();
    const uint64_t max_bytes = rd.u64();
    const std::vector<uint8_t> handle = rd.bytes();
    rd.finish();
    m.names.push_back(name);
    if (their_rank != r) fail("{}: the blob in place {} is rank {}'s", m.who, r, their_rank);
    if (name.host != self.host)
      fail(
          "{}: {} is on another host ({}): CUDA IPC needs every rank on one host; use NCCL "
          "(--disable-custom-all-reduce)",
          m.who, name.describe(r), name.host);
    if (max_bytes != m.settings.max_bytes)
      fail("{}: {} has max_bytes {}, this rank {}", m.who, name.describe(r), max_bytes,
           m.settings.max_bytes);
    if (handle.size() != sizeof(cudaIpcMemHandle_t))
      fail("{}: {}'s IPC handle has {} bytes, not {}", m.who, name.describe(r), handle.size(),
           sizeof(cudaIpcMemHandle_t));
    if (r == rank_) {
      m.peers.base[r] = m.buffer;
      continue;
    }
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data(), sizeof h);
    void* p = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      fail("{}: opening {}'s buffer (device {}) failed: {}", m.who, name.describe(r), device,
           cudaGetErrorString(e));
    }
    m.opened.push_back(static_cast<char*>(p));
    m.peers.base[r] = static_cast<char*>(p);
  }
  m.connected = true;
}

bool CustomAllReduce::takes(size_t bytes) const {
  return bytes > 0 && bytes <= impl_->settings.max_bytes;
}

void CustomAllReduce::all_reduce_sum(const Tensor& x) {
  Impl& m = *impl_;
  if (!m.broken.empty()) fail("{}: all_reduce_sum refused: {}", m.who, m.broken);
  if (!m.connected) fail("{}: all_reduce_sum before connect", m.who);
  if (x.empty() || x.numel() == 0) fail("{}: all_reduce_sum of an empty tensor", m.who);
  if (x.device.kind != DeviceKind::cuda)
    fail("{}: all_reduce_sum needs a CUDA tensor, got {}", m.who, describe(x));
  int dt = 0;
  switch (x.dtype) {
    case DType::f32:
      dt = 0;
      break;
    case DType::f16:
      dt = 1;
      break;
    case DType::bf16:
      dt = 2;
      break;
    default:
      fail("{}: all_reduce_sum takes float32, float16 or bfloat16, got {}", m.who, describe(x));
  }
  if (!takes(x.nbytes()))
    fail(
        "{}: all_reduce_sum of {} bytes; this group takes at most max_bytes = {} (NCCL takes "
        "larger messages)",
        m.who, x.nbytes(), m.settings.max_bytes);
  if (size_ == 1) return;
  const auto timeout_ns = uint64_t(m.settings.timeout.count()) * 1000000ull;
  m.cuda_ok(car::launch_one_shot(dt, x.data, x.numel(), m.peers, rank_, size_, m.counters, m.err,
                                 timeout_ns, m.stream),
            "the all-reduce kernel's launch");
}

void CustomAllReduce::all_gather(const Tensor& /*in*/, const Tensor& /*out*/) {
  fail("{}: all_gather is not offered (NCCL's serves)", impl_->who);
}

void CustomAllReduce::check() {
  Impl& m = *impl_;
  if (!m.broken.empty()) fail("{}: {}", m.who, m.broken);
  int bits = 0;
  m.cuda_ok(cudaMemcpyAsync(&bits, m.err, sizeof bits, cudaMemcpyDeviceToHost, m.stream),
            "reading the error word");
  m.cuda_ok(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize");
  if (bits == 0) return;
  std::string who_missing;
  for (int32_t r = 0; r < size_; ++r)
    if ((bits & (1 << r)) != 0)
      who_missing +=
          (who_missing.empty() ? "" : ", ") +
          (size_t(r) < m.names.size() ? m.names[size_t(r)].describe(r) : fmt::format("rank {}", r));
  m.broken = fmt::format("{} did not arrive within the {} ms timeout (stopped or dead?)",
                         who_missing, m.settings.timeout.count());
  fail("{}: {}", m.who, m.broken);
}

void CustomAllReduce::synchronize() {
  Impl& m = *impl_;
  const auto deadline = Clock::now() + m.settings.timeout + std::chrono::seconds(1);
  for (;;) {
    const cudaError_t q = cudaStreamQuery(m.stream);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) m.cuda_ok(q, "the stream");
    if (Clock::now() > deadline)
      fail("{}: the stream did not finish within the {} ms timeout", m.who,
           m.settings.timeout.count());
    std::this_thread::yield();
  }
  check();
}

}  // namespace troupe
