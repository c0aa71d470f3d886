// The subcommands of the `troupe` executable. Each registers its options on a CLI11 app and
// returns a function that runs it after parsing (exit status; errors are one line on stderr).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace troupe::cli {

using Runner = std::function<int()>;

Runner add_generate_command(CLI::App& app);
Runner add_tokenize_command(CLI::App& app);
Runner add_worker_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);

/// "troupe 0.1.0 (git 8a50b50)": CMake's project version and the commit the binary was built
/// from ("-dirty" with uncommitted changes), when git was available at build time.
std::string version_text();

}  // namespace troupe::cli
