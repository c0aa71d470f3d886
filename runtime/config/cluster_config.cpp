// The cluster file: reading its keys (types, unknown keys) in file order, then the checks that
// need the whole configuration (ranks, ports, hosts, devices, templates), then what the
// launcher asks of a valid one (placement, the topology, vLLM's multi-node flags). The launch
// templates are parsed and filled in launch_template.cpp.
#include "runtime/config/cluster_config.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "runtime/config/field_codec.hpp"
#include "runtime/config/launch_template.hpp"
#include "runtime/config/toml_source.hpp"
#include "runtime/error.hpp"
#include "runtime/faults/fault_spec.hpp"

namespace troupe {

namespace {

using config_detail::in_file_order;
using config_detail::node_path;
using config_detail::Piece;
using config_detail::split_template;
using config_detail::template_of;
using config_detail::uses;

// ---- showing values and places ----

/// A value as TOML writes it, cut to ~80 characters.
std::string show(const toml::node& n) {
  std::ostringstream s;
  if (const auto* t = n.as_table()) {
    s << "{ " << *t << " }";
  } else if (const auto* a = n.as_array()) {
    s << *a;
  } else {
    n.visit([&](const auto& v) { s << v; });
  }
  std::string out = s.str();
  for (size_t at; (at = out.find('\n')) != std::string::npos;) out.replace(at, 1, ", ");
  if (out.size() > 80) out = out.substr(0, 77) + "...";
  return out;
}
std::string show(std::string_view s) {
  return show(toml::value<std::string>(std::string(s)));
}
std::string show(const std::vector<int32_t>& v) {
  toml::array a;
  for (int32_t x : v) a.push_back(int64_t{x});
  return show(a);
}

/// Where a key of the configuration is in its file, for errors: the key's own line, else the
/// nearest table around it that the file has, else just the origin (a config built in code).
class Where {
 public:
  Where(std::string_view origin, const toml::table* doc) : origin_(origin), doc_(doc) {}

  std::string operator()(std::string_view path) const {
    for (std::string_view p = path; doc_ && !p.empty(); p = parent(p)) {
      if (const toml::node* n = doc_->at_path(p).node()) {
        return config_detail::where(origin_, n->source());
      }
    }
    return std::string(origin_);
  }
  /// Whether the file spells out `path` (false for a config built in code).
  [[nodiscard]] bool given(std::string_view path) const {
    return doc_ && doc_->at_path(path).node() != nullptr;
  }
  /// Whether `path` holds its default because the file leaves it out.
  [[nodiscard]] bool defaulted(std::string_view path) const { return doc_ && !given(path); }
  [[nodiscard]] std::string_view origin() const { return origin_; }

 private:
  static std::string_view parent(std::string_view p) {
    size_t cut = p.find_last_of(".[");
    return cut == std::string_view::npos ? std::string_view() : p.substr(0, cut);
  }

  std::string_view origin_;
  const toml::table* doc_;
};

/// throw Error("<file>:<line>:<col>: <path> = <value>: <problem>").
[[noreturn]] void bad(const Where& w, std::string_view path, std::string_view value,
                      std::string_view problem) {
  fail("{}: {} = {}{}: {}", w(path), path, value, w.defaulted(path) ? " (the default)" : "",
       problem);
}

// ---- reading keys and their types ----

[[noreturn]] void wrong_type(std::string_view origin, const toml::node& n, std::string_view path,
                             std::string_view expected) {
  std::ostringstream type;
  type << n.type();
  fail("{}: {} = {}: expected {}, got a TOML {}", config_detail::where(origin, n.source()), path,
       show(n), expected, type.str());
}

std::string read_string(std::string_view origin, const toml::node& n, std::string_view path) {
  if (const auto* s = n.as_string()) return s->get();
  wrong_type(origin, n, path, "a string");
}

bool read_bool(std::string_view origin, const toml::node& n, std::string_view path) {
  if (const auto* b = n.as_boolean()) return b->get();
  wrong_type(origin, n, path, "true or false");
}

int64_t read_integer(std::string_view origin, const toml::node& n, std::string_view path,
                     int64_t lo, int64_t hi, std::string_view allowed) {
  const auto* i = n.as_integer();
  if (!i) wrong_type(origin, n, path, "an integer");
  if (i->get() < lo || i->get() > hi) {
    fail("{}: {} = {}: allowed: {}", config_detail::where(origin, n.source()), path, i->get(),
         allowed);
  }
  return i->get();
}

int32_t read_int32(std::string_view origin, const toml::node& n, std::string_view path) {
  constexpr int64_t lo = std::numeric_limits<int32_t>::min();
  constexpr int64_t hi = std::numeric_limits<int32_t>::max();
  return int32_t(read_integer(origin, n, path, lo, hi, "a 32-bit integer"));
}

std::vector<int32_t> read_int32_list(std::string_view origin, const toml::node& n,
                                     std::string_view path) {
  const auto* a = n.as_array();
  if (!a) wrong_type(origin, n, path, "an array of integers (e.g. [0, 1])");
  std::vector<int32_t> out;
  for (size_t i = 0; i < a->size(); ++i) {
    out.push_back(read_int32(origin, *a->get(i), fmt::format("{}[{}]", path, i)));
  }
  return out;
}

std::vector<std::string> read_string_list(std::string_view origin, const toml::node& n,
                                          std::string_view path) {
  const auto* a = n.as_array();
  if (!a) wrong_type(origin, n, path, "an array of strings (e.g. [\"kill-worker:rank=1,step=20\"])");
  std::vector<std::string> out;
  for (size_t i = 0; i < a->size(); ++i) {
    out.push_back(read_string(origin, *a->get(i), fmt::format("{}[{}]", path, i)));
  }
  return out;
}

using ConfigSetter = void (*)(std::string_view, const toml::node&, const std::string&,
                              ClusterConfig&);
using NodeSetter = void (*)(std::string_view, const toml::node&, const std::string&, ClusterNode&);

struct ConfigKey {
  std::string_view section;
  std::string_view key;
  ConfigSetter set;
};
struct NodeKey {
  std::string_view key;
  NodeSetter set;
};

// One row per key of the file; the lists of allowed keys in errors come from these rows.
const std::array<ConfigKey, 14> kConfigKeys = {{
    {"head", "address",
     [](auto o, auto& n, auto& p, auto& c) { c.head_address = read_string(o, n, p); }},
    {"head", "port",
     [](auto o, auto& n, auto& p, auto& c) {
       c.head_port = uint16_t(
           read_integer(o, n, p, 0, 65535,
                        "1..65535, or 0 (any free port) when the head starts every worker itself"));
     }},
    {"head", "join_timeout_ms",
     [](auto o, auto& n, auto& p, auto& c) { c.join_timeout_ms = read_int32(o, n, p); }},
    {"parallel", "tensor_parallel_size",
     [](auto o, auto& n, auto& p, auto& c) { c.tensor_parallel_size = read_int32(o, n, p); }},
    {"parallel", "pipeline_parallel_size",
     [](auto o, auto& n, auto& p, auto& c) { c.pipeline_parallel_size = read_int32(o, n, p); }},
    {"transport", "ucx_tls",
     [](auto o, auto& n, auto& p, auto& c) { c.ucx_tls = read_string(o, n, p); }},
    {"transport", "collectives",
     [](auto o, auto& n, auto& p, auto& c) { c.collectives = read_string(o, n, p); }},
    {"transport", "net_device",
     [](auto o, auto& n, auto& p, auto& c) { c.net_device = read_string(o, n, p); }},
    {"heartbeat", "interval_ms",
     [](auto o, auto& n, auto& p, auto& c) { c.heartbeat_interval_ms = read_int32(o, n, p); }},
    {"heartbeat", "timeout_ms",
     [](auto o, auto& n, auto& p, auto& c) { c.heartbeat_timeout_ms = read_int32(o, n, p); }},
    {"launcher", "ssh_command",
     [](auto o, auto& n, auto& p, auto& c) { c.ssh_command = read_string(o, n, p); }},
    {"launcher", "srun_command",
     [](auto o, auto& n, auto& p, auto& c) { c.srun_command = read_string(o, n, p); }},
    {"faults", "inject",
     [](auto o, auto& n, auto& p, auto& c) { c.fault_inject = read_string_list(o, n, p); }},
    {"faults", "max_executor_restarts",
     [](auto o, auto& n, auto& p, auto& c) { c.max_executor_restarts = read_int32(o, n, p); }},
}};

const std::array<NodeKey, 8> kNodeKeys = {{
    {"name", [](auto o, auto& n, auto& p, auto& d) { d.name = read_string(o, n, p); }},
    {"host", [](auto o, auto& n, auto& p, auto& d) { d.host = read_string(o, n, p); }},
    {"devices", [](auto o, auto& n, auto& p, auto& d) { d.devices = read_int32_list(o, n, p); }},
    {"workers", [](auto o, auto& n, auto& p, auto& d) { d.workers = read_int32(o, n, p); }},
    {"launcher", [](auto o, auto& n, auto& p, auto& d) { d.launcher = read_string(o, n, p); }},
    {"command", [](auto o, auto& n, auto& p, auto& d) { d.command = read_string(o, n, p); }},
    {"first_rank", [](auto o, auto& n, auto& p, auto& d) { d.first_rank = read_int32(o, n, p); }},
    {"spare", [](auto o, auto& n, auto& p, auto& d) { d.spare = read_bool(o, n, p); }},
}};

constexpr std::array<std::string_view, 7> kTopLevel = {
    "head", "parallel", "transport", "heartbeat", "launcher", "node", "faults"};

std::string header_of(std::string_view section) {
  if (section.empty()) return "the top level";
  return section == "node" ? "[[node]]" : fmt::format("[{}]", section);
}

std::vector<std::string_view> keys_of(std::string_view section) {
  std::vector<std::string_view> out;
  if (section.empty()) return {kTopLevel.begin(), kTopLevel.end()};
  if (section == "node") {
    for (const auto& k : kNodeKeys) out.push_back(k.key);
  }
  for (const auto& k : kConfigKeys) {
    if (k.section == section) out.push_back(k.key);
  }
  return out;
}

/// Spellings other launchers use for our keys (vLLM's flags, Slurm's and torchrun's words).
std::string_view alias_of(std::string_view key) {
  static const std::map<std::string_view, std::string_view> aliases = {
      {"gpus", "devices"},
      {"gpu_ids", "devices"},
      {"cuda_devices", "devices"},
      {"rank", "first_rank"},
      {"start_rank", "first_rank"},
      {"node_rank", "first_rank"},
      {"num_workers", "workers"},
      {"nproc_per_node", "workers"},
      {"hostname", "host"},
      {"addr", "address"},
      {"master_addr", "address"},
      {"master_port", "port"},
      {"tp", "tensor_parallel_size"},
      {"tp_size", "tensor_parallel_size"},
      {"pp", "pipeline_parallel_size"},
      {"pp_size", "pipeline_parallel_size"},
      {"interval", "interval_ms"},
      {"timeout", "timeout_ms"},
  };
  auto it = aliases.find(key);
  return it == aliases.end() ? std::string_view() : it->second;
}

/// The sections (not `section`) that have a key named `key`.
std::string sections_with(std::string_view key, std::string_view section) {
  std::string out;
  for (std::string_view s : kTopLevel) {
    if (s == section) continue;
    auto keys = keys_of(s);
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      out += (out.empty() ? "" : " or ") + header_of(s);
    }
  }
  return out;
}

[[noreturn]] void unknown_key(std::string_view origin, const toml::key& key,
                              std::string_view section, std::string_view path) {
  std::string k(key.str());
  std::replace(k.begin(), k.end(), '-', '_');
  auto keys = keys_of(section);
  auto here = [&](std::string_view name) {
    return std::find(keys.begin(), keys.end(), name) != keys.end();
  };
  auto label = [&](std::string_view name) {
    return section.empty() ? header_of(name) : std::string(name);
  };
  std::string hint;
  if (k != key.str() && here(k)) {
    hint = fmt::format(" (keys are snake_case: did you mean '{}'?)", k);
  } else if (std::string_view alias = alias_of(k); !alias.empty()) {
    std::string elsewhere = here(alias) ? "" : sections_with(alias, section);
    hint = elsewhere.empty() ? fmt::format(" (did you mean '{}'?)", alias)
                             : fmt::format(" (did you mean '{}' in {}?)", alias, elsewhere);
  } else if (std::string elsewhere = sections_with(k, section); !elsewhere.empty()) {
    hint = fmt::format(" (it belongs in {})", elsewhere);
  } else if (std::string_view near = config_detail::closest_name(keys, k); !near.empty()) {
    hint = fmt::format(" (did you mean '{}'?)", label(near));
  }
  std::string allowed;
  for (std::string_view name : keys) allowed += (allowed.empty() ? "" : ", ") + label(name);
  fail("{}: unknown key '{}' in {}{}; allowed: {}", config_detail::where(origin, key.source()),
       path, header_of(section), hint, allowed);
}

const toml::table& read_table(std::string_view origin, const toml::node& n, std::string_view path,
                              std::string_view header) {
  if (const auto* t = n.as_table()) return *t;
  wrong_type(origin, n, path, fmt::format("a table ({})", header));
}

ClusterNode read_node(std::string_view origin, const toml::node& n, size_t index) {
  std::string base = fmt::format("node[{}]", index);
  const toml::table* t = n.as_table();
  if (!t) wrong_type(origin, n, base, "a table ([[node]])");
  ClusterNode node;
  bool workers_given = false;
  for (const auto& [kp, vp] : in_file_order(*t)) {
    std::string path = node_path(index, kp->str());
    // A named copy: clang 14 cannot capture a structured binding in the lambda.
    const std::string_view name = kp->str();
    auto row = std::find_if(kNodeKeys.begin(), kNodeKeys.end(),
                            [&](const NodeKey& k) { return k.key == name; });
    if (row == kNodeKeys.end()) unknown_key(origin, *kp, "node", path);
    row->set(origin, *vp, path, node);
    workers_given |= row->key == "workers";
  }
  if (!t->contains("name")) node.name = fmt::format("node{}", index);
  if (!workers_given) {
    node.workers = node.devices.empty()
                       ? 1
                       : int32_t(std::min<size_t>(node.devices.size(), kMaxClusterRanks + 1));
  }
  return node;
}

ClusterConfig read_keys(const toml::table& doc, std::string_view origin) {
  ClusterConfig c;
  for (const auto& [kp, np] : in_file_order(doc)) {
    std::string_view section = kp->str();
    if (section == "node") {
      const toml::array* nodes = np->as_array();
      if (!nodes) {
        wrong_type(origin, *np, "node", "an array of tables: write each node as [[node]]");
      }
      for (size_t i = 0; i < nodes->size(); ++i) {
        c.nodes.push_back(read_node(origin, *nodes->get(i), i));
      }
      continue;
    }
    if (std::find(kTopLevel.begin(), kTopLevel.end(), section) == kTopLevel.end()) {
      unknown_key(origin, *kp, "", section);
    }
    const toml::table& t = read_table(origin, *np, section, header_of(section));
    for (const auto& [key, value] : in_file_order(t)) {
      std::string path = fmt::format("{}.{}", section, key->str());
      const std::string_view name = key->str();  // clang 14 cannot capture the binding `key`
      auto row = std::find_if(kConfigKeys.begin(), kConfigKeys.end(), [&](const ConfigKey& k) {
        return k.section == section && k.key == name;
      });
      if (row == kConfigKeys.end()) unknown_key(origin, *key, section, path);
      row->set(origin, *value, path, c);
    }
  }
  return c;
}

// ---- hosts ----

bool is_ipv4(const std::string& s) {
  in_addr a{};
  return inet_pton(AF_INET, s.c_str(), &a) == 1;
}
bool is_ipv6(const std::string& s) {
  in6_addr a{};
  return inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

/// RFC 1123: dot-separated labels of 1..63 letters, digits and '-' (not at either end), at
/// most 253 characters, not all labels numeric (that would be a mistyped IPv4 address).
bool is_hostname(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  bool all_numeric = true;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = std::min(s.find('.', start), s.size());
    std::string_view label = s.substr(start, end - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char ch : label) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') return false;
      if (!std::isdigit(static_cast<unsigned char>(ch))) all_numeric = false;
    }
    start = end + 1;
  }
  return !all_numeric;
}

/// What is wrong with a host, or "" when it is a hostname or an IP literal.
std::string host_problem(const std::string& host) {
  if (is_ipv4(host) || is_ipv6(host) || is_hostname(host)) return "";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return "write an IPv6 address without brackets";
  }
  return "not a hostname (dot-separated labels of letters, digits and '-', 1..63 characters "
         "each) or an IPv4 / IPv6 address";
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || (is_ipv4(host) && host.rfind("127.", 0) == 0);
}

/// Which machine a node's workers run on, as far as the file tells: "@this" for the head's own
/// machine (a local launch, or a loopback host), the host otherwise, "" when not known.
std::string machine_of(const ClusterNode& n) {
  if (n.launcher == "local" || is_loopback(n.host)) return "@this";
  return n.host;
}

// ---- the checks ----

constexpr std::array<std::string_view, 5> kLaunchers = {"local", "ssh", "srun", "command",
                                                        "external"};

template <size_t N>
void check_choice(const Where& w, std::string_view path, const std::string& value,
                  const std::array<std::string_view, N>& choices) {
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return;
  std::string allowed;
  for (std::string_view c : choices) allowed += (allowed.empty() ? "" : " | ") + std::string(c);
  bad(w, path, show(value), fmt::format("allowed: {}", allowed));
}

void check_at_least(const Where& w, std::string_view path, int64_t value, int64_t lo,
                    int64_t hi = std::numeric_limits<int32_t>::max()) {
  if (value < lo || value > hi) {
    bad(w, path, std::to_string(value),
        hi == std::numeric_limits<int32_t>::max() ? fmt::format("allowed: >= {}", lo)
                                                  : fmt::format("allowed: {}..{}", lo, hi));
  }
}

void check_settings(const ClusterConfig& c, const Where& w) {
  if (std::string p = host_problem(c.head_address); !p.empty()) {
    bad(w, "head.address", show(c.head_address), p);
  }
  if (c.head_address == "0.0.0.0" || c.head_address == "::") {
    bad(w, "head.address", show(c.head_address),
        "the address workers dial cannot be a wildcard: give the head's own address");
  }
  check_at_least(w, "head.join_timeout_ms", c.join_timeout_ms, 1);
  check_at_least(w, "parallel.tensor_parallel_size", c.tensor_parallel_size, 1, kMaxClusterRanks);
  check_at_least(w, "parallel.pipeline_parallel_size", c.pipeline_parallel_size, 1,
                 kMaxClusterRanks);
  if (int64_t(c.tensor_parallel_size) * c.pipeline_parallel_size > kMaxClusterRanks) {
    bad(w, "parallel.pipeline_parallel_size", std::to_string(c.pipeline_parallel_size),
        fmt::format("tensor_parallel_size x pipeline_parallel_size is more than {} ranks",
                    kMaxClusterRanks));
  }
  check_choice(w, "transport.ucx_tls", c.ucx_tls,
               std::array<std::string_view, 3>{"auto", "tcp", "sm"});
  check_choice(w, "transport.collectives", c.collectives,
               std::array<std::string_view, 4>{"auto", "shm", "ucx", "nccl"});
  if (!c.net_device.empty()) {
    bool chars_ok = std::all_of(c.net_device.begin(), c.net_device.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) ||
             std::string_view("_.:-,").find(ch) != std::string_view::npos;
    });
    if (!chars_ok || c.net_device.front() == ',' || c.net_device.back() == ',' ||
        c.net_device.find(",,") != std::string::npos) {
      bad(w, "transport.net_device", show(c.net_device),
          "allowed: UCX device names (letters, digits, '_', '.', ':', '-'), comma-separated, "
          "e.g. \"lo\" or \"mlx5_0:1,eth0\"");
    }
  }
  if (!c.net_device.empty() && c.ucx_tls == "sm") {
    bad(w, "transport.net_device", show(c.net_device),
        "names a network device, but ucx_tls = \"sm\" (shared memory) uses none; drop it or use "
        "ucx_tls = \"tcp\"");
  }
  for (size_t i = 0; i < c.fault_inject.size(); ++i) {
    try {
      (void)parse_fault_spec(c.fault_inject[i]);
    } catch (const Error& e) {
      bad(w, fmt::format("faults.inject[{}]", i), show(c.fault_inject[i]), e.what());
    }
  }
  if (c.max_executor_restarts)
    check_at_least(w, "faults.max_executor_restarts", *c.max_executor_restarts, 0, 100);
  check_at_least(w, "heartbeat.interval_ms", c.heartbeat_interval_ms, 1);
  check_at_least(w, "heartbeat.timeout_ms", c.heartbeat_timeout_ms, 1);
  if (c.heartbeat_timeout_ms <= c.heartbeat_interval_ms) {
    bad(w, "heartbeat.timeout_ms", std::to_string(c.heartbeat_timeout_ms),
        fmt::format("must be more than interval_ms = {}: a worker would be lost between two "
                    "heartbeats",
                    c.heartbeat_interval_ms));
  }
  std::vector<Piece> pieces;
  if (std::string p = split_template(c.ssh_command, pieces); !p.empty()) {
    bad(w, "launcher.ssh_command", show(c.ssh_command), p);
  }
  if (std::string p = split_template(c.srun_command, pieces); !p.empty()) {
    bad(w, "launcher.srun_command", show(c.srun_command), p);
  }
}

/// The checks of node `i` on its own; `names` holds the names of the nodes before it.
void check_node(const ClusterConfig& c, const Where& w, size_t i,
                std::map<std::string, size_t>& names) {
  const ClusterNode& n = c.nodes[i];
  bool named = w.given(node_path(i, "name")) || !w.given(fmt::format("node[{}]", i));
  bool name_ok =
      !n.name.empty() && n.name.size() <= 64 &&
      std::all_of(n.name.begin(), n.name.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
      });
  if (!name_ok) {
    bad(w, node_path(i, "name"), show(n.name), "allowed: 1..64 letters, digits, '_', '-' or '.'");
  }
  if (auto [it, fresh] = names.emplace(n.name, i); !fresh) {
    bad(w, node_path(i, "name"), show(n.name),
        fmt::format("node[{}] has that name too{}; node names must be unique", it->second,
                    named ? "" : " (this node has no name: it got the default)"));
  }
  if (std::string p = n.host.empty() ? "" : host_problem(n.host); !p.empty()) {
    bad(w, node_path(i, "host"), show(n.host), p);
  }
  check_choice(w, node_path(i, "launcher"), n.launcher, kLaunchers);
  std::set<int32_t> devices;
  for (size_t d = 0; d < n.devices.size(); ++d) {
    std::string path = fmt::format("node[{}].devices[{}]", i, d);
    check_at_least(w, path, n.devices[d], 0);
    if (!devices.insert(n.devices[d]).second) {
      bad(w, path, std::to_string(n.devices[d]),
          fmt::format("device {} is listed twice on node '{}' (devices = {}); a device runs one "
                      "worker of a node",
                      n.devices[d], n.name, show(n.devices)));
    }
  }
  check_at_least(w, node_path(i, "workers"), n.workers, 1, kMaxClusterRanks);
  if (!n.devices.empty() && size_t(n.workers) != n.devices.size()) {
    bool more = size_t(n.workers) > n.devices.size();
    bad(w, node_path(i, "workers"), std::to_string(n.workers),
        more ? fmt::format("node '{}' lists {} CUDA device(s) ({}) and each worker needs its own; "
                           "list more devices, or give the extra workers another node",
                           n.name, n.devices.size(), show(n.devices))
             : fmt::format("node '{}' lists {} CUDA devices ({}) but runs only {} worker(s); list "
                           "only the devices to use (one per worker)",
                           n.name, n.devices.size(), show(n.devices), n.workers));
  }
  if (n.first_rank) {
    if (n.spare) {
      bad(w, node_path(i, "first_rank"), std::to_string(*n.first_rank),
          "a spare node has no rank of its own (it takes the rank of the worker it replaces)");
    }
    check_at_least(w, node_path(i, "first_rank"), *n.first_rank, 0);
  }
  bool templated = n.launcher == "ssh" || n.launcher == "srun" || n.launcher == "command";
  if (!n.command.empty() && !templated) {
    bad(w, node_path(i, "command"), show(n.command),
        fmt::format("launcher = \"{}\" runs no template; command is read for launcher = "
                    "\"command\", \"ssh\" or \"srun\"",
                    n.launcher));
  }
  if (n.launcher == "command" && n.command.empty()) {
    bad(w, node_path(i, "command"), show(n.command),
        "launcher = \"command\" needs a command template, e.g. \"ip netns exec ns1 {troupe} "
        "worker {worker_args}\"");
  }
  auto [text, path] = template_of(c, i);
  if (path.empty()) return;
  std::vector<Piece> pieces;
  if (std::string p = split_template(text, pieces); !p.empty()) bad(w, path, show(text), p);
  if (uses(pieces, "device") && n.devices.empty()) {
    bad(w, path, show(text),
        fmt::format("{{device}} on node '{}', a CPU node (no devices): it has no device to fill in",
                    n.name));
  }
  if (uses(pieces, "host") && n.host.empty()) {
    bad(w, node_path(i, "host"), show(n.host),
        fmt::format("node '{}' is launched with {}, which uses {{host}}: give its host", n.name,
                    path));
  }
}

/// rank -> (node, worker index) for the non-spare nodes, checking first_rank collisions.
std::vector<std::pair<int32_t, int32_t>> assign_ranks(const ClusterConfig& c, const Where& w) {
  const int32_t world = c.tensor_parallel_size * c.pipeline_parallel_size;
  std::vector<std::pair<int32_t, int32_t>> owner(size_t(world), {-1, -1});
  int64_t next = 0;
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    const ClusterNode& n = c.nodes[i];
    if (n.spare) continue;
    int64_t start = n.first_rank.value_or(next);
    std::string path = node_path(i, n.first_rank ? "first_rank" : "workers");
    std::string value = std::to_string(n.first_rank ? *n.first_rank : n.workers);
    for (int64_t r = start; r < start + n.workers; ++r) {
      if (r >= world) {
        bad(w, path, value,
            fmt::format("node '{}' would hold ranks {}..{}, past the last rank {} (tensor_parallel"
                        "_size x pipeline_parallel_size = {} ranks: 0..{})",
                        n.name, start, start + n.workers - 1, world - 1, world, world - 1));
      }
      auto [other, local] = owner[size_t(r)];
      if (other >= 0) {
        bad(w, path, value,
            fmt::format("node '{}' would hold ranks {}..{}, but rank {} already belongs to node "
                        "'{}' (node[{}]); each rank belongs to one worker",
                        n.name, start, start + n.workers - 1, r, c.nodes[size_t(other)].name,
                        other));
      }
      owner[size_t(r)] = {int32_t(i), int32_t(r - start)};
    }
    next = start + n.workers;
  }
  return owner;
}

void check_cluster(const ClusterConfig& c, const Where& w) {
  if (c.nodes.empty()) {
    fail("{}: no [[node]] table: a cluster needs at least one node to run its workers", w.origin());
  }
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < c.nodes.size(); ++i) check_node(c, w, i, names);

  for (size_t i = 1; i < c.nodes.size(); ++i) {
    if (c.nodes[i].devices.empty() != c.nodes[0].devices.empty()) {
      bad(w, node_path(i, "devices"), show(c.nodes[i].devices),
          fmt::format("node '{}' is a {} node but node '{}' is a {} node; every node of a cluster "
                      "runs on CUDA devices, or every node on the CPU",
                      c.nodes[i].name, c.nodes[i].devices.empty() ? "CPU" : "CUDA", c.nodes[0].name,
                      c.nodes[0].devices.empty() ? "CPU" : "CUDA"));
    }
  }

  const int64_t world = int64_t(c.tensor_parallel_size) * c.pipeline_parallel_size;
  int64_t workers = 0;
  int64_t listed = 0;
  std::string counts;
  for (const ClusterNode& n : c.nodes) {
    if (n.spare) continue;
    workers += n.workers;
    if (++listed <= 8) {
      counts += fmt::format("{}{} on '{}'", counts.empty() ? "" : ", ", n.workers, n.name);
    } else if (listed == 9) {
      counts += ", ...";  // a message stays one readable line however many nodes there are
    }
  }
  if (workers != world) {
    std::string sizes = fmt::format("tensor_parallel_size x pipeline_parallel_size = {} x {} = {}",
                                    c.tensor_parallel_size, c.pipeline_parallel_size, world);
    std::string nodes = counts.empty() ? "no worker (every node is a spare)"
                                       : fmt::format("{} worker(s) ({})", workers, counts);
    bad(w, "parallel.tensor_parallel_size", std::to_string(c.tensor_parallel_size),
        workers < world
            ? fmt::format("{} ranks, but the non-spare nodes run {}: {} rank(s) have no worker; "
                          "add workers (devices) or nodes",
                          sizes, nodes, world - workers)
            : fmt::format("{} ranks, but the non-spare nodes run {}: {} worker(s) too many; "
                          "remove them or mark a node spare = true",
                          sizes, nodes, workers - world));
  }
  auto owner = assign_ranks(c, w);

  if (c.head_port == 0) {
    for (size_t i = 0; i < c.nodes.size(); ++i) {
      const std::string& l = c.nodes[i].launcher;
      if (l == "local" || l == "command") continue;
      bad(w, "head.port", "0",
          fmt::format("0 (any free port) works only when the head starts every worker itself "
                      "(launcher \"local\" or \"command\"); node '{}' uses \"{}\": give a port in "
                      "1..65535",
                      c.nodes[i].name, l));
    }
  }
  if (is_loopback(c.head_address)) {
    for (size_t i = 0; i < c.nodes.size(); ++i) {
      std::string m = machine_of(c.nodes[i]);
      if (m.empty() || m == "@this") continue;
      bad(w, "head.address", show(c.head_address),
          fmt::format("a loopback address, but node '{}' runs on {}, which cannot dial it; give "
                      "an address of the head that every node can reach",
                      c.nodes[i].name, c.nodes[i].host));
    }
  }
  bool one_machine = true;
  std::string first = machine_of(c.nodes[0]);
  for (const ClusterNode& n : c.nodes) one_machine &= !first.empty() && machine_of(n) == first;
  if (!one_machine && c.ucx_tls == "sm") {
    bad(w, "transport.ucx_tls", show(c.ucx_tls),
        "shared memory reaches only workers of one machine, and these nodes are on several (or "
        "unknown) hosts; use \"tcp\" or \"auto\"");
  }
  if (!one_machine && c.collectives == "shm") {
    bad(w, "transport.collectives", show(c.collectives),
        "shared memory reaches only workers of one machine, and these nodes are on several (or "
        "unknown) hosts; use \"ucx\", \"nccl\" or \"auto\"");
  }
  if (c.collectives == "nccl" && c.nodes[0].devices.empty()) {
    bad(w, "transport.collectives", show(c.collectives),
        "NCCL needs CUDA devices and these nodes are CPU nodes; use \"auto\", \"shm\" or \"ucx\"");
  }
  // NCCL refuses two ranks of one communicator on one GPU; pipeline stages may share one.
  if (c.collectives == "nccl" || c.collectives == "auto") {
    std::map<std::tuple<std::string, int32_t, int64_t>, int64_t> seen;
    for (int64_t r = 0; r < world; ++r) {
      auto [node, local] = owner[size_t(r)];
      const ClusterNode& n = c.nodes[size_t(node)];
      std::string m = machine_of(n);
      if (n.devices.empty() || m.empty()) continue;
      int32_t device = n.devices[size_t(local)];
      auto [it, fresh] = seen.emplace(std::tuple{m, device, r / c.tensor_parallel_size}, r);
      if (fresh) continue;
      bad(w, node_path(size_t(node), "devices"), show(n.devices),
          fmt::format("ranks {} and {} are in one tensor-parallel group and both on device {} of "
                      "host {}; NCCL refuses two ranks on one GPU (pipeline stages may share one)",
                      it->second, r, device, n.host.empty() ? "(this machine)" : n.host));
    }
  }
}

void validate_at(const ClusterConfig& c, const Where& w) {
  check_settings(c, w);
  check_cluster(c, w);
}

}  // namespace

ClusterConfig parse_cluster_config(std::string_view toml_text, std::string_view origin) {
  toml::table doc = config_detail::parse_toml(toml_text, origin);
  ClusterConfig c = read_keys(doc, origin);
  validate_at(c, Where(origin, &doc));
  return c;
}

ClusterConfig load_cluster_config(const std::filesystem::path& file) {
  return parse_cluster_config(config_detail::read_text_file(file, "cluster file"), file.string());
}

void validate(const ClusterConfig& config, std::string_view origin) {
  validate_at(config, Where(origin, nullptr));
}

std::vector<RankPlacement> place_ranks(const ClusterConfig& config) {
  Where w("place_ranks", nullptr);
  validate_at(config, w);
  auto owner = assign_ranks(config, w);
  std::vector<RankPlacement> out;
  out.reserve(owner.size());
  for (size_t r = 0; r < owner.size(); ++r) {
    auto [node, local] = owner[r];
    const ClusterNode& n = config.nodes[size_t(node)];
    out.push_back({.rank = int32_t(r),
                   .node_index = node,
                   .local_index = local,
                   .device = n.devices.empty() ? -1 : n.devices[size_t(local)],
                   .tp_rank = int32_t(r) % config.tensor_parallel_size,
                   .pp_rank = int32_t(r) / config.tensor_parallel_size});
  }
  return out;
}

std::string format_topology(const ClusterConfig& config) {
  auto ranks = place_ranks(config);
  std::vector<std::array<std::string, 6>> rows;
  rows.push_back({"rank", "node", "host", "device", "tp_rank", "stage"});
  for (const RankPlacement& p : ranks) {
    const ClusterNode& n = config.nodes[size_t(p.node_index)];
    rows.push_back({std::to_string(p.rank), n.name, n.host.empty() ? "(joins)" : n.host,
                    p.device < 0 ? "cpu" : fmt::format("cuda:{}", p.device),
                    std::to_string(p.tp_rank), std::to_string(p.pp_rank)});
  }
  for (const ClusterNode& n : config.nodes) {
    if (!n.spare) continue;
    // A spare's workers take a rank (and its tp rank and stage) only when they replace one.
    std::string devices = n.devices.empty() ? fmt::format("cpu x{}", n.workers)
                                            : fmt::format("cuda:{}", fmt::join(n.devices, ","));
    rows.push_back({"spare", n.name, n.host.empty() ? "(joins)" : n.host, devices, "-", "-"});
  }
  std::array<size_t, 6> width{};
  for (const auto& row : rows) {
    for (size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t k = 0; k < row.size(); ++k) line += fmt::format("{:<{}}  ", row[k], width[k]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + '\n';
  }
  return out;
}

ClusterConfig cluster_from_multi_node_flags(const MultiNodeFlags& f) {
  if (f.nnodes < 1 || f.nnodes > kMaxClusterRanks) {
    fail("--nnodes {}: allowed: 1..{}", f.nnodes, kMaxClusterRanks);
  }
  if (f.node_rank < 0 || f.node_rank >= f.nnodes) {
    fail("--node-rank {}: allowed: 0..{} (--nnodes {})", f.node_rank, f.nnodes - 1, f.nnodes);
  }
  if (f.tensor_parallel_size < 1 || f.tensor_parallel_size > kMaxClusterRanks) {
    fail("--tensor-parallel-size {}: allowed: 1..{}", f.tensor_parallel_size, kMaxClusterRanks);
  }
  if (f.pipeline_parallel_size < 1 || f.pipeline_parallel_size > kMaxClusterRanks) {
    fail("--pipeline-parallel-size {}: allowed: 1..{}", f.pipeline_parallel_size, kMaxClusterRanks);
  }
  const int64_t world = int64_t(f.tensor_parallel_size) * f.pipeline_parallel_size;
  if (world % f.nnodes != 0) {
    fail(
        "--nnodes {}: does not divide the {} ranks (tensor-parallel-size {} x "
        "pipeline-parallel-size {}); every node runs the same number of workers",
        f.nnodes, world, f.tensor_parallel_size, f.pipeline_parallel_size);
  }
  if (f.headless && f.node_rank == 0) {
    fail(
        "--headless with --node-rank 0: node 0 runs the head; --headless starts the workers of "
        "another node (--node-rank 1..)");
  }
  if (!f.headless && f.node_rank > 0) {
    fail(
        "--node-rank {} without --headless: the head runs on node 0 only; start node {} with "
        "--headless",
        f.node_rank, f.node_rank);
  }
  if (std::string p = host_problem(f.master_addr); !p.empty()) {
    fail("--master-addr {}: {}", show(f.master_addr), p);
  }
  if (f.master_port && (*f.master_port < 1 || *f.master_port > 65535)) {
    fail("--master-port {}: allowed: 1..65535", *f.master_port);
  }
  const int32_t per_node = int32_t(world / f.nnodes);
  if (f.local_device_count < 0) {
    fail("local device count {}: allowed: >= 0 (0 runs the workers on the CPU)",
         f.local_device_count);
  }
  if (f.local_device_count > 0 && f.local_device_count < per_node) {
    fail("--nnodes {}: puts {} of the {} ranks on each node, but this node has {} CUDA device(s)",
         f.nnodes, per_node, world, f.local_device_count);
  }

  ClusterConfig c;
  c.head_address = f.master_addr;
  c.head_port = uint16_t(f.master_port.value_or(f.nnodes > 1 ? 29501 : 0));
  c.tensor_parallel_size = f.tensor_parallel_size;
  c.pipeline_parallel_size = f.pipeline_parallel_size;
  for (int32_t i = 0; i < f.nnodes; ++i) {
    ClusterNode n;
    n.name = fmt::format("node{}", i);
    n.host = i == 0 ? f.master_addr : "";
    if (f.local_device_count > 0) {
      for (int32_t d = 0; d < per_node; ++d) n.devices.push_back(d);
    }
    n.workers = per_node;
    n.launcher = i == f.node_rank ? "local" : "external";
    c.nodes.push_back(std::move(n));
  }
  validate(c, "vLLM multi-node flags");
  return c;
}

}  // namespace troupe
