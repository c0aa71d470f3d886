// Internal to runtime/config: the launch templates of the cluster file ({placeholders} filled
// as POSIX sh words). The cluster checks read them; worker_launch_command fills them.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/config/cluster_config.hpp"

namespace troupe::config_detail {

inline constexpr std::array<std::string_view, 8> kPlaceholders = {
    "troupe", "host", "head", "rank", "node", "device", "worker_args", "command"};

struct Piece {
  bool placeholder = false;
  std::string text;  // literal text, or the placeholder's name
};

/// Splits a template into literal text and placeholders; returns a problem in words when it is
/// not a well-formed template (a stray brace, an unknown placeholder, no worker started), else
/// "".
[[nodiscard]] std::string split_template(std::string_view t, std::vector<Piece>& out);

/// Whether the template uses the placeholder `name`.
[[nodiscard]] bool uses(const std::vector<Piece>& pieces, std::string_view name);

/// The template node `i` is launched with ("" for local and external nodes) and its key
/// ("node[1].command", "launcher.ssh_command").
[[nodiscard]] std::pair<std::string_view, std::string> template_of(const ClusterConfig& c,
                                                                   size_t i);

/// "node[<i>].<key>".
[[nodiscard]] std::string node_path(size_t i, std::string_view key);

}  // namespace troupe::config_detail
