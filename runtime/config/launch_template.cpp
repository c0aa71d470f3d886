// Launch templates: parsing them for the checks, and filling them into a worker's command line.
#include "runtime/config/launch_template.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "runtime/config/field_codec.hpp"
#include "runtime/error.hpp"

namespace troupe {

namespace config_detail {

std::string node_path(size_t i, std::string_view key) {
  return fmt::format("node[{}].{}", i, key);
}

std::string split_template(std::string_view t, std::vector<Piece>& out) {
  out.clear();
  std::string literal;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '}') {
      if (i + 1 < t.size() && t[i + 1] == '}') {
        literal += '}', ++i;
        continue;
      }
      return fmt::format("'}}' at offset {} closes nothing (write '}}}}' for a literal brace)", i);
    }
    if (t[i] != '{') {
      literal += t[i];
      continue;
    }
    if (i + 1 < t.size() && t[i + 1] == '{') {
      literal += '{', ++i;
      continue;
    }
    size_t close = t.find('}', i);
    if (close == std::string_view::npos) {
      return fmt::format("'{{' at offset {} is not closed (write '{{{{' for a literal brace)", i);
    }
    std::string_view name = t.substr(i + 1, close - i - 1);
    if (std::find(kPlaceholders.begin(), kPlaceholders.end(), name) == kPlaceholders.end()) {
      std::string_view near = closest_name(kPlaceholders, name);
      return fmt::format(
          "unknown placeholder {{{}}}{}; placeholders: {{troupe}} {{host}} "
          "{{head}} {{rank}} {{node}} {{device}} {{worker_args}} {{command}}",
          name, near.empty() ? "" : fmt::format(" (did you mean {{{}}}?)", near));
    }
    if (!literal.empty()) out.push_back({false, std::move(literal)}), literal.clear();
    out.push_back({true, std::string(name)});
    i = close;
  }
  if (!literal.empty()) out.push_back({false, std::move(literal)});
  bool starts_worker = false, troupe = false, args = false;
  for (const Piece& p : out) {
    if (!p.placeholder) continue;
    starts_worker |= p.text == "command";
    troupe |= p.text == "troupe";
    args |= p.text == "worker_args";
  }
  if (!starts_worker && !(troupe && args)) {
    return "starts no worker: a template needs {command}, or {troupe} and {worker_args} "
           "(e.g. \"ip netns exec ns1 {troupe} worker {worker_args}\")";
  }
  return "";
}

bool uses(const std::vector<Piece>& pieces, std::string_view name) {
  return std::any_of(pieces.begin(), pieces.end(),
                     [&](const Piece& p) { return p.placeholder && p.text == name; });
}

std::pair<std::string_view, std::string> template_of(const ClusterConfig& c, size_t i) {
  const ClusterNode& n = c.nodes[i];
  if (!n.command.empty()) return {n.command, node_path(i, "command")};
  if (n.launcher == "ssh") return {c.ssh_command, "launcher.ssh_command"};
  if (n.launcher == "srun") return {c.srun_command, "launcher.srun_command"};
  return {"", ""};
}

}  // namespace config_detail

namespace {

using config_detail::Piece;
using config_detail::split_template;
using config_detail::template_of;

std::string head_endpoint(const ClusterConfig& c) {
  if (c.head_address.find(':') != std::string::npos) {
    return fmt::format("[{}]:{}", c.head_address, c.head_port);
  }
  return fmt::format("{}:{}", c.head_address, c.head_port);
}

}  // namespace

std::string shell_quote(std::string_view s) {
  constexpr std::string_view safe = "_@%+=:,./-";
  bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [&](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || safe.find(ch) != std::string_view::npos;
  });
  if (plain) return std::string(s);
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  out += '\'';
  return out;
}

std::string worker_launch_command(const ClusterConfig& config, const RankPlacement& placement,
                                  const std::string& troupe_binary,
                                  const std::vector<std::string>& worker_args) {
  if (placement.node_index < 0 || size_t(placement.node_index) >= config.nodes.size()) {
    fail("worker_launch_command: node_index {} is not a node of the cluster (0..{})",
         placement.node_index, config.nodes.size() - 1);
  }
  const size_t i = size_t(placement.node_index);
  const ClusterNode& n = config.nodes[i];
  std::string args;
  for (const std::string& a : worker_args) {
    if (!args.empty()) args += ' ';
    args += shell_quote(a);
  }
  std::string command = shell_quote(troupe_binary);
  command += " worker";
  if (!args.empty()) command.append(" ").append(args);
  auto [text, path] = template_of(config, i);
  if (path.empty()) return command;

  std::vector<Piece> pieces;
  if (std::string p = split_template(text, pieces); !p.empty()) {
    fail("{} = \"{}\": {}", path, text, p);
  }
  std::string out;
  for (const Piece& p : pieces) {
    if (!p.placeholder) {
      out += p.text;
    } else if (p.text == "troupe") {
      out += shell_quote(troupe_binary);
    } else if (p.text == "host") {
      out += shell_quote(n.host);
    } else if (p.text == "head") {
      if (config.head_port == 0) {
        fail(
            "{} uses {{head}} but head.port is 0: put the port the head bound in the config "
            "before building launch commands",
            path);
      }
      out += shell_quote(head_endpoint(config));
    } else if (p.text == "rank") {
      out += std::to_string(placement.rank);
    } else if (p.text == "node") {
      out += shell_quote(n.name);
    } else if (p.text == "device") {
      if (placement.device < 0) {
        fail("{} uses {{device}} but rank {} runs on the CPU", path, placement.rank);
      }
      out += std::to_string(placement.device);
    } else if (p.text == "worker_args") {
      out += args;
    } else {  // command
      out += shell_quote(command);
    }
  }
  return out;
}

}  // namespace troupe
