// The subcommands of the `troupe` executable. Each registers its options on a CLI11 app and
// returns a function that runs it after parsing (exit status; errors are one line on stderr).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace troupe::cli {

using Runner = std::function<int()>;

Runner add_generate_command(CLI::App& app);
Runner add_tokenize_command(CLI::App& app);
Runner add_worker_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);
/// `troupe bench serving` (tools/bench_serving.cpp), registered by add_bench_command.
Runner add_bench_serving(CLI::App& app);

}  // namespace troupe::cli
