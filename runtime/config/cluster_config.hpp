// The cluster file (`troupe launch CLUSTER.toml -- generate ...`): where the head listens,
// which nodes run how many workers on which devices, how each worker is started there, the
// parallel sizes, the transports and the heartbeat. Plain data, its TOML parsing and its
// validation; the launcher and worker actors consume it (docs/engine.md, "The cluster file",
// lists every key with its default).
//
// A worker is one process and one rank. Ranks are numbered across the non-spare nodes in file
// order (or from a node's first_rank) and laid out as vLLM lays them out, tensor-parallel
// innermost: tp_rank = rank % tp, pp_rank = rank / tp.
//
// Every error is a troupe::Error naming the file, the line and column, the key, the value and
// what is allowed; a configuration built in code (or from vLLM's multi-node flags) is checked
// by the same validate(), with positions omitted.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

/// One [[node]] table: a machine (or a network namespace, or a Slurm node) and its workers.
struct ClusterNode {
  std::string name;                   // unique; "node<i>" (i: its index in the file) when not given
  std::string host = "127.0.0.1";     // where its workers run and dial from; "" = not known in
                                      // advance (a node whose workers join from wherever they run)
  std::vector<int32_t> devices;       // CUDA device indices, one per worker; empty = a CPU node
  int32_t workers = 1;                // worker processes (= ranks); default devices.size(), or 1
  std::string launcher = "local";     // local | ssh | srun | command | external
  std::string command;                // the launch template for "command", or this node's own
                                      // template instead of [launcher]'s for "ssh" / "srun"
  std::optional<int32_t> first_rank;  // rank of its first worker; unset = next in file order
  bool spare = false;  // started only to replace a lost worker (issue 22); has no rank of its own

  bool operator==(const ClusterNode&) const = default;
};

struct ClusterConfig {
  // [head]
  std::string head_address = "127.0.0.1";  // the address workers dial
  uint16_t head_port = 0;                  // 0: any free port (head-started launchers only)
  int32_t join_timeout_ms = 30000;         // how long the head waits for every worker to join
  // [[node]]
  std::vector<ClusterNode> nodes;
  // [parallel]
  int32_t tensor_parallel_size = 1;
  int32_t pipeline_parallel_size = 1;
  // [transport]
  std::string ucx_tls = "auto";      // auto | tcp | sm: UCX_TLS for stage links and KV moves
  std::string collectives = "auto";  // auto | shm | ucx | nccl: the tensor-parallel all-reduce
  std::string net_device;            // UCX_NET_DEVICES ("" = UCX's choice), e.g. "lo", "eth0"
  // [heartbeat]
  int32_t heartbeat_interval_ms = 500;
  int32_t heartbeat_timeout_ms = 5000;  // a worker silent this long is lost
  // [launcher]: templates for nodes with launcher = "ssh" / "srun" (see worker_launch_command)
  std::string ssh_command = "ssh -o BatchMode=yes {host} {command}";
  std::string srun_command =
      "srun --nodes=1 --ntasks=1 --nodelist={host} {troupe} worker {worker_args}";
  // [faults]: faults to inject (runtime/faults/fault_spec.hpp; added to the engine's --fault
  // specs) and how many times in a row lost workers are replaced (unset: the engine's
  // max_executor_restarts).
  std::vector<std::string> fault_inject;
  std::optional<int32_t> max_executor_restarts;

  bool operator==(const ClusterConfig&) const = default;
};

/// Most ranks (TP x PP) and most workers on one node a cluster may have: a bound, so a typo
/// cannot make place_ranks allocate billions of entries.
inline constexpr int32_t kMaxClusterRanks = 65536;

/// Reads, parses and validates a cluster file. Errors start with "<file>:<line>:<column>: ".
ClusterConfig load_cluster_config(const std::filesystem::path& file);
/// The same for TOML text; `origin` names it in errors (a file name, "cluster.toml").
ClusterConfig parse_cluster_config(std::string_view toml_text, std::string_view origin);
/// The checks parse_cluster_config makes after reading the keys, for a ClusterConfig built or
/// changed in code (`origin` starts each error). parse_ and load_ have run it already.
void validate(const ClusterConfig& config, std::string_view origin = "cluster config");

/// Where one rank runs.
struct RankPlacement {
  int32_t rank = 0;
  int32_t node_index = 0;   // into ClusterConfig::nodes
  int32_t local_index = 0;  // the worker's index on its node (0 .. workers - 1)
  int32_t device = -1;      // CUDA device index, -1 on a CPU node
  int32_t tp_rank = 0;      // rank % tensor_parallel_size
  int32_t pp_rank = 0;      // rank / tensor_parallel_size: the pipeline stage

  bool operator==(const RankPlacement&) const = default;
};

/// Every rank of a validated config, indexed by rank (size TP x PP). Spare nodes have no
/// rank: a spare that replaces rank r gets a RankPlacement built by its caller (r's tp/pp
/// ranks, the spare's node_index, local_index and device).
std::vector<RankPlacement> place_ranks(const ClusterConfig& config);

/// The topology as the head prints it before the first step: one line per rank (rank, node,
/// host, device, tp rank, pipeline stage), spare nodes after.
std::string format_topology(const ClusterConfig& config);

/// `s` as one word of a POSIX sh command line: unchanged when it holds only
/// [A-Za-z0-9_@%+=:,./-] (and is not empty), else single-quoted with ' written as '\''.
std::string shell_quote(std::string_view s);

/// The POSIX sh command line (run it with /bin/sh -c) that starts the worker of `placement`.
/// - local and external: `{troupe} worker {worker_args}` (external nodes are started by their
///   operator; the line says what to run there).
/// - ssh / srun: the node's `command`, else [launcher]'s ssh_command / srun_command.
/// - command: the node's `command`.
/// Placeholders, each filled as sh words: {troupe} (`troupe_binary`), {host}, {head}
/// (address:port, [v6]:port), {rank}, {node} (name), {device} (CUDA nodes only),
/// {worker_args} (each argument quoted on its own, joined by spaces) and {command} (the whole
/// `{troupe} worker {worker_args}` line quoted once more as ONE word, for programs that pass a
/// string to a shell: ssh, `sh -c`). `{{` and `}}` are literal braces. Throws when the
/// template uses {head} while head_port is 0 (put the port the head bound in the config
/// first) or {device} for a CPU rank.
std::string worker_launch_command(const ClusterConfig& config, const RankPlacement& placement,
                                  const std::string& troupe_binary,
                                  const std::vector<std::string>& worker_args);

/// vLLM's multi-node flags: every node runs `troupe generate|serve ... --nnodes N --node-rank k
/// --master-addr A [--master-port P]`, nodes 1..N-1 with --headless too.
struct MultiNodeFlags {
  int32_t nnodes = 1;                     // --nnodes
  int32_t node_rank = 0;                  // --node-rank: 0 runs the head
  std::string master_addr = "127.0.0.1";  // --master-addr: node 0's address, the head's
  std::optional<int32_t> master_port;     // --master-port; unset: 29501 (vLLM's) with several
                                          // nodes, any free port with one
  bool headless = false;                  // --headless: run this node's workers only
  int32_t tensor_parallel_size = 1;       // -tp
  int32_t pipeline_parallel_size = 1;     // -pp
  int32_t local_device_count = 0;         // CUDA devices this node has (0: CPU workers)
};

/// The cluster those flags describe, as a cluster file would: TP x PP ranks spread evenly over
/// nnodes nodes named node0.. in node-rank order, each node's workers on devices 0..k-1 (or
/// the CPU); node 0's host is master_addr. The node given by node_rank is started by this
/// process (launcher "local"), every other node by its own operator ("external", host ""
/// unless it is node 0). Errors name the flag. The result is validated.
ClusterConfig cluster_from_multi_node_flags(const MultiNodeFlags& flags);

}  // namespace troupe
