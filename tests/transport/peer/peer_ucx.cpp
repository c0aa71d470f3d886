// Scenarios "ucx-pair" (active messages eager and rendezvous, RMA get / put + flush, contents
// checked) and "ucx-stream" (a stream of large messages, for killing or stopping one side).
#include <chrono>
#include <cstring>
#include <memory>

#include "peer.hpp"
#include "runtime/error.hpp"
#include "transport/ucx/am_mailbox.hpp"
#include "transport/ucx/ucx_memory.hpp"

namespace troupe::peer {

namespace {

constexpr uint32_t kMagic = 0x52494150;  // "PAIR"
constexpr unsigned kAm = 5;
constexpr size_t kRegion = size_t(1) << 20;

uint8_t pattern(size_t i, int k) {
  return uint8_t((i * 131 + size_t(k) * 17 + (i >> 9)) & 0xff);
}

void fill(std::vector<uint8_t>& v, int k) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = pattern(i, k);
}

bool holds(const uint8_t* v, size_t n, int k) {
  for (size_t i = 0; i < n; ++i)
    if (v[i] != pattern(i, k)) return false;
  return true;
}

double us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// Two ranks, each with a worker, a mailbox, a registered 1 MiB region and an endpoint to the
// other (with the other's region's rkey).
struct Pair {
  int32_t rank;
  ucx::Settings settings;
  ucx::Context ctx;
  ucx::Worker worker;
  ucx::Mailbox mailbox;
  std::vector<uint8_t> region;
  ucx::MemoryRegion mr;
  std::unique_ptr<ucx::Endpoint> ep;
  std::unique_ptr<ucx::RemoteKey> rkey;
  uint64_t remote_base = 0;

  static ucx::Settings make_settings(const Args& a) {
    ucx::Settings s;
    s.tls = a.str("tls", "tcp");
    s.net_devices = a.str("dev", s.tls == "tcp" ? "lo" : "");
    s.timeout = std::chrono::milliseconds(a.num("timeout_ms", 10000));
    return s;
  }
  explicit Pair(const Args& a)
      : rank(int32_t(a.num("rank"))),
        settings(make_settings(a)),
        ctx(settings, "troupe-test"),
        worker(ctx),
        mailbox(worker, kAm),
        region(kRegion),
        mr(ctx, region.data(), region.size()) {
    fill(region, 10 + rank);
    Blob mine = BlobWriter(kMagic)
                    .peer(PeerName::self())
                    .bytes(worker.address())
                    .bytes(mr.packed_rkey())
                    .u64(uint64_t(reinterpret_cast<uintptr_t>(region.data())))
                    .take();
    const auto all = bootstrap(mine);
    if (all.size() != 2) fail("ucx pair: {} blobs", all.size());
    const int32_t other = 1 - rank;
    BlobReader rd(all[size_t(other)], kMagic, "pair blob");
    const PeerName who = rd.peer();
    const Blob address = rd.bytes(), packed = rd.bytes();
    remote_base = rd.u64();
    ep = std::make_unique<ucx::Endpoint>(worker, address, who.describe(other));
    rkey = std::make_unique<ucx::RemoteKey>(*ep, packed);
  }
  ~Pair() { rkey.reset(); }

  void send(uint64_t key, const void* data, size_t bytes) {
    ucx::Pending p(worker);
    ucx::Mailbox::send(p, *ep, kAm, ucx::MailHeader{key, uint32_t(rank), 0}, data, bytes, "send");
    p.wait(worker.deadline());
  }
  void recv(uint64_t key, void* dst, size_t bytes) {
    const uint32_t from = uint32_t(1 - rank);
    mailbox.post(from, key, dst, bytes);
    const bool ok = worker.progress_until(
        [&] {
          const auto st = mailbox.status(from, key);
          if (st.state != ucx::Mailbox::State::done) ep->throw_if_failed("receive");
          if (st.state == ucx::Mailbox::State::failed)
            fail("receive of key {} from {} failed: {} ({} bytes arrived)", key, ep->peer(),
                 ucx::status_text(st.ucs), st.arrived_bytes);
          return st.state == ucx::Mailbox::State::done;
        },
        worker.deadline());
    mailbox.forget(from, key);
    if (!ok) fail("receive of key {} from {}: timeout", key, ep->peer());
  }
};

}  // namespace

void scenario_ucx_pair(const Args& a) {
  Pair p(a);
  std::vector<uint8_t> small(64), big(size_t(a.num("big", 1 << 20)));
  if (p.rank == 0) {
    // Active message round trip, eager.
    fill(small, 1);
    auto t0 = std::chrono::steady_clock::now();
    p.send(1, small.data(), small.size());
    std::vector<uint8_t> back(small.size());
    p.recv(2, back.data(), back.size());
    say(fmt::format("RESULT what=am_eager ok={} us={:.1f}", int(holds(back.data(), 64, 2)),
                    us_since(t0)));
    // 1 MiB: rendezvous there and back.
    fill(big, 3);
    t0 = std::chrono::steady_clock::now();
    p.send(3, big.data(), big.size());
    std::vector<uint8_t> big_back(big.size());
    p.recv(4, big_back.data(), big_back.size());
    say(fmt::format("RESULT what=am_rndv ok={} rndv_seen={} us={:.1f}",
                    int(holds(big_back.data(), big_back.size(), 4)), p.mailbox.stats().rndv,
                    us_since(t0)));
    // RMA: get the peer's region, put into it, flush, and let the peer check it.
    std::vector<uint8_t> got(kRegion);
    t0 = std::chrono::steady_clock::now();
    {
      ucx::Pending ops(p.worker);
      ucx::rma_get(ops, *p.ep, *p.rkey, p.remote_base, got.data(), got.size(), "get");
      ops.wait(p.worker.deadline());
    }
    say(fmt::format("RESULT what=rma_get ok={} us={:.1f}", int(holds(got.data(), kRegion, 11)),
                    us_since(t0)));
    std::vector<uint8_t> put(kRegion);
    fill(put, 5);
    t0 = std::chrono::steady_clock::now();
    {
      ucx::Pending ops(p.worker);
      // In two halves, the second at an offset: addresses inside the region work.
      ucx::rma_put(ops, *p.ep, *p.rkey, p.remote_base, put.data(), kRegion / 2, "put");
      ucx::rma_put(ops, *p.ep, *p.rkey, p.remote_base + kRegion / 2, put.data() + kRegion / 2,
                   kRegion / 2, "put");
      ops.wait(p.worker.deadline());
      ucx::rma_flush(ops, *p.ep, "flush");
      ops.wait(p.worker.deadline());
    }
    const double put_us = us_since(t0);
    const uint8_t check = 1;
    p.send(5, &check, 1);
    uint8_t verdict = 0;
    p.recv(6, &verdict, 1);
    say(fmt::format("RESULT what=rma_put ok={} us={:.1f}", int(verdict == 1), put_us));
  } else {
    std::vector<uint8_t> in(small.size());
    p.recv(1, in.data(), in.size());
    fill(small, 2);
    if (!holds(in.data(), in.size(), 1)) small.assign(small.size(), 0);
    p.send(2, small.data(), small.size());
    p.recv(3, big.data(), big.size());
    const bool big_ok = holds(big.data(), big.size(), 3);
    fill(big, 4);
    if (!big_ok) big.assign(big.size(), 0);
    p.send(4, big.data(), big.size());
    say(fmt::format("RESULT what=am_rndv_received ok={} rndv_seen={}", int(big_ok),
                    p.mailbox.stats().rndv));
    uint8_t check = 0;
    p.recv(5, &check, 1);  // progressing meanwhile serves the peer's (emulated) RMA
    const uint8_t verdict = holds(p.region.data(), kRegion, 5) ? 1 : 0;
    p.send(6, &verdict, 1);
  }
}

void scenario_ucx_stream(const Args& a) {
  Pair p(a);
  // Rank "sender" sends messages of `bytes` as fast as they go; the other receives them. After
  // the first one each side says MARK streaming, so the test can kill or stop one mid-transfer.
  const bool sender = p.rank == int32_t(a.num("sender", 1));
  std::vector<uint8_t> buf(size_t(a.num("bytes", 8 << 20)));
  fill(buf, 7);
  for (uint64_t key = 1; key < 100000; ++key) {
    if (sender)
      p.send(key, buf.data(), buf.size());
    else
      p.recv(key, buf.data(), buf.size());
    if (key == 1) say("MARK streaming");
  }
  fail("ucx stream: ran out of messages");
}

}  // namespace troupe::peer
