// The CPU backend's memory side: allocation, transfers, copies and the memory report.
#include <catch2/catch.hpp>

#include <cstdint>
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
