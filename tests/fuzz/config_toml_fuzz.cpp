// Fuzz target for the two TOML files troupe reads: the text is parsed as an engine config
// (runtime/config/engine_config_file.cpp, parse_engine_toml: EngineArgs and [sampling]) and as a
// cluster file (runtime/config/cluster_config.cpp, parse_cluster_config). Each gives a
// validated config or a troupe::Error. One text feeds both, so the corpus holds plain .toml
// files of either kind; each parser rejects the other's keys after toml++ has parsed the text.
//
// What `troupe launch` does with an accepted cluster file must work too: place_ranks gives one
// placement per rank (TP x PP), each on a non-spare node with the device that node lists for
// it; format_topology prints them; and each rank's launch command is built or refused with a
// troupe::Error (a template that needs a port the file leaves to the head); its [faults]
// inject specs parse.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/cluster_config.hpp"
#include "runtime/config/engine_args.hpp"
#include "runtime/faults/fault_spec.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using troupe::fuzz::accepted;
using troupe::fuzz::broken;

namespace {

void check_cluster(const troupe::ClusterConfig& c) {
  const std::vector<troupe::RankPlacement> ranks = troupe::place_ranks(c);
  if (int64_t(ranks.size()) != int64_t(c.tensor_parallel_size) * c.pipeline_parallel_size)
    broken("place_ranks: {} ranks for {} x {}", ranks.size(), c.tensor_parallel_size,
           c.pipeline_parallel_size);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const troupe::RankPlacement& p = ranks[r];
    if (p.rank != int32_t(r) || p.node_index < 0 || size_t(p.node_index) >= c.nodes.size())
      broken("place_ranks: rank {} placed as rank {} on node {}", r, p.rank, p.node_index);
    const troupe::ClusterNode& n = c.nodes[size_t(p.node_index)];
    if (n.spare || p.local_index < 0 || p.local_index >= n.workers)
      broken("place_ranks: rank {} is worker {} of node '{}'", r, p.local_index, n.name);
    const int32_t device = n.devices.empty() ? -1 : n.devices[size_t(p.local_index)];
    if (p.device != device)
      broken("place_ranks: rank {} on device {}, not {}", r, p.device, device);
    (void)accepted([&] {
      (void)troupe::worker_launch_command(c, p, "/usr/bin/troupe", {"--model", "m"});
    });
  }
  (void)troupe::format_topology(c);
  (void)troupe::parse_fault_specs(c.fault_inject);  // validated with the file: may not throw
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = troupe::fuzz::as_text(data, size);
  (void)accepted([&] { (void)troupe::parse_engine_toml(text, "fuzz/engine.toml"); });
  troupe::ClusterConfig cluster;
  if (accepted([&] { cluster = troupe::parse_cluster_config(text, "fuzz/cluster.toml"); }))
    check_cluster(cluster);
  return 0;
}
