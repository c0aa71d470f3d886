// The CPU backend's memory side: allocation, transfers, copies and the memory report.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>

#include "op_harness.hpp"
#include "runtime/error.hpp"

using namespace troupe;

TEST_CASE("backend identity: name, device, f32 compute dtype", "[cpu][memory]") {
  auto backend = make_cpu_backend(1);
  CHECK(backend->name() == "cpu");
  CHECK(backend->device() == Device{DeviceKind::cpu, 0});
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    CHECK(backend->compute_dtype(t) == DType::f32);
  CHECK_THROWS_AS(make_cpu_backend(-1), Error);
}

TEST_CASE("allocate gives 64-byte aligned memory of the asked size", "[cpu][memory]") {
  auto backend = make_cpu_backend(1);
  for (size_t bytes :
       {size_t(0), size_t(1), size_t(63), size_t(64), size_t(1000), size_t(1) << 20}) {
    Buffer b = backend->allocate(bytes);
    CHECK(b.bytes() == bytes);
    CHECK(b.device() == Device{DeviceKind::cpu, 0});
    REQUIRE(b.data() != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
  }
}

namespace {
/// The VmFlags line of /proc/self/smaps for the mapping that holds `p` ("" if none).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}
}  // namespace

TEST_CASE("allocate asks for huge pages for buffers of 8 MiB and more", "[cpu][memory]") {
  auto backend = make_cpu_backend(1);
  Buffer big = backend->allocate((size_t(8) << 20) + 5);
  Buffer small = backend->allocate(size_t(4) << 20);
  CHECK(big.bytes() == (size_t(8) << 20) + 5);
  CHECK(reinterpret_cast<uintptr_t>(big.data()) % (size_t(2) << 20) == 0);
  // madvise(MADV_HUGEPAGE) marks the mapping "hg"; a kernel without THP refuses it.
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) return;
  CHECK_THAT(vm_flags_of(big.data()), Catch::Contains(" hg"));
  CHECK_THAT(vm_flags_of(small.data()), !Catch::Contains(" hg"));
}

TEST_CASE("upload, download and copy round-trip bytes", "[cpu][memory]") {
  auto backend = make_cpu_backend(2);
  std::vector<int32_t> host(100);
  std::iota(host.begin(), host.end(), -50);
  Buffer a = backend->allocate(400), b = backend->allocate(400);
  const Tensor ta = a.tensor(DType::i32, {10, 10});
  const Tensor tb = b.tensor(DType::i32, {100});
  backend->upload(ta, host.data(), 400);
  backend->copy(tb, ta);
  backend->synchronize();
  std::vector<int32_t> back(100, 0);
  backend->download(back.data(), tb, 400);
  CHECK(back == host);

  SECTION("errors") {
    CHECK_THROWS_WITH(backend->upload(ta, host.data(), 404),
                      Catch::Contains("upload: 404 bytes do not fit"));
    CHECK_THROWS_AS(backend->download(back.data(), ta, 401), Error);
    CHECK_THROWS_AS(backend->upload(ta, nullptr, 4), Error);
    CHECK_THROWS_AS(backend->copy(tb.rows(0, 99), ta), Error);
    CHECK_THROWS_WITH(backend->copy(b.tensor(DType::f32, {100}), ta),
                      Catch::Contains("differ in dtype"));
    Tensor on_gpu = ta;
    on_gpu.device = Device{DeviceKind::cuda, 0};
    CHECK_THROWS_WITH(backend->upload(on_gpu, host.data(), 4), Catch::Contains("must be on cpu"));
    CHECK_THROWS_AS(backend->copy(on_gpu, ta), Error);
  }
}

TEST_CASE("memory_info reports MemAvailable and MemTotal", "[cpu][memory]") {
  auto backend = make_cpu_backend(1);
  const MemoryInfo info = backend->memory_info();
  CHECK(info.total_bytes > 0);
  CHECK(info.free_bytes > 0);
  CHECK(info.free_bytes <= info.total_bytes);
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemTotal:") CHECK(info.total_bytes == kib * 1024);
}
