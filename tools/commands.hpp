// The subcommands of the `troupe` executable. Each registers its options on a CLI11 app and
// returns a function that runs it after parsing (exit status; errors are one line on stderr).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace troupe::cli {

using Runner = std::function<int()>;

Runner add_generate_command(CLI::App& app);
Runner add_tokenize_command(CLI::App& app);
Runner add_worker_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);
/// `troupe bench serving` (tools/bench_serving.cpp), registered by add_bench_command.
Runner add_bench_serving(CLI::App& app);

/// The p-th percentile (0..100) of `v` as numpy computes it by default (linear interpolation
/// between the two nearest ranks), as vLLM's benchmarks report them; 0 for an empty `v`.
double percentile(std::vector<double> v, double p);

/// `troupe launch CLUSTER.toml -- COMMAND ARGS...` is COMMAND (generate, bench, serve) with
/// `--cluster CLUSTER.toml`: the command line rewritten so, or `args` unchanged when it is not a
/// launch. Throws troupe::Error naming what is wrong with a launch line.
std::vector<std::string> rewrite_launch(const std::vector<std::string>& args);

/// "troupe 0.1.0 (git 8a50b50)": CMake's project version and the commit the binary was built
/// from ("-dirty" with uncommitted changes), when git was available at build time.
std::string version_text();

}  // namespace troupe::cli
