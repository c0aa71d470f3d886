// Scenario "kv": rank 0 exposes a KvRegion (per-layer layout: 4 layers x K/V planes of 16
// blocks); rank 1 reads and writes blocks with a KvRemote over its own (contiguous) region.
// method=rma|am, tls=tcp|sm, region=user|alloc (the caller's memory or UCX's),
// local=contiguous|per_layer (rank 1's own layout). Rank 1 reports what
// it read; rank 0, after the test says GO, reports whether the written blocks (and only they)
// changed. mode=dead: rank 0 is killed by the test and rank 1's read must fail naming it.
#include <algorithm>
#include <cstring>
#include <memory>

#include "peer.hpp"
#include "runtime/error.hpp"
#include "transport/kv/kv_region.hpp"
#include "transport/kv/kv_remote.hpp"

namespace troupe::peer {

namespace {

constexpr uint32_t kLayers = 4;
constexpr uint64_t kBlocks = 16, kSlice = 4096;

// Byte k of a block's contents (its segments concatenated in plane order): the two sides cut
// blocks differently, so contents are defined on that byte stream.
uint8_t byte_of(uint64_t block, uint64_t k, int version) {
  return uint8_t((block * 31 + k * 3 + (k >> 12) * 7 + uint64_t(version) * 101) & 0xff);
}

void fill_block(uint8_t* base, const KvLayout& l, uint64_t block, uint64_t as_block, int version) {
  for (uint32_t p = 0; p < l.num_planes; ++p)
    for (uint64_t i = 0; i < l.segment_bytes; ++i)
      base[l.offset(block, p) + i] = byte_of(as_block, p * l.segment_bytes + i, version);
}

bool block_is(const uint8_t* base, const KvLayout& l, uint64_t block, uint64_t as_block,
              int version) {
  for (uint32_t p = 0; p < l.num_planes; ++p)
    for (uint64_t i = 0; i < l.segment_bytes; ++i)
      if (base[l.offset(block, p) + i] != byte_of(as_block, p * l.segment_bytes + i, version))
        return false;
  return true;
}

}  // namespace

void scenario_kv(const Args& a) {
  KvSettings s;
  s.ucx.tls = a.str("tls", "tcp");
  s.ucx.net_devices = a.str("dev", s.ucx.tls == "tcp" ? "lo" : "");
  s.ucx.timeout = std::chrono::milliseconds(a.num("timeout_ms", 10000));
  s.method = a.str("method", "auto");
  const std::string mode = a.str("mode", "ok");
  if (a.num("rank") == 0) {
    const KvLayout layout = KvLayout::per_layer(kLayers, kBlocks, kSlice);
    std::vector<uint8_t> user(a.str("region") == "alloc" ? 0 : layout.span_bytes());
    std::unique_ptr<KvRegion> made = user.empty()
                                         ? std::make_unique<KvRegion>(layout, s.ucx)
                                         : std::make_unique<KvRegion>(user.data(), layout, s.ucx);
    KvRegion& kv = *made;
    auto* region = static_cast<uint8_t*>(kv.data());
    for (uint64_t b = 0; b < kBlocks; ++b) fill_block(region, layout, b, b, 0);
    bootstrap(kv.descriptor());
    wait_go();
    bool others_untouched = true;
    for (uint64_t b = 0; b < kBlocks; ++b)
      if (b != 7 && b != 0)
        others_untouched = others_untouched && block_is(region, layout, b, b, 0);
    // Rank 1 wrote its local blocks 0 and 1 (its versions 1 of blocks 100, 101) to 7 and 0.
    say(fmt::format("RESULT what=written ok={} untouched={} served_reads={} served_writes={}",
                    int(block_is(region, layout, 7, 100, 1) && block_is(region, layout, 0, 101, 1)),
                    int(others_untouched), kv.blocks_read(), kv.blocks_written()));
    return;
  }
  const auto blobs = bootstrap(Blob{});
  const KvLayout local = a.str("local") == "per_layer"
                             ? KvLayout::per_layer(kLayers, 4, kSlice)
                             : KvLayout::contiguous(4, uint64_t(kLayers) * 2 * kSlice);
  std::vector<uint8_t> mem(local.span_bytes(), 0);
  KvRemote remote(blobs.at(0), mem.data(), local, s);
  say(fmt::format("RESULT what=method used={}", remote.method()));
  if (mode == "dead") {
    say("MARK ready");
    wait_go();  // the test killed rank 0 before saying GO
    const std::vector<KvBlockMove> moves{{5, 0}};
    remote.read(moves);
    fail("peer: reading from a killed region succeeded");
  }
  const std::vector<KvBlockMove> reads{{5, 0}, {2, 1}, {15, 2}};
  remote.read(reads);
  bool ok = true;
  for (const KvBlockMove& m : reads) ok = ok && block_is(mem.data(), local, m.local, m.remote, 0);
  bool untouched = true;  // local block 3 was not a destination
  for (const ucp_dt_iov_t& seg : local.segments(mem.data(), 3))
    untouched = untouched && std::all_of(static_cast<uint8_t*>(seg.buffer),
                                         static_cast<uint8_t*>(seg.buffer) + seg.length,
                                         [](uint8_t v) { return v == 0; });
  say(fmt::format("RESULT what=read ok={} untouched={}", int(ok), int(untouched)));
  std::string refused;
  try {
    const std::vector<KvBlockMove> bad{{16, 0}};
    remote.read(bad);
  } catch (const Error& e) {
    refused = e.what();
  }
  say(fmt::format(
      "RESULT what=refused ok={}",
      int(refused.find("remote block 16: the region has 16 blocks") != std::string::npos)));
  fill_block(mem.data(), local, 0, 100, 1);
  fill_block(mem.data(), local, 1, 101, 1);
  const std::vector<KvBlockMove> writes{{7, 0}, {0, 1}};
  remote.write(writes);
  // Read back what was written (remote 7 and 0 into local 2 and 3).
  const std::vector<KvBlockMove> back{{7, 2}, {0, 3}};
  remote.read(back);
  say(fmt::format(
      "RESULT what=write_read_back ok={}",
      int(block_is(mem.data(), local, 2, 100, 1) && block_is(mem.data(), local, 3, 101, 1))));
}

}  // namespace troupe::peer
