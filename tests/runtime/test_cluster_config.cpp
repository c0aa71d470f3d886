// The cluster file (runtime/config/cluster_config.hpp): every key read, a table of bad files
// each named by key and line, the shipped configs/cluster/*.toml, rank placement, launch
// command lines run through a real /bin/sh, and vLLM's multi-node flags.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/config/cluster_config.hpp"
#include "runtime/error.hpp"
#include "tests/runtime/test_error_of.hpp"

using Catch::Matchers::Contains;
using troupe::ClusterConfig;
using troupe::ClusterNode;
using troupe::RankPlacement;
using troupe::test::error_of;

namespace {

std::string cluster_error(const std::string& text) {
  return error_of([&] { (void)troupe::parse_cluster_config(text, "cluster.toml"); });
}

std::string validate_error(const ClusterConfig& c) {
  return error_of([&] { troupe::validate(c); });
}

/// A scratch directory of this test process, removed at the end of the scope.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

/// Runs `command` with /bin/sh -c and returns its stdout.
std::string run_sh(const std::string& command) {
  FILE* p = ::popen(command.c_str(), "r");  // popen runs /bin/sh -c
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  CHECK(::pclose(p) == 0);
  return out;
}

const char* kTwoGpuNodes = R"(
[head]
address = "10.0.0.1"
port = 29501

[parallel]
tensor_parallel_size = 2
pipeline_parallel_size = 2

[[node]]
name = "a"
host = "10.0.0.2"
devices = [0, 1]
launcher = "ssh"

[[node]]
name = "b"
host = "10.0.0.3"
devices = [2, 3]
launcher = "ssh"
)";

}  // namespace

TEST_CASE("a cluster file sets every key, in every table", "[cluster]") {
  ClusterConfig c = troupe::parse_cluster_config(R"(
[head]
address = "head.example.com"
port = 7000
join_timeout_ms = 9000

[parallel]
tensor_parallel_size = 2
pipeline_parallel_size = 2

[transport]
ucx_tls = "tcp"
collectives = "nccl"
net_device = "mlx5_0:1"

[heartbeat]
interval_ms = 100
timeout_ms = 1000

[launcher]
ssh_command = "ssh -p 2222 {host} {command}"
srun_command = "srun -w {host} {troupe} worker {worker_args}"

[[node]]
name = "gpu-a"
host = "10.1.0.2"
devices = [3, 1]
launcher = "srun"
first_rank = 2

[[node]]
host = "fe80::2"
devices = [0, 1]
workers = 2
launcher = "command"
command = "env CUDA_VISIBLE_DEVICES={device} {troupe} worker {worker_args}"
first_rank = 0

[[node]]
name = "standby"
host = "10.1.0.4"
devices = [0]
launcher = "ssh"
command = "ssh -J bastion {host} {command}"
spare = true

[faults]
inject = ["kill-worker:rank=1,step=20"]
max_executor_restarts = 2
)",
                                                 "cluster.toml");
  CHECK(c.head_address == "head.example.com");
  CHECK(c.head_port == 7000);
  CHECK(c.join_timeout_ms == 9000);
  CHECK(c.tensor_parallel_size == 2);
  CHECK(c.pipeline_parallel_size == 2);
  CHECK(c.ucx_tls == "tcp");
  CHECK(c.collectives == "nccl");
  CHECK(c.net_device == "mlx5_0:1");
  CHECK(c.heartbeat_interval_ms == 100);
  CHECK(c.heartbeat_timeout_ms == 1000);
  CHECK(c.ssh_command == "ssh -p 2222 {host} {command}");
  CHECK(c.srun_command == "srun -w {host} {troupe} worker {worker_args}");
  REQUIRE(c.nodes.size() == 3);
  CHECK(c.nodes[0] == ClusterNode{.name = "gpu-a",
                                  .host = "10.1.0.2",
                                  .devices = {3, 1},
                                  .workers = 2,  // one per device when not given
                                  .launcher = "srun",
                                  .command = "",
                                  .first_rank = 2,
                                  .spare = false});
  CHECK(c.nodes[1].name == "node1");  // the default name: its index
  CHECK(c.nodes[1].host == "fe80::2");
  CHECK(c.nodes[1].first_rank == 0);
  CHECK(c.nodes[1].command == "env CUDA_VISIBLE_DEVICES={device} {troupe} worker {worker_args}");
  CHECK(c.nodes[2].spare);
  CHECK(c.nodes[2].workers == 1);
  CHECK(c.fault_inject == std::vector<std::string>{"kill-worker:rank=1,step=20"});
  CHECK(c.max_executor_restarts == 2);
}

TEST_CASE("a cluster file that names only a node gets every default", "[cluster]") {
  ClusterConfig c = troupe::parse_cluster_config("[[node]]\n", "cluster.toml");
  ClusterConfig expected;
  expected.nodes.push_back(ClusterNode{.name = "node0"});
  CHECK(c == expected);
  CHECK(c.head_address == "127.0.0.1");
  CHECK(c.head_port == 0);
  CHECK(c.nodes[0].host == "127.0.0.1");
  CHECK(c.nodes[0].workers == 1);
  CHECK(c.nodes[0].launcher == "local");
  CHECK(c.heartbeat_interval_ms == 500);
  CHECK(c.heartbeat_timeout_ms == 5000);
  CHECK(c.join_timeout_ms == 30000);
  CHECK(c.ssh_command == "ssh -o BatchMode=yes {host} {command}");
}

TEST_CASE("every bad cluster file is refused naming the file, line, key and what is allowed",
          "[cluster]") {
  struct Case {
    const char* what;
    std::string toml;
    std::vector<std::string> says;  // each must appear in the message
    std::string not_says = "";      // must not appear
  };
  const std::string node = "[[node]]\n";
  const std::vector<Case> cases = {
      {"TOML syntax", "[head\n", {"cluster.toml:1:", "TOML parse error"}},
      {"a bad fault spec",
       node + "[faults]\ninject = [\"kill-worker:rank=1,setp=3\"]\n",
       {"cluster.toml:3:", "faults.inject[0]", "takes no key 'setp'", "allowed: rank, step"}},
      {"an unknown [faults] key",
       node + "[faults]\nkill_rank = 1\n",
       {"cluster.toml:3:1:", "'faults.kill_rank'", "allowed: inject, max_executor_restarts"}},
      {"unknown top-level key that belongs in a table",
       "tensor_parallel_size = 2\n" + node,
       {"cluster.toml:1:1:", "unknown key 'tensor_parallel_size'", "it belongs in [parallel]",
        "allowed: [head], [parallel]"}},
      {"unknown key close to a known one",
       node + "[head]\nprot = 5000\n",
       {"cluster.toml:3:1:", "'head.prot'", "did you mean 'port'?",
        "allowed: address, port, join_timeout_ms"}},
      {"unknown key far from every key",
       node + "[heartbeat]\nxylophone_count = 3\n",
       {"cluster.toml:3:1:", "'heartbeat.xylophone_count'", "allowed: interval_ms, timeout_ms"},
       "did you mean"},
      {"kebab-case key",
       node + "[parallel]\ntensor-parallel-size = 2\n",
       {"cluster.toml:3:1:", "snake_case: did you mean 'tensor_parallel_size'?"}},
      {"another launcher's word for a key",
       "[[node]]\ngpus = [0, 1]\n",
       {"cluster.toml:2:1:", "'node[0].gpus'", "did you mean 'devices'?"}},
      {"a node key in [head]",
       node + "[head]\nhost = \"a\"\n",
       {"cluster.toml:3:1:", "'head.host'", "it belongs in [[node]]"}},
      {"unknown table",
       node + "[transports]\nucx_tls = \"tcp\"\n",
       {"cluster.toml:2:", "unknown key 'transports'", "did you mean '[transport]'?"}},
      {"port given as a string",
       node + "[head]\nport = \"5000\"\n",
       {"cluster.toml:3:8:", "head.port = '5000'", "expected an integer, got a TOML string"}},
      {"[node] instead of [[node]]",
       "[node]\nhost = \"a\"\n",
       {"cluster.toml:1:", "node = ", "write each node as [[node]]"}},
      {"workers given as a string",
       "[[node]]\nworkers = \"2\"\n",
       {"cluster.toml:2:11:", "node[0].workers", "expected an integer"}},
      {"spare given as a string",
       "[[node]]\nspare = \"yes\"\n",
       {"cluster.toml:2:9:", "node[0].spare", "expected true or false"}},
      {"devices not a list",
       "[[node]]\ndevices = 0\n",
       {"cluster.toml:2:11:", "node[0].devices = 0", "expected an array of integers"}},
      {"a device that is not an integer",
       "[[node]]\ndevices = [0, \"1\"]\n",
       {"cluster.toml:2:", "node[0].devices[1]", "expected an integer"}},
      {"an integer past 32 bits",
       node + "[heartbeat]\ntimeout_ms = 5000000000\n",
       {"cluster.toml:3:14:", "heartbeat.timeout_ms = 5000000000", "a 32-bit integer"}},
      {"no node at all",
       "[parallel]\ntensor_parallel_size = 1\n",
       {"cluster.toml: no [[node]] table"}},
      {"duplicate node name",
       "[parallel]\ntensor_parallel_size = 2\n[[node]]\nname = \"a\"\n[[node]]\nname = \"a\"\n",
       {"cluster.toml:6:8:", "node[1].name = 'a'", "node[0] has that name too", "must be unique"}},
      {"a given name equal to another node's default name",
       "[parallel]\ntensor_parallel_size = 2\n[[node]]\nname = \"node1\"\n[[node]]\n",
       {"cluster.toml:5:1:", "node[1].name = 'node1' (the default)", "node[0] has that name too",
        "this node has no name"}},
      {"a bad node name",
       "[[node]]\nname = \"a b\"\n",
       {"cluster.toml:2:8:", "node[0].name = 'a b'", "allowed: 1..64 letters"}},
      {"duplicate rank",
       "[parallel]\ntensor_parallel_size = 2\n[[node]]\nname = \"a\"\nfirst_rank = 1\n"
       "[[node]]\nname = \"b\"\nfirst_rank = 1\n",
       {"cluster.toml:8:14:", "node[1].first_rank = 1",
        "rank 1 already belongs to node 'a' (node[0])"}},
      {"a rank past the last one",
       "[parallel]\ntensor_parallel_size = 2\n[[node]]\nfirst_rank = 0\n[[node]]\nfirst_rank = "
       "5\n",
       {"cluster.toml:6:14:", "node[1].first_rank = 5", "ranks 5..5, past the last rank 1"}},
      {"consecutive ranks colliding with an explicit one",
       "[parallel]\ntensor_parallel_size = 3\n[[node]]\nname = \"a\"\nworkers = 2\n[[node]]\n"
       "name = \"b\"\nfirst_rank = 1\n",
       {"cluster.toml:8:14:", "node[1].first_rank = 1", "rank 1 already belongs to node 'a'"}},
      {"a negative first_rank",
       "[[node]]\nfirst_rank = -1\n",
       {"cluster.toml:2:14:", "node[0].first_rank = -1", "allowed: >= 0"}},
      {"first_rank on a spare",
       "[[node]]\n[[node]]\nspare = true\nfirst_rank = 0\n",
       {"cluster.toml:4:14:", "node[1].first_rank = 0", "a spare node has no rank of its own"}},
      {"port out of range",
       node + "[head]\nport = 70000\n",
       {"cluster.toml:3:8:", "head.port = 70000", "allowed: 1..65535"}},
      {"port 0 with an ssh node",
       "[head]\naddress = \"10.0.0.1\"\n[[node]]\nhost = \"10.0.0.2\"\nlauncher = \"ssh\"\n",
       {"cluster.toml:1:1:", "head.port = 0 (the default)", "node 'node0' uses \"ssh\"",
        "1..65535"}},
      {"heartbeat timeout not above the interval",
       node + "[heartbeat]\ninterval_ms = 1000\ntimeout_ms = 1000\n",
       {"cluster.toml:4:14:", "heartbeat.timeout_ms = 1000", "more than interval_ms = 1000"}},
      {"a zero heartbeat interval",
       node + "[heartbeat]\ninterval_ms = 0\n",
       {"cluster.toml:3:15:", "heartbeat.interval_ms = 0", "allowed: >= 1"}},
      {"a zero join timeout",
       node + "[head]\njoin_timeout_ms = 0\n",
       {"cluster.toml:3:19:", "head.join_timeout_ms = 0", "allowed: >= 1"}},
      {"tensor_parallel_size 0",
       node + "[parallel]\ntensor_parallel_size = 0\n",
       {"cluster.toml:3:24:", "parallel.tensor_parallel_size = 0", "allowed: 1..65536"}},
      {"fewer workers than ranks",
       "[parallel]\ntensor_parallel_size = 2\npipeline_parallel_size = 2\n[[node]]\nworkers = "
       "3\n",
       {"cluster.toml:2:24:", "parallel.tensor_parallel_size = 2", "2 x 2 = 4 ranks",
        "3 worker(s) (3 on 'node0')", "1 rank(s) have no worker"}},
      {"more workers than ranks",
       "[[node]]\nworkers = 2\n[[node]]\n",
       {"cluster.toml: parallel.tensor_parallel_size = 1 (the default)", "1 x 1 = 1",
        "3 worker(s) (2 on 'node0', 1 on 'node1')", "2 worker(s) too many"}},
      {"only spares",
       "[[node]]\nspare = true\n",
       {"no worker (every node is a spare)", "1 rank(s) have no worker"}},
      {"a device listed twice",
       "[[node]]\ndevices = [0, 1, 0]\n",
       {"cluster.toml:2:", "node[0].devices[2] = 0", "device 0 is listed twice"}},
      {"a negative device",
       "[[node]]\ndevices = [-1]\n",
       {"cluster.toml:2:", "node[0].devices[0] = -1", "allowed: >= 0"}},
      {"more workers than devices",
       "[parallel]\ntensor_parallel_size = 3\n[[node]]\ndevices = [0, 1]\nworkers = 3\n",
       {"cluster.toml:5:11:", "node[0].workers = 3", "lists 2 CUDA device(s) ([ 0, 1 ])",
        "each worker needs its own"}},
      {"fewer workers than devices",
       "[[node]]\ndevices = [0, 1]\nworkers = 1\n",
       {"cluster.toml:3:11:", "node[0].workers = 1", "list only the devices to use"}},
      {"more devices than a cluster may have ranks",
       [] {
         std::string t = "[[node]]\ndevices = [0";
         for (int d = 1; d < 70000; ++d) t += ", " + std::to_string(d);
         return t + "]\n";
       }(),
       {"cluster.toml:1:1:", "node[0].workers = 65537 (the default)", "allowed: 1..65536"}},
      {"zero workers",
       "[[node]]\nworkers = 0\n",
       {"cluster.toml:2:11:", "node[0].workers = 0", "allowed: 1..65536"}},
      {"a CPU node beside a CUDA node",
       "[parallel]\ntensor_parallel_size = 2\n[[node]]\ndevices = [0]\n[[node]]\n",
       {"cluster.toml:5:1:", "node[1].devices = [] (the default)", "every node of a cluster"}},
      {"unknown launcher",
       "[[node]]\nlauncher = \"mpirun\"\n",
       {"cluster.toml:2:12:", "node[0].launcher = 'mpirun'",
        "allowed: local | ssh | srun | command | external"}},
      {"unknown placeholder",
       "[[node]]\nlauncher = \"command\"\ncommand = \"{troupe} worker {worker_args} --r {rnak}\"\n",
       {"cluster.toml:3:11:", "node[0].command", "unknown placeholder {rnak}",
        "did you mean {rank}?"}},
      {"a template that starts no worker",
       "[[node]]\nlauncher = \"command\"\ncommand = \"ip netns exec ns1 {troupe}\"\n",
       {"cluster.toml:3:11:", "node[0].command", "starts no worker",
        "{command}, or {troupe} and {worker_args}"}},
      {"an unclosed brace",
       "[[node]]\nlauncher = \"command\"\ncommand = \"{troupe} worker {worker_args\"\n",
       {"cluster.toml:3:11:", "is not closed"}},
      {"a stray closing brace",
       "[[node]]\nlauncher = \"command\"\ncommand = \"{troupe} worker {worker_args} }\"\n",
       {"cluster.toml:3:11:", "closes nothing"}},
      {"launcher command without a command",
       "[[node]]\nlauncher = \"command\"\n",
       {"cluster.toml:1:1:", "node[0].command = '' (the default)", "needs a command template"}},
      {"a command on a local node",
       "[[node]]\ncommand = \"{troupe} worker {worker_args}\"\n",
       {"cluster.toml:2:11:", "node[0].command", "launcher = \"local\" runs no template"}},
      {"a bad ssh_command",
       "[launcher]\nssh_command = \"ssh {host}\"\n[[node]]\n",
       {"cluster.toml:2:15:", "launcher.ssh_command = 'ssh {host}'", "starts no worker"}},
      {"{device} on a CPU node",
       "[head]\nport = 1\naddress = \"10.0.0.1\"\n[launcher]\nssh_command = "
       "\"ssh {host} CUDA_VISIBLE_DEVICES={device} {command}\"\n[[node]]\nhost = "
       "\"10.0.0.2\"\nlauncher = \"ssh\"\n",
       {"cluster.toml:5:15:", "launcher.ssh_command", "{device} on node 'node0', a CPU node"}},
      {"an ssh node without a host",
       "[head]\nport = 1\n[[node]]\nhost = \"\"\nlauncher = \"ssh\"\n",
       {"cluster.toml:4:8:", "node[0].host = ''", "uses {host}: give its host"}},
      {"a host with a space",
       "[[node]]\nhost = \"my host\"\n",
       {"cluster.toml:2:8:", "node[0].host = 'my host'", "not a hostname"}},
      {"a mistyped IPv4 address",
       "[[node]]\nhost = \"10.0.0.256\"\n",
       {"cluster.toml:2:8:", "node[0].host = '10.0.0.256'", "not a hostname"}},
      {"a label too long",
       "[[node]]\nhost = \"" + std::string(64, 'a') + ".com\"\n",
       {"cluster.toml:2:8:", "node[0].host", "1..63 characters"}},
      {"a bracketed IPv6 address",
       "[[node]]\nhost = \"[::1]\"\n",
       {"cluster.toml:2:8:", "without brackets"}},
      {"a bad head address",
       node + "[head]\naddress = \"-head\"\n",
       {"cluster.toml:3:11:", "head.address = '-head'", "not a hostname"}},
      {"a wildcard head address",
       node + "[head]\naddress = \"0.0.0.0\"\n",
       {"cluster.toml:3:11:", "head.address = '0.0.0.0'", "cannot be a wildcard"}},
      {"a loopback head with a remote node",
       "[head]\nport = 5000\n[[node]]\nhost = \"10.0.0.2\"\nlauncher = \"ssh\"\n",
       {"cluster.toml:1:1:", "head.address = '127.0.0.1' (the default)",
        "node 'node0' runs on 10.0.0.2, which cannot dial it"}},
      {"unknown ucx_tls",
       node + "[transport]\nucx_tls = \"rc\"\n",
       {"cluster.toml:3:11:", "transport.ucx_tls = 'rc'", "allowed: auto | tcp | sm"}},
      {"unknown collectives",
       node + "[transport]\ncollectives = \"mpi\"\n",
       {"cluster.toml:3:15:", "allowed: auto | shm | ucx | nccl"}},
      {"a bad net_device",
       node + "[transport]\nnet_device = \"eth0;rm\"\n",
       {"cluster.toml:3:14:", "transport.net_device = 'eth0;rm'", "comma-separated"}},
      {"net_device with shared memory",
       node + "[transport]\nucx_tls = \"sm\"\nnet_device = \"lo\"\n",
       {"cluster.toml:4:14:", "transport.net_device = 'lo'", "uses none"}},
      {"shared-memory collectives across hosts",
       std::string(kTwoGpuNodes) + "[transport]\ncollectives = \"shm\"\n",
       {"transport.collectives = 'shm'", "one machine"}},
      {"shared-memory UCX across hosts",
       std::string(kTwoGpuNodes) + "[transport]\nucx_tls = \"sm\"\n",
       {"transport.ucx_tls = 'sm'", "one machine"}},
      {"NCCL on CPU nodes",
       node + "[transport]\ncollectives = \"nccl\"\n",
       {"cluster.toml:3:15:", "NCCL needs CUDA devices"}},
      {"two ranks of one TP group on one GPU",
       "[parallel]\ntensor_parallel_size = 2\n[[node]]\ndevices = [0]\n[[node]]\ndevices = "
       "[0]\n",
       {"cluster.toml:6:11:", "node[1].devices", "ranks 0 and 1 are in one tensor-parallel group",
        "device 0"}},
  };
  for (const Case& c : cases) {
    INFO(c.what << "\n" << c.toml);
    std::string message = cluster_error(c.toml);
    INFO(message);
    REQUIRE_FALSE(message.empty());
    for (const std::string& s : c.says) CHECK_THAT(message, Contains(s));
    if (!c.not_says.empty()) CHECK_THAT(message, !Contains(c.not_says));
  }
}

TEST_CASE(
    "what the checks allow: shared GPUs across stages, external nodes, IPv6, port 0 for "
    "command launches",
    "[cluster]") {
  // Two pipeline stages on one GPU (over UCX) are fine; NCCL only refuses one TP group.
  ClusterConfig pp = troupe::parse_cluster_config(
      "[parallel]\npipeline_parallel_size = 2\n[[node]]\ndevices = [0]\n[[node]]\ndevices = [0]\n",
      "cluster.toml");
  CHECK(pp.nodes.size() == 2);
  // Network namespaces started by a command template may take any free port.
  CHECK_NOTHROW(troupe::parse_cluster_config(R"(
[head]
address = "10.200.0.1"
[parallel]
tensor_parallel_size = 2
[[node]]
host = "10.200.0.2"
launcher = "command"
command = "ip netns exec ns1 {troupe} worker {worker_args}"
[[node]]
host = "10.200.0.3"
launcher = "command"
command = "ip netns exec ns2 {troupe} worker {worker_args}"
)",
                                             "cluster.toml"));
  // A node its operator starts may leave its host unknown; IPv6 and hostnames are hosts.
  ClusterConfig ext = troupe::parse_cluster_config(R"(
[head]
address = "::1"
port = 5000
[parallel]
tensor_parallel_size = 3
[[node]]
host = "::1"
[[node]]
host = ""
launcher = "external"
[[node]]
host = "localhost"
)",
                                                   "cluster.toml");
  CHECK(ext.nodes[1].launcher == "external");
  for (std::string host : {"a", "node-01", "gpu-01.cluster.example.com", "10.0.0.1", "::1",
                           "fe80::1ff:fe23:4567:890a", "x1.2.3.4"}) {
    INFO(host);
    CHECK_NOTHROW(troupe::parse_cluster_config("[[node]]\nhost = \"" + host + "\"\n", "c.toml"));
  }
  for (std::string host : {"-a", "a-", "a..b", "a_b", "1.2.3", "300.1.1.1", "a b", "host:22"}) {
    INFO(host);
    CHECK_THAT(cluster_error("[[node]]\nhost = \"" + host + "\"\n"), Contains("not a hostname"));
  }
}

TEST_CASE("validate() checks a config built in code, naming the key without a line", "[cluster]") {
  ClusterConfig c;
  c.tensor_parallel_size = 2;
  c.nodes.push_back({.name = "gpu", .devices = {0, 1}});  // workers left at 1
  CHECK_THAT(validate_error(c),
             Contains("cluster config: node[0].workers = 1: node 'gpu' lists 2 CUDA devices"));
  c.nodes[0].workers = 2;
  CHECK(validate_error(c).empty());
  c.head_port = 0;
  c.nodes[0].launcher = "srun";
  c.nodes[0].host = "gpu-01";
  CHECK_THAT(validate_error(c), Contains("cluster config: head.port = 0: 0 (any free port)"));
  c.head_port = 29501;
  CHECK_THAT(validate_error(c),
             Contains("cluster config: head.address = '127.0.0.1': a loopback address"));
  c.head_address = "head-01";
  CHECK(validate_error(c).empty());
  // place_ranks validates too, so a bad config never indexes past its nodes.
  c.nodes[0].first_rank = 7;
  CHECK_THROWS_WITH(troupe::place_ranks(c), Contains("node[0].first_rank = 7"));
}

TEST_CASE("load_cluster_config reads a file and names it in errors", "[cluster]") {
  TempDir dir("troupe_test_cluster_load");
  auto path = dir.path / "bad.toml";
  { std::ofstream(path) << "[[node]]\n\n[heartbeat]\ntimeout_ms = 10\n"; }
  CHECK_THROWS_WITH(troupe::load_cluster_config(path),
                    Contains(path.string() + ":4:14: heartbeat.timeout_ms = 10"));
  CHECK_THROWS_WITH(troupe::load_cluster_config(dir.path / "absent.toml"),
                    Contains("absent.toml: cannot open the cluster file"));
}

TEST_CASE("the shipped configs/cluster/*.toml load and validate", "[cluster]") {
  auto dir = std::filesystem::path(TROUPE_SOURCE_DIR) / "configs/cluster";
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".toml") continue;
    INFO(entry.path());
    ClusterConfig c = troupe::load_cluster_config(entry.path());
    CHECK(troupe::place_ranks(c).size() ==
          size_t(c.tensor_parallel_size * c.pipeline_parallel_size));
    ++loaded;
  }
  CHECK(loaded >= 3);

  // local.toml: a head and two CPU workers on 127.0.0.1, TP = 2, started by the head.
  ClusterConfig local = troupe::load_cluster_config(dir / "local.toml");
  CHECK(local.head_address == "127.0.0.1");
  CHECK(local.head_port == 0);
  CHECK(local.tensor_parallel_size == 2);
  CHECK(local.pipeline_parallel_size == 1);
  auto ranks = troupe::place_ranks(local);
  REQUIRE(ranks.size() == 2);
  for (const RankPlacement& r : ranks) {
    const ClusterNode& n = local.nodes[size_t(r.node_index)];
    CHECK(n.host == "127.0.0.1");
    CHECK(n.launcher == "local");
    CHECK(r.device == -1);
  }
  CHECK(troupe::format_topology(local) ==
        "rank  node   host       device  tp_rank  stage\n"
        "0     local  127.0.0.1  cpu     0        0\n"
        "1     local  127.0.0.1  cpu     1        0\n");
}

TEST_CASE("place_ranks lays ranks out TP-innermost, in file order or from first_rank",
          "[cluster]") {
  ClusterConfig c = troupe::parse_cluster_config(kTwoGpuNodes, "cluster.toml");
  std::vector<RankPlacement> expected = {
      {.rank = 0, .node_index = 0, .local_index = 0, .device = 0, .tp_rank = 0, .pp_rank = 0},
      {.rank = 1, .node_index = 0, .local_index = 1, .device = 1, .tp_rank = 1, .pp_rank = 0},
      {.rank = 2, .node_index = 1, .local_index = 0, .device = 2, .tp_rank = 0, .pp_rank = 1},
      {.rank = 3, .node_index = 1, .local_index = 1, .device = 3, .tp_rank = 1, .pp_rank = 1},
  };
  CHECK(troupe::place_ranks(c) == expected);

  // first_rank puts node b's workers first; a spare gets no rank.
  c.nodes[1].first_rank = 0;
  c.nodes[0].first_rank = 2;
  c.nodes.push_back(
      {.name = "s", .host = "10.0.0.9", .devices = {0}, .launcher = "ssh", .spare = true});
  auto placed = troupe::place_ranks(c);
  REQUIRE(placed.size() == 4);
  CHECK(placed[0] ==
        RankPlacement{
            .rank = 0, .node_index = 1, .local_index = 0, .device = 2, .tp_rank = 0, .pp_rank = 0});
  CHECK(placed[3] ==
        RankPlacement{
            .rank = 3, .node_index = 0, .local_index = 1, .device = 1, .tp_rank = 1, .pp_rank = 1});
  CHECK_THAT(troupe::format_topology(c), Contains("spare  s     10.0.0.9  cuda:0"));

  // A node without first_rank continues after the node before it.
  ClusterConfig d = troupe::parse_cluster_config(
      "[parallel]\ntensor_parallel_size = 4\n[[node]]\nname = \"x\"\nfirst_rank = 2\nworkers = "
      "2\n[[node]]\nname = \"y\"\nfirst_rank = 0\n[[node]]\nname = \"z\"\n",
      "cluster.toml");
  auto p = troupe::place_ranks(d);
  CHECK(p[0].node_index == 1);
  CHECK(p[1].node_index == 2);  // z follows y
  CHECK(p[2].node_index == 0);
  CHECK(p[3].node_index == 0);
}

TEST_CASE("shell_quote leaves plain words and single-quotes the rest", "[cluster]") {
  CHECK(troupe::shell_quote("--model=/m/q-0.5b,x@y%1+2:3") == "--model=/m/q-0.5b,x@y%1+2:3");
  CHECK(troupe::shell_quote("") == "''");
  CHECK(troupe::shell_quote("a b") == "'a b'");
  CHECK(troupe::shell_quote("it's") == "'it'\\''s'");
  CHECK(troupe::shell_quote("$HOME;rm") == "'$HOME;rm'");
}

TEST_CASE("worker_launch_command fills each launcher's template", "[cluster]") {
  ClusterConfig c = troupe::parse_cluster_config(std::string(kTwoGpuNodes) + R"(
[[node]]
name = "ns"
host = "10.0.0.4"
devices = [5]
launcher = "command"
command = "CUDA_VISIBLE_DEVICES={device} ip netns exec {node} {troupe} worker --head {head} --rank {rank} {{literal}} {worker_args}"
spare = true

[[node]]
name = "s2"
host = "gpu-02"
devices = [0]
launcher = "srun"
spare = true
)",
                                                 "cluster.toml");
  const std::vector<std::string> args = {"--head", "10.0.0.1:29501", "--rank",
                                         "3",      "--note",         "two words"};
  auto ranks = troupe::place_ranks(c);
  // ssh: the worker's whole line is one word, quoted again for the remote shell.
  CHECK(troupe::worker_launch_command(c, ranks[3], "/opt/troupe/bin/troupe", args) ==
        "ssh -o BatchMode=yes 10.0.0.3 '/opt/troupe/bin/troupe worker --head 10.0.0.1:29501 "
        "--rank 3 --note '\\''two words'\\'''");
  // srun: the words go straight on srun's command line.
  RankPlacement spare{
      .rank = 1, .node_index = 3, .local_index = 0, .device = 0, .tp_rank = 1, .pp_rank = 0};
  CHECK(troupe::worker_launch_command(c, spare, "troupe", {"--x", "a b"}) ==
        "srun --nodes=1 --ntasks=1 --nodelist=gpu-02 troupe worker --x 'a b'");
  // command: every placeholder, and {{ }} for literal braces.
  RankPlacement ns{
      .rank = 2, .node_index = 2, .local_index = 0, .device = 5, .tp_rank = 0, .pp_rank = 1};
  CHECK(troupe::worker_launch_command(c, ns, "/a b/troupe", {}) ==
        "CUDA_VISIBLE_DEVICES=5 ip netns exec ns '/a b/troupe' worker --head 10.0.0.1:29501 "
        "--rank 2 {literal} ");
  // {head} needs a port: 0 is only known once the head has bound one.
  c.head_port = 0;
  CHECK_THROWS_WITH(troupe::worker_launch_command(c, ns, "troupe", {}),
                    Contains("node[2].command uses {head} but head.port is 0"));
  // local: the plain worker command.
  ClusterConfig local = troupe::parse_cluster_config("[[node]]\n", "cluster.toml");
  CHECK(troupe::worker_launch_command(local, troupe::place_ranks(local)[0], "troupe",
                                      {"--port", "0"}) == "troupe worker --port 0");
}

TEST_CASE("launch command lines keep every argument intact through a real shell", "[cluster]") {
  // A stand-in for the troupe binary, in a directory whose name has a space and a quote, that
  // prints each argument it gets on its own line.
  TempDir dir("troupe_test_cluster_sh");
  auto bin_dir = dir.path / "bin dir'x";
  std::filesystem::create_directories(bin_dir);
  auto bin = bin_dir / "troupe";
  { std::ofstream(bin) << "#!/bin/sh\nfor a in \"$@\"; do printf '[%s]\\n' \"$a\"; done\n"; }
  std::filesystem::permissions(bin, std::filesystem::perms::owner_all);
  const std::vector<std::string> args = {"--prompt", "it's \"a\" $HOME `x` \\ b", "", "a*"};
  const std::string expected = "[worker]\n[--prompt]\n[it's \"a\" $HOME `x` \\ b]\n[]\n[a*]\n";

  // local and srun-style templates: the words reach the program as they are.
  ClusterConfig local = troupe::parse_cluster_config("[[node]]\n", "cluster.toml");
  auto rank0 = troupe::place_ranks(local)[0];
  CHECK(run_sh(troupe::worker_launch_command(local, rank0, bin.string(), args)) == expected);

  // ssh's remote side runs its argument string through a shell again: `sh -c {command}` does
  // the same here, so {command} must survive two rounds of parsing.
  ClusterConfig twice = troupe::parse_cluster_config(
      "[[node]]\nlauncher = \"command\"\ncommand = \"sh -c {command}\"\n", "cluster.toml");
  CHECK(run_sh(troupe::worker_launch_command(twice, rank0, bin.string(), args)) == expected);

  ClusterConfig words = troupe::parse_cluster_config(
      "[[node]]\nlauncher = \"command\"\ncommand = \"env FOO=1 {troupe} worker {worker_args}\"\n",
      "cluster.toml");
  CHECK(run_sh(troupe::worker_launch_command(words, rank0, bin.string(), args)) == expected);
}

TEST_CASE("vLLM's multi-node flags build the same cluster as a cluster file", "[cluster]") {
  // Node 0 of `--nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29600 -tp 2` with
  // one GPU per node ...
  ClusterConfig head = troupe::cluster_from_multi_node_flags({.nnodes = 2,
                                                              .node_rank = 0,
                                                              .master_addr = "10.0.0.1",
                                                              .master_port = 29600,
                                                              .tensor_parallel_size = 2,
                                                              .local_device_count = 1});
  // ... is this two-node cluster file.
  ClusterConfig file = troupe::parse_cluster_config(R"(
[head]
address = "10.0.0.1"
port = 29600
[parallel]
tensor_parallel_size = 2
[[node]]
host = "10.0.0.1"
devices = [0]
[[node]]
host = ""
devices = [0]
launcher = "external"
)",
                                                    "cluster.toml");
  CHECK(head == file);

  // Node 1 (--headless) starts its own workers; node 0 is someone else's.
  ClusterConfig worker = troupe::cluster_from_multi_node_flags({.nnodes = 2,
                                                                .node_rank = 1,
                                                                .master_addr = "10.0.0.1",
                                                                .headless = true,
                                                                .tensor_parallel_size = 2,
                                                                .pipeline_parallel_size = 2,
                                                                .local_device_count = 8});
  CHECK(worker.head_port == 29501);  // vLLM's default master port
  REQUIRE(worker.nodes.size() == 2);
  CHECK(worker.nodes[0].launcher == "external");
  CHECK(worker.nodes[0].host == "10.0.0.1");
  CHECK(worker.nodes[1].launcher == "local");
  CHECK(worker.nodes[1].devices == std::vector<int32_t>{0, 1});
  auto ranks = troupe::place_ranks(worker);
  CHECK(ranks[2].node_index == 1);
  CHECK(ranks[2].pp_rank == 1);

  // One node, CPU: the local cluster troupe starts itself, on any free port.
  ClusterConfig one = troupe::cluster_from_multi_node_flags({.tensor_parallel_size = 2});
  CHECK(one.head_port == 0);
  CHECK(one == troupe::parse_cluster_config(
                   "[parallel]\ntensor_parallel_size = 2\n[[node]]\nworkers = 2\n", "c.toml"));

  using F = troupe::MultiNodeFlags;
  auto error = [](const F& f) {
    return error_of([&] { (void)troupe::cluster_from_multi_node_flags(f); });
  };
  CHECK_THAT(error({.nnodes = 0}), Contains("--nnodes 0: allowed: 1..65536"));
  CHECK_THAT(error({.nnodes = 2, .node_rank = 2, .tensor_parallel_size = 2}),
             Contains("--node-rank 2: allowed: 0..1"));
  CHECK_THAT(error({.nnodes = 2, .tensor_parallel_size = 3}),
             Contains("--nnodes 2: does not divide the 3 ranks"));
  CHECK_THAT(error({.nnodes = 2, .headless = true, .tensor_parallel_size = 2}),
             Contains("--headless with --node-rank 0"));
  CHECK_THAT(error({.nnodes = 2, .node_rank = 1, .tensor_parallel_size = 2}),
             Contains("--node-rank 1 without --headless"));
  CHECK_THAT(error({.nnodes = 2, .master_port = 0, .tensor_parallel_size = 2}),
             Contains("--master-port 0: allowed: 1..65535"));
  CHECK_THAT(error({.nnodes = 2, .master_addr = "a b", .tensor_parallel_size = 2}),
             Contains("--master-addr 'a b': not a hostname"));
  CHECK_THAT(error({.nnodes = 2, .tensor_parallel_size = 8, .local_device_count = 2}),
             Contains("puts 4 of the 8 ranks on each node, but this node has 2 CUDA device(s)"));
  CHECK_THAT(error({.tensor_parallel_size = 0}), Contains("--tensor-parallel-size 0"));
  // A remote master with the other nodes unknown is fine; a loopback master with a known
  // remote node 0 is not possible from flags, since node 0's host is the master.
  CHECK_NOTHROW(troupe::cluster_from_multi_node_flags(
      {.nnodes = 4, .master_addr = "head-01", .tensor_parallel_size = 4}));
}
