// troupe_transport_bench: how fast troupe's transports move bytes on this machine, next to what
// ucx_perftest (Debian ucx-utils) gets from the same UCX transport, message size and endpoint
// settings (peer error handling on, as troupe's endpoints have it). Writes JSON.
//
//   troupe_transport_bench [--out FILE] [--tls sm,tcp] [--reps N] [--no-perftest]
//                          [--sections kv,latency,allreduce,nccl] [--perftest PATH]
//                          [--region alloc|user]   (the KvRegion's memory: UCX's, the default,
//                                                   or the helper's own vector)
//
// Sections:
// - kv: KvRemote reading and writing blocks of a KvRegion in another process, by RMA and by
//   active messages, for a Llama-3-8B KV block (32 layers x K,V planes of 16 tokens x 8 KV heads
//   x 128 dims x bf16 = 64 segments of 32 KiB, 2 MiB a block) and contiguous blocks of 64 KiB to
//   4 MiB, each block once ("distinct") and one block over and over ("one block", ucx_perftest's
//   own pattern: one cache-hot buffer); bandwidth in MiB/s (best of --reps calls, 32-64 MiB
//   each) and its ratio to
//   ucx_perftest's ucp_am_bw (am), ucp_get (rma read) or ucp_put_bw (rma write) at the size of one
//   message (a block for am; a segment for rma).
// - latency: one block read (median of 50), Llama block and 64 KiB.
// - allreduce: CPU all_reduce_sum of 16, 32 and 64 KiB between 2 rank processes (shm and UCX),
//   median and 90th percentile of 3000 calls after 300 warm-up calls.
// - nccl (builds with NCCL; needs 2 GPUs, not in the default sections): NcclCollectives'
//   all_reduce_sum of bf16 tensors of 8 KiB .. 4 MiB between 2 processes, one per GPU, and the
//   custom one-shot all-reduce over CUDA IPC (CustomAllReduce) at the same sizes, side by side
//   (issue 23's latency table): the GPU time of one call (CUDA events around it on the rank's
//   stream, the wait for the peer included) as median and 90th percentile of 500 calls after 50
//   warm-up calls, and the mean time per call of 200 calls enqueued back to back (what a
//   pipelined run sees), with the algorithm bandwidth bytes / time.
// Helper processes are this program again (--role ...), bootstrapped over their stdin/stdout.
#include <sys/utsname.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "tests/transport/process_group.hpp"
#include "transport/collectives/shm_collectives.hpp"
#include "transport/collectives/ucx_collectives.hpp"
#include "transport/kv/kv_region.hpp"
#include "transport/kv/kv_remote.hpp"
#include "transport/stdio_bootstrap.hpp"
#ifdef TROUPE_BENCH_NCCL
#include <cuda_runtime.h>

#include "runtime/backend/dtype.hpp"
#include "transport/nccl/custom_all_reduce.hpp"
#include "transport/nccl/nccl_collectives.hpp"
#endif

using namespace troupe;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) fail("bench: cannot read /proc/self/exe");
  return std::string(buf, size_t(n));
}

ucx::Settings ucx_for(const std::string& tls) {
  ucx::Settings s;
  s.tls = tls;
  if (tls == "tcp") s.net_devices = "lo";
  s.timeout = std::chrono::seconds(60);
  return s;
}

struct KvCase {
  std::string name;
  uint32_t layers;  // 0: contiguous blocks
  uint64_t blocks;
  uint64_t bytes;  // slice bytes (per layer and K or V) or block bytes
  [[nodiscard]] KvLayout layout() const {
    return layers > 0 ? KvLayout::per_layer(layers, blocks, bytes)
                      : KvLayout::contiguous(blocks, bytes);
  }
  [[nodiscard]] std::string arg() const { return fmt::format("{},{},{}", layers, blocks, bytes); }
  static KvCase parse(const std::string& s) {
    KvCase c;
    std::sscanf(s.c_str(), "%u,%lu,%lu", &c.layers, &c.blocks, &c.bytes);
    return c;
  }
};

const std::vector<KvCase> kKvCases = {
    {"llama3-8b block (64 x 32 KiB)", 32, 32, 32 << 10},
    {"64 KiB block", 0, 512, 64 << 10},
    {"256 KiB block", 0, 128, 256 << 10},
    {"1 MiB block", 0, 32, 1 << 20},
    {"4 MiB block", 0, 8, 4 << 20},
};

// --role kv-region tls case region: exposes a region (UCX's memory or its own) until "QUIT".
int role_kv_region(const std::string& tls, const KvCase& c, const std::string& memory) {
  const KvLayout layout = c.layout();
  std::vector<uint8_t> mem(memory == "user" ? layout.span_bytes() : 0);
  auto made = mem.empty() ? std::make_unique<KvRegion>(layout, ucx_for(tls))
                          : std::make_unique<KvRegion>(mem.data(), layout, ucx_for(tls));
  KvRegion& region = *made;
  auto* bytes = static_cast<uint8_t*>(region.data());
  for (size_t i = 0; i < layout.span_bytes(); ++i) bytes[i] = uint8_t(i * 7);
  (void)stdio_bootstrap(region.descriptor(), std::chrono::seconds(60));
  while (stdio_read_line(std::chrono::seconds(600)) != "QUIT") {
  }
  return 0;
}

std::vector<double> sorted(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v;
}
double pct(const std::vector<double>& s, double q) {
  return s.empty() ? 0 : s[std::min(s.size() - 1, size_t(q * double(s.size())))];
}

// --role allreduce impl tls rank: 2-rank all_reduce_sum latency; rank 0 prints RESULT lines.
int role_allreduce(const std::string& impl, const std::string& tls, int32_t rank) {
  std::unique_ptr<Collectives> c;
  Blob mine;
  std::function<void(const std::vector<Blob>&)> connect;
  if (impl == "shm") {
    ShmCollectivesSettings s;
    s.name_prefix = fmt::format("/troupe-bench-{}", getppid());
    auto shm = std::make_unique<ShmCollectives>(rank, 2, s);
    mine = shm->blob();
    connect = [p = shm.get()](const std::vector<Blob>& b) { p->connect(b); };
    c = std::move(shm);
  } else {
    auto u = std::make_unique<UcxCollectives>(rank, 2, UcxCollectivesSettings{ucx_for(tls)});
    mine = u->blob();
    connect = [p = u.get()](const std::vector<Blob>& b) { p->connect(b); };
    c = std::move(u);
  }
  connect(stdio_bootstrap(mine, std::chrono::seconds(60)));
  for (size_t bytes : {size_t(16) << 10, size_t(32) << 10, size_t(64) << 10}) {
    std::vector<float> x(bytes / 4, 1.0f);
    const Tensor t(x.data(), DType::f32, Device{}, {int64_t(x.size())});
    for (int i = 0; i < 300; ++i) c->all_reduce_sum(t);
    std::vector<double> us;
    for (int i = 0; i < 3000; ++i) {
      const auto t0 = Clock::now();
      c->all_reduce_sum(t);
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    const auto s = sorted(us);
    if (rank == 0)
      stdio_say(fmt::format("RESULT {} {} {:.2f} {:.2f} {:.2f}", bytes, s.size(), pct(s, 0.5),
                            pct(s, 0.9),
                            std::accumulate(s.begin(), s.end(), 0.0) / double(s.size())));
  }
  return 0;
}

#ifdef TROUPE_BENCH_NCCL
void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("bench: {} failed: {}", what, cudaGetErrorString(e));
}

// --role nccl rank: rank 0 makes NCCL's unique id (and hosts its bootstrap root) and passes it
// in its blob, with each rank's custom all-reduce blob; each rank runs on GPU `rank`. Rank 0
// prints RESULT lines, NCCL's and the custom path's for each size.
int role_nccl(int32_t rank) {
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  cuda_ok(cudaSetDevice(rank), "cudaSetDevice");
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  CustomAllReduce custom(rank, 2);
  constexpr uint32_t kMagic = 0x4e424348;  // "NBCH"
  BlobWriter w(kMagic);
  w.bytes(rank == 0 ? NcclCollectives::make_unique_id() : Blob{}).bytes(custom.blob());
  const std::vector<Blob> blobs = stdio_bootstrap(w.take(), std::chrono::seconds(60));
  std::vector<Blob> nccl_ids, custom_blobs;
  for (size_t r = 0; r < blobs.size(); ++r) {
    BlobReader rd(blobs[r], kMagic, fmt::format("bench blob of rank {}", r));
    nccl_ids.push_back(rd.bytes());
    custom_blobs.push_back(rd.bytes());
    rd.finish();
  }
  custom.connect(custom_blobs, stream);
  NcclCollectives nccl(rank, 2, nccl_ids.at(0), stream);
  void* dev = nullptr;
  const size_t max_bytes = size_t(4) << 20;
  cuda_ok(cudaMalloc(&dev, max_bytes), "cudaMalloc");
  cuda_ok(cudaMemset(dev, 0, max_bytes), "cudaMemset");
  cudaEvent_t begin, end;
  cuda_ok(cudaEventCreate(&begin), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&end), "cudaEventCreate");
  for (size_t bytes = size_t(8) << 10; bytes <= max_bytes; bytes *= 2) {
    for (const bool use_custom : {false, true}) {
      Collectives& c = use_custom ? static_cast<Collectives&>(custom) : nccl;
      const auto sync = [&] { use_custom ? custom.synchronize() : nccl.synchronize(); };
      const Tensor t(dev, DType::bf16, Device{DeviceKind::cuda, rank}, {int64_t(bytes / 2)});
      for (int i = 0; i < 50; ++i) c.all_reduce_sum(t);
      sync();
      std::vector<double> us;
      for (int i = 0; i < 500; ++i) {
        cuda_ok(cudaEventRecord(begin, stream), "cudaEventRecord");
        c.all_reduce_sum(t);
        cuda_ok(cudaEventRecord(end, stream), "cudaEventRecord");
        sync();
        float ms = 0;
        cuda_ok(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
        us.push_back(double(ms) * 1000.0);
      }
      const auto t0 = Clock::now();
      for (int i = 0; i < 200; ++i) c.all_reduce_sum(t);
      sync();
      const double pipelined =
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 200.0;
      const auto s = sorted(us);
      if (rank == 0)
        stdio_say(fmt::format("RESULT {} {} {} {:.2f} {:.2f} {:.2f}",
                              use_custom ? "custom" : "nccl", bytes, s.size(), pct(s, 0.5),
                              pct(s, 0.9), pipelined));
    }
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  cudaFree(dev);
  cudaStreamDestroy(stream);
  return 0;
}

json run_nccl() {
  json out = json::array();
  test::ProcessGroup g(self_exe(), 2, [](int r) {
    return std::vector<std::string>{"--role", "nccl", std::to_string(r)};
  });
  if (const std::string e = g.exchange_blobs(60); !e.empty()) fail("bench: {}", e);
  for (size_t i = 0; i < 2 * 10; ++i) {  // 8 KiB .. 4 MiB, NCCL then custom
    auto line = g[0].expect("RESULT", test::after(300));
    if (!line || line->rfind("RESULT", 0) != 0)
      fail("bench: NCCL rank 0 said {}", line.value_or("nothing"));
    size_t b = 0, n = 0;
    double med = 0, p90 = 0, pipelined = 0;
    char impl[16] = {};
    std::sscanf(line->c_str(), "RESULT %15s %zu %zu %lf %lf %lf", impl, &b, &n, &med, &p90,
                &pipelined);
    json row{{"impl", std::string(impl)},
             {"dtype", "bfloat16"},
             {"bytes", b},
             {"calls", n},
             {"median_us", med},
             {"p90_us", p90},
             {"pipelined_us", pipelined},
             {"algbw_gb_s", med > 0 ? double(b) / (med * 1e3) : 0.0}};
    std::cerr << row.dump() << "\n";
    out.push_back(row);
  }
  g[0].wait_exit(60);
  g[1].wait_exit(60);
  return out;
}
#endif

// ucx_perftest server + client on 127.0.0.1; returns the "overall" bandwidth (MiB/s) of Final.
double perftest(const std::string& exe, const std::string& tls, const std::string& test,
                size_t bytes, int port) {
  std::string env = fmt::format("UCX_TLS={} ", tls);
  if (tls == "tcp") env += "UCX_NET_DEVICES=lo ";
  if (tls == "sm") env += "UCX_MM_ERROR_HANDLING=y ";
  const size_t iters = std::clamp<size_t>((size_t(512) << 20) / bytes, 200, 20000);
  const std::string common =
      fmt::format("-p {} -t {} -s {} -n {} -w {} -e", port, test, bytes, iters, iters / 10 + 10);
  const std::string server = fmt::format("{}{} {} >/dev/null 2>&1 &", env, exe, common);
  if (std::system(server.c_str()) != 0) return 0;
  usleep(300000);
  const std::string client = fmt::format("{}{} 127.0.0.1 {} 2>&1", env, exe, common);
  FILE* f = popen(client.c_str(), "r");
  if (f == nullptr) return 0;
  double mib_s = 0;
  char line[1024];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const std::string l = line;
    if (l.rfind("Final:", 0) != 0) continue;
    double v[7] = {};
    if (std::sscanf(l.c_str() + 6, "%lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4],
                    &v[5], &v[6]) == 7)
      mib_s = v[5];  // bandwidth (MB/s = MiB/s), overall
  }
  pclose(f);
  return mib_s;
}

json run_kv(const std::string& tls, const std::string& memory, int reps, bool with_perftest,
            const std::string& perftest_exe, json& latency, bool want_latency) {
  json out = json::array();
  int port = 13400 + (tls == "tcp" ? 0 : 50);
  std::map<std::pair<std::string, size_t>, double> limits;  // (test, size) -> MiB/s
  auto limit = [&](const std::string& test, size_t bytes) {
    auto key = std::make_pair(test, bytes);
    if (!with_perftest) return 0.0;
    if (!limits.count(key)) limits[key] = perftest(perftest_exe, tls, test, bytes, port++);
    return limits[key];
  };
  for (const KvCase& c : kKvCases) {
    test::ProcessGroup g(self_exe(), 1, [&](int) {
      return std::vector<std::string>{"--role", "kv-region", tls, c.arg(), memory};
    });
    std::vector<std::string> blobs;
    auto line = g[0].expect("BLOB ", test::after(60));
    if (!line || line->rfind("BLOB ", 0) != 0) fail("bench: the kv region did not start");
    const Blob descriptor = from_hex(line->substr(5));
    g[0].write_line(fmt::format("BLOBS {}", line->substr(5)));
    const KvLayout layout = c.layout();
    std::vector<uint8_t> local(layout.span_bytes());
    std::memset(local.data(), 1, local.size());  // touch every page before timing
    // "distinct": every block once (what a swap or a migration does: memory-bound); "one
    // block": block 0 as many times (what ucx_perftest does: one buffer, cache-hot).
    std::vector<KvBlockMove> distinct(layout.num_blocks), one_block(layout.num_blocks);
    for (uint64_t b = 0; b < layout.num_blocks; ++b) {
      distinct[b] = KvBlockMove{b, b};
      one_block[b] = KvBlockMove{0, 0};
    }
    for (const std::string method : {"rma", "am"}) {
      KvSettings ks;
      ks.ucx = ucx_for(tls);
      ks.method = method;
      KvRemote remote(descriptor, local.data(), layout, ks);
      for (const std::string pattern : {"distinct", "one block"})
        for (const std::string dir : {"read", "write"}) {
          const std::vector<KvBlockMove>& moves = pattern == "distinct" ? distinct : one_block;
          auto once = [&] {
            const auto t0 = Clock::now();
            dir == "read" ? remote.read(moves) : remote.write(moves);
            return std::chrono::duration<double>(Clock::now() - t0).count();
          };
          once();  // wire-up and registration caches
          std::vector<double> mib_s;
          const double mib = double(layout.block_bytes() * layout.num_blocks) / double(1 << 20);
          for (int r = 0; r < reps; ++r) mib_s.push_back(mib / once());
          const auto s = sorted(mib_s);
          const size_t msg = method == "am" ? layout.block_bytes() : layout.segment_bytes;
          const std::string test = method == "am"  ? "ucp_am_bw"
                                   : dir == "read" ? "ucp_get"
                                                   : "ucp_put_bw";
          const double lim = limit(test, msg);
          json row{{"tls", tls},
                   {"case", c.name},
                   {"region", memory},
                   {"pattern", pattern},
                   {"method", method},
                   {"direction", dir},
                   {"block_bytes", layout.block_bytes()},
                   {"blocks_per_call", layout.num_blocks},
                   {"mib_s_best", s.back()},
                   {"mib_s_median", pct(s, 0.5)},
                   {"perftest", test},
                   {"perftest_bytes", msg},
                   {"perftest_mib_s", lim},
                   {"ratio_best", lim > 0 ? s.back() / lim : 0.0}};
          std::cerr << row.dump() << "\n";
          out.push_back(row);
        }
      if (want_latency && (c.layers > 0 || c.bytes == (64 << 10))) {
        std::vector<double> us;
        const std::vector<KvBlockMove> one{{3, 0}};
        for (int i = 0; i < 55; ++i) {
          const auto t0 = Clock::now();
          remote.read(one);
          if (i >= 5)
            us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
        const auto s = sorted(us);
        json row{{"tls", tls},
                 {"case", c.name},
                 {"region", memory},
                 {"method", method},
                 {"op", "read of one block"},
                 {"median_us", pct(s, 0.5)},
                 {"p90_us", pct(s, 0.9)}};
        std::cerr << row.dump() << "\n";
        latency.push_back(row);
      }
    }
    g[0].write_line("QUIT");
    g[0].wait_exit(10);
  }
  return out;
}

json run_allreduce(const std::vector<std::pair<std::string, std::string>>& impls) {
  json out = json::array();
  for (const auto& [impl, tls] : impls) {
    test::ProcessGroup g(self_exe(), 2, [&, impl = impl, tls = tls](int r) {
      return std::vector<std::string>{"--role", "allreduce", impl, tls, std::to_string(r)};
    });
    if (const std::string e = g.exchange_blobs(60); !e.empty()) fail("bench: {}", e);
    for (int i = 0; i < 3; ++i) {
      auto line = g[0].expect("RESULT", test::after(300));
      if (!line || line->rfind("RESULT", 0) != 0)
        fail("bench: all-reduce rank 0 said {}", line.value_or("nothing"));
      size_t bytes = 0, n = 0;
      double med = 0, p90 = 0, mean = 0;
      std::sscanf(line->c_str(), "RESULT %zu %zu %lf %lf %lf", &bytes, &n, &med, &p90, &mean);
      json row{{"impl", impl},     {"tls", tls},    {"bytes", bytes}, {"calls", n},
               {"median_us", med}, {"p90_us", p90}, {"mean_us", mean}};
      std::cerr << row.dump() << "\n";
      out.push_back(row);
    }
    g[0].wait_exit(30);
    g[1].wait_exit(30);
  }
  return out;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t c = s.find(',', pos);
    v.push_back(s.substr(pos, c - pos));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() >= 5 && args[0] == "--role" && args[1] == "kv-region")
      return role_kv_region(args[2], KvCase::parse(args.at(3)), args.at(4));
    if (args.size() >= 5 && args[0] == "--role" && args[1] == "allreduce")
      return role_allreduce(args[2], args[3], std::stoi(args[4]));
#ifdef TROUPE_BENCH_NCCL
    if (args.size() >= 3 && args[0] == "--role" && args[1] == "nccl")
      return role_nccl(std::stoi(args[2]));
#endif
    std::string out_path, perftest_exe = "ucx_perftest", memory = "alloc";
    std::vector<std::string> tls{"sm", "tcp"}, sections{"kv", "latency", "allreduce"};
    int reps = 5;
    bool with_perftest = true;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&] {
        if (i + 1 >= args.size()) fail("bench: {} needs a value", a);
        return args[++i];
      };
      if (a == "--out")
        out_path = value();
      else if (a == "--tls")
        tls = split(value());
      else if (a == "--reps")
        reps = std::stoi(value());
      else if (a == "--sections")
        sections = split(value());
      else if (a == "--perftest")
        perftest_exe = value();
      else if (a == "--region")
        memory = value();
      else if (a == "--no-perftest")
        with_perftest = false;
      else
        fail("bench: unknown option {} (see the header of transport_bench.cpp)", a);
    }
    auto has = [&](const char* s) { return std::count(sections.begin(), sections.end(), s) > 0; };
    utsname u{};
    uname(&u);
    double load[3] = {};
    getloadavg(load, 3);
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
    json result{{"machine",
                 {{"host", u.nodename},
                  {"kernel", u.release},
                  {"cores", sysconf(_SC_NPROCESSORS_ONLN)},
                  {"load_average_at_start", {load[0], load[1], load[2]}}}},
                {"date", date}};
    json kv = json::array(), latency = json::array();
    if (has("kv") || has("latency"))
      for (const std::string& t : tls) {
        json rows = run_kv(t, memory, has("kv") ? reps : 1, with_perftest && has("kv"),
                           perftest_exe, latency, has("latency"));
        if (has("kv"))
          for (auto& r : rows) kv.push_back(r);
      }
    result["kv"] = kv;
    result["kv_latency"] = latency;
    if (has("allreduce"))
      result["allreduce"] = run_allreduce({{"shm", "-"}, {"ucx", "tcp"}, {"ucx", "sm"}});
    if (has("nccl")) {
#ifdef TROUPE_BENCH_NCCL
      result["nccl_allreduce"] = run_nccl();
#else
      fail("bench: --sections nccl: this build has no NCCL (it needs the CUDA backend and NCCL)");
#endif
    }
    const std::string text = result.dump(2);
    if (out_path.empty()) {
      std::cout << text << "\n";
    } else {
      std::ofstream(out_path) << text << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "troupe_transport_bench: " << e.what() << "\n";
    return 1;
  }
}
