// Scenarios "collectives" (every op at every size against references) and "collectives-fault"
// (one rank dies or stops mid-run; the others report the error).
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "peer.hpp"
#include "runtime/error.hpp"
#include "transport/collectives/shm_collectives.hpp"
#include "transport/collectives/ucx_collectives.hpp"

namespace troupe::peer {

namespace {

// One of the two CPU implementations, by the "impl" argument.
struct Group {
  std::unique_ptr<ShmCollectives> shm;
  std::unique_ptr<UcxCollectives> ucx;

  explicit Group(const Args& a) {
    const auto rank = int32_t(a.num("rank")), size = int32_t(a.num("size"));
    const auto timeout = std::chrono::milliseconds(a.num("timeout_ms", 10000));
    const std::string impl = a.str("impl");
    if (impl == "shm") {
      ShmCollectivesSettings s;
      s.name_prefix = a.str("prefix", "/troupe-peer");
      s.timeout = timeout;
      if (a.num("slot_bytes") > 0) s.slot_bytes = size_t(a.num("slot_bytes"));
      if (a.kv.count("one_shot")) s.one_shot_max_bytes = size_t(a.num("one_shot"));
      shm = std::make_unique<ShmCollectives>(rank, size, s);
    } else if (impl == "ucx") {
      UcxCollectivesSettings s;
      s.ucx.tls = a.str("tls", "tcp");
      s.ucx.net_devices = a.str("dev", s.ucx.tls == "tcp" ? "lo" : "");
      s.ucx.timeout = timeout;
      if (a.kv.count("one_shot")) s.one_shot_max_bytes = size_t(a.num("one_shot"));
      ucx = std::make_unique<UcxCollectives>(rank, size, s);
    } else {
      fail("peer: impl '{}' is not shm or ucx", impl);
    }
  }
  Collectives& c() { return shm ? static_cast<Collectives&>(*shm) : *ucx; }
  Blob blob() const { return shm ? shm->blob() : ucx->blob(); }
  void connect(const std::vector<Blob>& b) { shm ? shm->connect(b) : ucx->connect(b); }
};

Tensor host_f32(std::vector<float>& v) {
  return Tensor(v.data(), DType::f32, Device{}, {int64_t(v.size())});
}

}  // namespace

void scenario_collectives(const Args& a) {
  Group g(a);
  g.connect(bootstrap(g.blob()));
  Collectives& c = g.c();
  const int64_t rank = c.rank(), size = c.size();
  for (int pass = 0; pass < int(a.num("passes", 2)); ++pass) {
    for (int64_t n64 : a.nums("sizes")) {
      const size_t n = size_t(n64);
      const uint64_t salt = uint64_t(pass) * 100;
      // all_reduce_sum against the sum in rank order (f32, bit for bit) and in float64.
      std::vector<std::vector<float>> all;
      for (int64_t r = 0; r < size; ++r) all.push_back(data_for(r, n, salt + 1));
      std::vector<float> x = all[size_t(rank)];
      auto t0 = std::chrono::steady_clock::now();
      c.all_reduce_sum(host_f32(x));
      const double ms_reduce =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      bool exact = true;
      double worst = 0;
      for (size_t i = 0; i < n; ++i) {
        float acc = all[0][i];
        double ref = all[0][i], mag = std::fabs(all[0][i]);
        for (int64_t r = 1; r < size; ++r) {
          acc += all[size_t(r)][i];
          ref += all[size_t(r)][i];
          mag += std::fabs(all[size_t(r)][i]);
        }
        uint32_t a32, b32;
        std::memcpy(&a32, &acc, 4);
        std::memcpy(&b32, &x[i], 4);
        exact = exact && a32 == b32;
        worst = std::max(worst, std::fabs(double(x[i]) - ref) / (mag * 0x1p-24 * double(size)));
      }
      say(fmt::format(
          "RESULT op=all_reduce_sum n={} pass={} exact={} err_ulps={:.3f} hash={} ms={:.3f}", n,
          pass, int(exact), worst, hash_hex(x.data(), n * 4), ms_reduce));
      // all_gather against every rank's input in rank order.
      std::vector<float> in = data_for(rank, n, salt + 2), out(n * size_t(size), NAN);
      t0 = std::chrono::steady_clock::now();
      c.all_gather(host_f32(in), Tensor(out.data(), DType::f32, Device{}, {size, int64_t(n)}));
      const double ms_gather =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      bool same = true;
      for (int64_t r = 0; r < size; ++r)
        same = same &&
               std::memcmp(out.data() + size_t(r) * n, data_for(r, n, salt + 2).data(), n * 4) == 0;
      say(fmt::format("RESULT op=all_gather n={} pass={} exact={} err_ulps=0 hash={} ms={:.3f}", n,
                      pass, int(same), hash_hex(out.data(), out.size() * 4), ms_gather));
    }
  }
}

void scenario_collectives_fault(const Args& a) {
  Group g(a);
  g.connect(bootstrap(g.blob()));
  Collectives& c = g.c();
  const int64_t victim = a.num("victim"), at = a.num("at_step", 3);
  const std::string how = a.str("how", "kill");
  std::vector<float> x(size_t(a.num("n", 1024)));
  for (int64_t step = 0; step < at + 3; ++step) {
    if (c.rank() == victim && step == at) {
      say("MARK dying");
      raise(how == "stop" ? SIGSTOP : SIGKILL);
    }
    if (c.rank() != victim && step == at) say("MARK waiting");
    x = data_for(c.rank(), x.size(), uint64_t(step));
    c.all_reduce_sum(host_f32(x));
  }
  fail("peer: rank {} finished every step though rank {} was to {} at step {}", c.rank(), victim,
       how, at);
}

}  // namespace troupe::peer
