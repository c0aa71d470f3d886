// The transport pieces that need no second process: bootstrap blobs, settings and argument
// checks (each refusal names the field, the value and what is allowed), KV layouts, the
// fixed-order sum, and groups of one rank.
#include <catch2/catch.hpp>

#include <cstring>

#include "process_group.hpp"
#include "runtime/error.hpp"
#include "transport/bootstrap.hpp"
#include "transport/collectives/host_reduce.hpp"
#include "transport/collectives/shm_collectives.hpp"
#include "transport/collectives/ucx_collectives.hpp"
#include "transport/kv/kv_layout.hpp"
#include "transport/stage/ucx_stage_link.hpp"

using namespace troupe;
using Catch::Matchers::Contains;

namespace {
ucx::Settings loopback_tcp() {
  ucx::Settings s;
  s.tls = "tcp";
  s.net_devices = "lo";
  return s;
}
}  // namespace

TEST_CASE("bootstrap blobs round-trip and refuse truncated or foreign bytes") {
  const Blob b = BlobWriter(0x1234).i32(-5).u64(1ull << 40).str("name").peer({"host-a", 42}).take();
  BlobReader rd(b, 0x1234, "test blob");
  CHECK(rd.i32() == -5);
  CHECK(rd.u64() == (1ull << 40));
  CHECK(rd.str() == "name");
  const PeerName p = rd.peer();
  CHECK(p.describe(3) == "rank 3 (pid 42 on host-a)");
  rd.finish();
  CHECK_THROWS_WITH(BlobReader(b, 0x9999, "test blob"), Contains("wrong magic"));
  const Blob cut(b.begin(), b.end() - 3);
  BlobReader rd2(cut, 0x1234, "test blob");
  rd2.i32();
  rd2.u64();
  rd2.str();
  CHECK_THROWS_WITH(rd2.peer(), Contains("test blob is truncated"));
}

TEST_CASE("settings and arguments are refused with the field, the value and what is allowed") {
  ucx::Settings u;
  u.tls = "rc";
  CHECK_THROWS_WITH(u.validate(), Contains("tls \"rc\"") && Contains("\"tcp\", \"sm\""));
  u.tls = "tcp";
  u.timeout = std::chrono::milliseconds(0);
  CHECK_THROWS_WITH(u.validate(), Contains("timeout 0 ms must be positive"));
  ShmCollectivesSettings s;
  s.name_prefix = "no-slash";
  CHECK_THROWS_WITH(s.validate(), Contains("name_prefix \"no-slash\""));
  s = {};
  s.slot_bytes = 100;
  CHECK_THROWS_WITH(s.validate(), Contains("slot_bytes 100"));
  CHECK_THROWS_WITH(ShmCollectives(2, 2), Contains("rank 2 is outside [0, size 2)"));
  CHECK_THROWS_WITH(UcxCollectives(0, 0), Contains("size 0 must be at least 1"));
  CHECK_THROWS_WITH(UcxStageLink(3, 2), Contains("stage 3 is outside [0, num_stages 2)"));
}

TEST_CASE("connect refuses a wrong number of blobs and blobs of another kind or rank") {
  ShmCollectivesSettings s;
  s.name_prefix = test::shm_prefix();
  ShmCollectives a(0, 2, s);
  CHECK_THROWS_WITH(a.connect({a.blob()}), Contains("got 1 blobs for a group of 2"));
  ShmCollectives b(0, 2, s);
  CHECK_THROWS_WITH(b.connect({b.blob(), b.blob()}), Contains("blob 1 belongs to rank 0"));
  ShmCollectives c(0, 2, s);
  CHECK_THROWS_WITH(c.connect({c.blob(), Blob{1, 2, 3}}), Contains("not a bootstrap blob"));
  // Before connect() nothing runs.
  ShmCollectives d(0, 2, s);
  std::vector<float> x(4, 1.0f);
  CHECK_THROWS_WITH(d.all_reduce_sum(Tensor(x.data(), DType::f32, Device{}, {4})),
                    Contains("before connect()"));
  test::remove_shm(s.name_prefix);
}

TEST_CASE("a destroyed group leaves no shared memory behind") {
  ShmCollectivesSettings s;
  s.name_prefix = test::shm_prefix();
  {
    ShmCollectives a(0, 1, s);
    CHECK(access(("/dev/shm" + a.segment_name()).c_str(), F_OK) == 0);
  }
  CHECK(test::remove_shm(s.name_prefix) == 0);
}

TEST_CASE("collectives refuse tensors they cannot take") {
  ShmCollectivesSettings s;
  s.name_prefix = test::shm_prefix();
  ShmCollectives one(0, 1, s);
  one.connect({one.blob()});
  std::vector<uint16_t> half(8);
  CHECK_THROWS_WITH(one.all_reduce_sum(Tensor(half.data(), DType::bf16, Device{}, {8})),
                    Contains("sums float32 host tensors") && Contains("bfloat16"));
  std::vector<float> f(8);
  CHECK_THROWS_WITH(
      one.all_reduce_sum(Tensor(f.data(), DType::f32, Device{DeviceKind::cuda, 0}, {8})),
      Contains("needs a host tensor"));
  CHECK_THROWS_WITH(one.all_gather(Tensor(f.data(), DType::f32, Device{}, {8}),
                                   Tensor(f.data(), DType::f32, Device{}, {4})),
                    Contains("out must hold 1 x 8 = 8 elements"));
  test::remove_shm(s.name_prefix);
}

TEST_CASE("groups of one rank: all_reduce is the identity, all_gather a copy") {
  std::vector<float> x{1.5f, -2.0f, 3.25f}, in{4, 5, 6}, out(3);
  ShmCollectivesSettings s;
  s.name_prefix = test::shm_prefix();
  ShmCollectives shm(0, 1, s);
  shm.connect({shm.blob()});
  UcxCollectives ucx(0, 1, UcxCollectivesSettings{loopback_tcp()});
  ucx.connect({ucx.blob()});
  for (Collectives* c : {static_cast<Collectives*>(&shm), static_cast<Collectives*>(&ucx)}) {
    auto y = x;
    c->all_reduce_sum(Tensor(y.data(), DType::f32, Device{}, {3}));
    CHECK(y == x);
    std::fill(out.begin(), out.end(), 0.0f);
    c->all_gather(Tensor(in.data(), DType::f32, Device{}, {3}),
                  Tensor(out.data(), DType::f32, Device{}, {1, 3}));
    CHECK(out == in);
  }
  test::remove_shm(s.name_prefix);
}

TEST_CASE("the fixed-order sum adds sources left to right in f32, whatever the block size") {
  // 0.1f + 1e8f + -1e8f is 0 in f32 left to right, 0.1f if the last two were added first.
  const size_t n = 3000;
  std::vector<float> a(n, 0.1f), b(n, 1e8f), c(n, -1e8f), out(n);
  const float* srcs[] = {a.data(), b.data(), c.data()};
  sum_in_rank_order(out.data(), srcs, n);
  for (float v : out) CHECK(v == (0.1f + 1e8f) + -1e8f);
  CHECK(chunk_of(10, 3, 0).begin == 0);
  CHECK(chunk_of(10, 3, 0).end == 4);
  CHECK(chunk_of(10, 3, 2).begin == 7);
  CHECK(chunk_of(10, 3, 2).end == 10);
}

TEST_CASE("kv layouts: per-layer planes, contiguous blocks, overlaps refused") {
  const KvLayout l = KvLayout::per_layer(2, 10, 64);  // [layer][K,V][10 blocks][64 B]
  CHECK(l.num_planes == 4);
  CHECK(l.block_bytes() == 256);
  CHECK(l.offset(3, 0) == 3 * 64);
  CHECK(l.offset(3, 2) == 2 * 640 + 3 * 64);
  CHECK(l.span_bytes() == 4 * 640);
  std::vector<uint8_t> mem(l.span_bytes());
  const auto seg = l.segments(mem.data(), 9);
  REQUIRE(seg.size() == 4);
  CHECK(static_cast<uint8_t*>(seg[3].buffer) == mem.data() + 3 * 640 + 9 * 64);
  l.validate("test");
  KvLayout::contiguous(5, 100).validate("test");
  KvLayout bad = l;
  bad.plane_stride = 100;  // planes overlap other blocks
  CHECK_THROWS_WITH(bad.validate("test"), Contains("segments overlap"));
  KvLayout empty;
  CHECK_THROWS_WITH(empty.validate("test"), Contains("num_blocks must be positive"));
}
