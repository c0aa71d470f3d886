#include "transport/collectives/shm_collectives.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include "runtime/error.hpp"
#include "transport/collectives/host_reduce.hpp"

namespace troupe {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kBlobMagic = 0x4d485354;  // "TSHM"
constexpr uint64_t kSegmentMagic = 0x73656c6f70757274ull;
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 4096;
constexpr auto kSlice = std::chrono::milliseconds(10);
constexpr auto kPureSpin = std::chrono::microseconds(10);

enum State : uint32_t { kCreated = 0, kConnected = 1, kClosed = 2, kFailed = 3 };

struct SlotMeta {
  uint64_t bytes;
  uint32_t op;
  uint32_t pad;
};

// The start of every rank's segment. Written by its rank only; read by every peer.
struct Header {
  uint64_t magic;
  uint32_t version;
  int32_t rank;
  int32_t size;
  int32_t pid;
  uint64_t slot_bytes;
  uint64_t nonce;
  alignas(64) std::atomic<uint32_t> arrived;  // the last phase published (futex word)
  std::atomic<uint32_t> waiters;              // peers asleep on `arrived`
  std::atomic<uint32_t> state;                // State
  SlotMeta meta[2];                           // op and bytes of the phase in each slot
  char error[1024];                           // why this rank failed (state kFailed)
};
static_assert(sizeof(Header) <= kHeaderBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4,
              "futex words must be plain 32-bit integers");

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

void wake_all(Header& h) {
  futex(&h.arrived, FUTEX_WAKE, INT_MAX, nullptr);
}

bool reached(uint32_t have, uint32_t want) {
  return int32_t(have - want) >= 0;
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::string errno_text() {
  return std::strerror(errno);
}

// Whether process `pid` is stopped (state T or t in /proc/<pid>/stat).
bool is_stopped(int32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close = s.rfind(") ");
  return close != std::string::npos && close + 2 < s.size() &&
         (s[close + 2] == 'T' || s[close + 2] == 't');
}

}  // namespace

enum class ShmCollectives::Op : uint32_t { all_reduce_sum = 1, all_gather = 2 };

namespace {
const char* op_text(uint32_t op) {
  switch (op) {
    case 1:
      return "all_reduce_sum";
    case 2:
      return "all_gather";
  }
  return "an unknown collective";
}
}  // namespace

struct ShmCollectives::Mapping {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  [[nodiscard]] Header& header() const { return *static_cast<Header*>(base); }
  [[nodiscard]] uint8_t* data() const { return static_cast<uint8_t*>(base) + kHeaderBytes; }
  ~Mapping() {
    if (base != MAP_FAILED) munmap(base, bytes);
  }
};

struct ShmCollectives::Peer {
  Mapping* map = nullptr;
  std::unique_ptr<Mapping> owned;
  PeerName who;
  std::string segment;
  int pidfd = -1;
};

void ShmCollectivesSettings::validate() const {
  if (name_prefix.size() < 2 || name_prefix[0] != '/' ||
      name_prefix.find('/', 1) != std::string::npos || name_prefix.size() > 200)
    fail(
        "shm collectives settings: name_prefix \"{}\" must be '/' followed by 1-199 characters "
        "without '/'",
        name_prefix);
  if (slot_bytes < 4096 || slot_bytes % 64 != 0 || slot_bytes > (size_t(1) << 32))
    fail("shm collectives settings: slot_bytes {} must be a multiple of 64 in [4096, 4 GiB]",
         slot_bytes);
  if (timeout.count() <= 0)
    fail("shm collectives settings: timeout {} ms must be positive", timeout.count());
  if (spin.count() < 0) fail("shm collectives settings: spin {} us must be >= 0", spin.count());
}

ShmCollectives::ShmCollectives(int32_t rank, int32_t size, ShmCollectivesSettings settings)
    : rank_(rank), size_(size), settings_(std::move(settings)), self_(PeerName::self()) {
  settings_.validate();
  if (size < 1) fail("shm collectives: size {} must be at least 1", size);
  if (rank < 0 || rank >= size)
    fail("shm collectives: rank {} is outside [0, size {})", rank, size);
  static std::atomic<uint32_t> counter{0};
  std::random_device rd;
  nonce_ = (uint64_t(rd()) << 32) ^ rd();
  name_ =
      fmt::format("{}-{}-{}-{:06x}", settings_.name_prefix, getpid(), counter++, nonce_ & 0xffffff);
  const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail("shm collectives: cannot create segment {}: {}", name_, errno_text());
  own_ = std::make_unique<Mapping>();
  own_->bytes = kHeaderBytes + 2 * settings_.slot_bytes;
  // posix_fallocate reserves the pages now: a full /dev/shm is an error here, not a SIGBUS later.
  const int err = posix_fallocate(fd, 0, off_t(own_->bytes));
  if (err == 0) own_->base = mmap(nullptr, own_->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (err != 0 || own_->base == MAP_FAILED) {
    shm_unlink(name_.c_str());
    fail(
        "shm collectives: cannot size segment {} to {} bytes: {} (is /dev/shm large enough? "
        "lower slot_bytes)",
        name_, own_->bytes, std::strerror(err != 0 ? err : map_errno));
  }
  Header& h = own_->header();
  std::memset(static_cast<void*>(&h), 0, sizeof h);
  h.version = kVersion;
  h.rank = rank_;
  h.size = size_;
  h.pid = int32_t(getpid());
  h.slot_bytes = settings_.slot_bytes;
  h.nonce = nonce_;
  h.state.store(kCreated);
  h.arrived.store(0);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  h.magic = kSegmentMagic;
}

ShmCollectives::~ShmCollectives() {
  if (own_ && own_->base != MAP_FAILED) {
    Header& h = own_->header();
    if (h.state.load() != kFailed) h.state.store(kClosed);
    wake_all(h);
  }
  for (Peer& p : peers_)
    if (p.pidfd >= 0) close(p.pidfd);
  if (!unlinked_) shm_unlink(name_.c_str());
}

Blob ShmCollectives::blob() const {
  return BlobWriter(kBlobMagic)
      .i32(rank_)
      .i32(size_)
      .peer(self_)
      .str(name_)
      .u64(nonce_)
      .u64(settings_.slot_bytes)
      .take();
}

void ShmCollectives::fail_peer(int32_t r, const std::string& why) const {
  fail("shm collectives: {} step {} on rank {}: {} {}", op_name_, step_, rank_,
       peers_[size_t(r)].who.describe(r), why);
}

void ShmCollectives::check_usable(std::string_view op) const {
  if (!connected_) fail("shm collectives: {} before connect()", op);
  if (!broken_.empty())
    fail("shm collectives: {} refused: the group failed earlier ({})", op, broken_);
}

namespace {

// Waits until ok(peer header) holds: spin, then futex sleeps in slices that check the peer.
template <class Ok, class Fail>
void await_peer(const Header& const_h, const std::chrono::microseconds spin,
                Clock::time_point deadline, int pidfd, Ok&& ok, Fail&& fail_with) {
  Header& h = const_cast<Header&>(const_h);
  // Spin: pure for a few microseconds, then yielding, so that on a machine with more runnable
  // processes than cores the peer we wait for can get this core.
  const auto start = Clock::now();
  for (auto now = start; now < start + spin; now = Clock::now()) {
    if (ok(h)) return;
    if (now < start + kPureSpin)
      cpu_relax();
    else
      sched_yield();
  }
  for (;;) {
    if (ok(h)) return;
    const uint32_t st = h.state.load();
    if (st == kClosed) fail_with("left the group (its collectives object was destroyed)");
    if (st == kFailed) {
      char msg[sizeof h.error + 1] = {};
      std::memcpy(msg, h.error, sizeof h.error);
      fail_with(fmt::format("failed: {}", msg));
    }
    bool dead = false;
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      dead = poll(&p, 1, 0) > 0;
    } else {
      dead = kill(h.pid, 0) != 0 && errno == ESRCH;
    }
    if (dead) fail_with("died (its process exited)");
    const auto now = Clock::now();
    if (now >= deadline) {
      if (ok(h)) return;
      fail_with(is_stopped(h.pid)
                    ? std::string("is stopped (SIGSTOP?) and did not answer within the timeout")
                    : std::string("did not answer within the timeout"));
    }
    const auto slice = std::min<Clock::duration>(kSlice, deadline - now);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
    const timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
    h.waiters.fetch_add(1);
    const uint32_t seen = h.arrived.load();
    if (!ok(h)) futex(&h.arrived, FUTEX_WAIT, seen, &ts);
    h.waiters.fetch_sub(1);
  }
}

}  // namespace

void ShmCollectives::connect(const std::vector<Blob>& blobs) {
  if (connected_ || !peers_.empty()) fail("shm collectives: connect() called twice");
  if (blobs.size() != size_t(size_))
    fail("shm collectives: connect() got {} blobs for a group of {} ranks", blobs.size(), size_);
  op_name_ = "connect";
  Header& own = own_->header();
  try {
    peers_.resize(size_t(size_));
    for (int32_t r = 0; r < size_; ++r) {
      Peer& p = peers_[size_t(r)];
      BlobReader rd(blobs[size_t(r)], kBlobMagic, fmt::format("shm collectives blob {}", r));
      const int32_t br = rd.i32(), bs = rd.i32();
      p.who = rd.peer();
      p.segment = rd.str();
      const uint64_t nonce = rd.u64(), slot_bytes = rd.u64();
      rd.finish();
      if (br != r || bs != size_)
        fail("shm collectives: blob {} belongs to rank {} of a group of {}, expected rank {} of {}",
             r, br, bs, r, size_);
      if (slot_bytes != settings_.slot_bytes)
        fail(
            "shm collectives: {} has slot_bytes {}, this rank {}: all ranks need the same "
            "settings",
            p.who.describe(r), slot_bytes, settings_.slot_bytes);
      if (r == rank_) {
        p.map = own_.get();
        continue;
      }
      p.pidfd = int(syscall(SYS_pidfd_open, p.who.pid, 0));
      if (p.pidfd < 0 && errno == ESRCH) fail_peer(r, "is not running (no such process)");
      const int fd = shm_open(p.segment.c_str(), O_RDWR, 0);
      if (fd < 0)
        fail_peer(r, fmt::format("has no segment {} on this host: {} (shm collectives need all "
                                 "ranks on one host)",
                                 p.segment, errno_text()));
      p.owned = std::make_unique<Mapping>();
      p.owned->bytes = kHeaderBytes + 2 * settings_.slot_bytes;
      struct stat sb {};
      if (fstat(fd, &sb) == 0 && size_t(sb.st_size) == p.owned->bytes)
        p.owned->base = mmap(nullptr, p.owned->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (p.owned->base == MAP_FAILED)
        fail_peer(r, fmt::format("has a segment {} of {} bytes, expected {}", p.segment, sb.st_size,
                                 p.owned->bytes));
      p.map = p.owned.get();
      const Header& ph = p.map->header();
      if (ph.magic != kSegmentMagic || ph.version != kVersion || ph.nonce != nonce ||
          ph.rank != r || ph.size != size_)
        fail_peer(r, fmt::format("segment {} is not the one its blob describes", p.segment));
    }
    own.state.store(kConnected);
    wake_all(own);
    const auto deadline = Clock::now() + settings_.timeout;
    for (int32_t r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      await_peer(
          peers_[size_t(r)].map->header(), settings_.spin, deadline, peers_[size_t(r)].pidfd,
          [](const Header& h) { return h.state.load() != kCreated; },
          [&](const std::string& why) { fail_peer(r, why); });
      if (peers_[size_t(r)].map->header().state.load() != kConnected)
        fail_peer(r, "left before the group was connected");
    }
  } catch (const Error& e) {
    broken_ = e.what();
    std::strncpy(own.error, e.what(), sizeof own.error - 1);
    own.state.store(kFailed);
    wake_all(own);
    // A peer that died before connecting leaves its segment behind: remove it.
    for (Peer& p : peers_) {
      if (p.pidfd < 0 || p.map == own_.get()) continue;
      pollfd pf{p.pidfd, POLLIN, 0};
      if (poll(&pf, 1, 0) > 0) shm_unlink(p.segment.c_str());
    }
    throw;
  }
  // Every rank mapped every segment: the names can go.
  shm_unlink(name_.c_str());
  unlinked_ = true;
  connected_ = true;
}

uint8_t* ShmCollectives::slot(int32_t r, uint32_t phase) const {
  return peers_[size_t(r)].map->data() + size_t(phase % 2) * settings_.slot_bytes;
}

void ShmCollectives::wait_for(int32_t r, uint32_t phase, Op op, uint64_t bytes) {
  const Header& h = peers_[size_t(r)].map->header();
  await_peer(
      h, settings_.spin, Clock::now() + settings_.timeout, peers_[size_t(r)].pidfd,
      [phase](const Header& ph) {
        return reached(ph.arrived.load(std::memory_order_acquire), phase);
      },
      [&](const std::string& why) { fail_peer(r, why); });
  const SlotMeta m = h.meta[phase % 2];
  if (m.op != uint32_t(op) || m.bytes != bytes)
    fail_peer(r, fmt::format("is in {} of {} bytes while this rank is in {} of {} bytes (do all "
                             "ranks call the same collectives in the same order?)",
                             op_text(m.op), m.bytes, op_text(uint32_t(op)), bytes));
}

void ShmCollectives::phase(Op op, uint64_t bytes) {
  const uint32_t p = ++phase_;
  Header& own = own_->header();
  own.meta[p % 2] = SlotMeta{bytes, uint32_t(op), 0};
  own.arrived.store(p);
  if (own.waiters.load() > 0) wake_all(own);
  for (int32_t r = 0; r < size_; ++r)
    if (r != rank_) wait_for(r, p, op, bytes);
}

template <class F>
void ShmCollectives::guarded(std::string_view op, F&& body) {
  check_usable(op);
  op_name_ = op;
  ++step_;
  try {
    body();
  } catch (const Error& e) {
    broken_ = e.what();
    Header& own = own_->header();
    std::strncpy(own.error, e.what(), sizeof own.error - 1);
    own.state.store(kFailed);  // peers waiting on this rank fail now, with this reason
    wake_all(own);
    throw;
  }
}

void ShmCollectives::reduce_one_shot(float* x, size_t n) {
  const uint32_t p = phase_ + 1;
  std::memcpy(slot(rank_, p), x, n * sizeof(float));
  phase(Op::all_reduce_sum, n * sizeof(float));
  std::vector<const float*> srcs(static_cast<size_t>(size_));
  for (int32_t r = 0; r < size_; ++r) srcs[size_t(r)] = reinterpret_cast<const float*>(slot(r, p));
  sum_in_rank_order(x, srcs, n);
}

void ShmCollectives::reduce_two_phase(float* x, size_t n) {
  const uint32_t p = phase_ + 1;
  std::memcpy(slot(rank_, p), x, n * sizeof(float));
  phase(Op::all_reduce_sum, n * sizeof(float));
  // Rank r sums chunk r of every slot into its other slot (free: see the header) ...
  const Chunk mine = chunk_of(n, size_, rank_);
  std::vector<const float*> srcs(static_cast<size_t>(size_));
  for (int32_t r = 0; r < size_; ++r)
    srcs[size_t(r)] = reinterpret_cast<const float*>(slot(r, p)) + mine.begin;
  sum_in_rank_order(reinterpret_cast<float*>(slot(rank_, p + 1)) + mine.begin, srcs, mine.size());
  phase(Op::all_reduce_sum, n * sizeof(float));
  // ... and every rank copies the summed chunks.
  for (int32_t r = 0; r < size_; ++r) {
    const Chunk c = chunk_of(n, size_, r);
    std::memcpy(x + c.begin, reinterpret_cast<const float*>(slot(r, p + 1)) + c.begin,
                c.size() * sizeof(float));
  }
}

void ShmCollectives::all_reduce_sum(const Tensor& x) {
  check_all_reduce_arg("shm collectives", x);
  guarded("all_reduce_sum", [&] {
    if (size_ == 1) return;
    const size_t n = size_t(x.numel()), piece = settings_.slot_bytes / sizeof(float);
    float* xp = x.as<float>();
    for (size_t off = 0; off < n; off += piece) {
      const size_t m = std::min(piece, n - off);
      if (m * sizeof(float) <= settings_.one_shot_max_bytes || m < size_t(size_))
        reduce_one_shot(xp + off, m);
      else
        reduce_two_phase(xp + off, m);
    }
  });
}

void ShmCollectives::all_gather(const Tensor& in, const Tensor& out) {
  check_all_gather_args("shm collectives", in, out, size_);
  guarded("all_gather", [&] {
    const size_t bytes = in.nbytes();
    const auto* src = static_cast<const uint8_t*>(in.data);
    auto* dst = static_cast<uint8_t*>(out.data);
    if (size_ == 1) {
      std::memmove(dst, src, bytes);
      return;
    }
    for (size_t off = 0; off < bytes; off += settings_.slot_bytes) {
      const size_t m = std::min(settings_.slot_bytes, bytes - off);
      const uint32_t p = phase_ + 1;
      std::memcpy(slot(rank_, p), src + off, m);
      phase(Op::all_gather, m);
      for (int32_t r = 0; r < size_; ++r) std::memcpy(dst + size_t(r) * bytes + off, slot(r, p), m);
    }
  });
}

}  // namespace troupe
