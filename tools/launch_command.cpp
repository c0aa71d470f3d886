// troupe launch CLUSTER.toml -- generate|bench|serve ...: runs the command as the head of the
// cluster the file describes (EngineArgs.cluster): the engine starts the file's workers, waits for
// each to join, prints the topology and runs its ranks on them.
#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.hpp"
#include "tools/commands.hpp"

namespace troupe::cli {

std::vector<std::string> rewrite_launch(const std::vector<std::string>& args) {
  // Options of the troupe level (--log-level X, --log-level=X) may come before `launch`.
  size_t at = 0;
  while (at < args.size() && args[at].starts_with("--log-level"))
    at += args[at].find('=') == std::string::npos ? 2 : 1;
  if (at >= args.size() || args[at] != "launch") return args;
  const std::string usage = "usage: troupe launch CLUSTER.toml -- generate|bench|serve [ARGS...]";
  if (at + 1 >= args.size() || args[at + 1] == "--" || args[at + 1].starts_with("-")) {
    if (at + 1 < args.size() && (args[at + 1] == "--help" || args[at + 1] == "-h"))
      fail(
          "{}\n  Starts the workers the cluster file names (configs/cluster/local.toml: a head and "
          "two workers on this machine), waits for each to join, prints the topology and runs "
          "the command's engine on them. docs/engine.md, \"The cluster file\", lists its keys.",
          usage);
    fail("launch: the cluster file is missing; {}", usage);
  }
  const std::string file = args[at + 1];
  if (at + 2 >= args.size() || args[at + 2] != "--")
    fail("launch {}: expected `--` and the command to run after the cluster file; {}", file, usage);
  if (at + 3 >= args.size()) fail("launch {}: no command after `--`; {}", file, usage);
  const std::string& command = args[at + 3];
  if (command != "generate" && command != "bench" && command != "serve")
    fail("launch {}: command '{}' cannot run on a cluster; allowed: generate, bench, serve", file,
         command);
  std::vector<std::string> out(args.begin(), args.begin() + ptrdiff_t(at));
  out.insert(out.end(), args.begin() + ptrdiff_t(at + 3), args.end());
  out.push_back("--cluster");
  out.push_back(file);
  return out;
}

}  // namespace troupe::cli
