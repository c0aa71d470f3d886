// The engine TOML loader: toml++ parses (so errors carry line and column), each value is
// turned into JSON and applied through the same table rows as the command line.
#include <fmt/format.h>

#include <toml++/toml.h>
#include <sstream>

#include "runtime/config/engine_args.hpp"
#include "runtime/config/field_codec.hpp"
#include "runtime/config/toml_source.hpp"
#include "runtime/error.hpp"

namespace troupe {

namespace {

using config_detail::in_file_order;
using config_detail::json;
using config_detail::parse_toml;
using config_detail::read_text_file;
using config_detail::where;

json to_json(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: {
      json out = json::object();
      for (const auto& [k, v] : *node.as_table()) out[std::string(k.str())] = to_json(v);
      return out;
    }
    case toml::node_type::array: {
      json out = json::array();
      for (const auto& v : *node.as_array()) out.push_back(to_json(v));
      return out;
    }
    case toml::node_type::string:
      return node.as_string()->get();
    case toml::node_type::integer:
      return node.as_integer()->get();
    case toml::node_type::floating_point:
      return node.as_floating_point()->get();
    case toml::node_type::boolean:
      return node.as_boolean()->get();
    default: {  // dates and times: keep their TOML spelling
      std::ostringstream s;
      node.visit([&](const auto& v) { s << v; });
      return s.str();
    }
  }
}

/// Runs `apply`, putting "<source>:<line>:<column>: " in front of its error.
template <class F>
void at(std::string_view source, const toml::source_region& r, F&& apply) {
  try {
    apply();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where(source, r), e.what()));
  }
}

}  // namespace

EngineConfigFile parse_engine_toml(std::string_view text, std::string_view source_name,
                                   const EngineArgs& base, const SamplingParams& sbase,
                                   bool validate_result) {
  toml::table doc = parse_toml(text, source_name);

  EngineConfigFile out{base, sbase, {}};
  const auto& engine_fields = engine_arg_fields();
  const auto& sampling_fields = sampling_param_fields();
  for (const auto& [key_ptr, node_ptr] : in_file_order(doc)) {
    const toml::key& key = *key_ptr;
    const toml::node& node = *node_ptr;
    std::string_view k = key.str();
    if (k == "sampling") {
      const toml::table* sampling = node.as_table();
      if (!sampling) {
        fail("{}: 'sampling' must be a table ([sampling]) of SamplingParams defaults",
             where(source_name, key.source()));
      }
      for (const auto& [skey_ptr, snode_ptr] : in_file_order(*sampling)) {
        const toml::key& skey = *skey_ptr;
        const toml::node& snode = *snode_ptr;
        const FieldInfo* f = config_detail::find_field(sampling_fields, skey.str());
        if (const FieldInfo* b = config_detail::find_field(beam_search_fields(), skey.str());
            !f && b) {
          at(source_name, snode.source(), [&] {
            apply_beam_search_field(*b, to_json(snode), fmt::format("sampling.{}", skey.str()));
          });
          continue;
        }
        if (!f) {
          fail("{}: unknown key 'sampling.{}': not a SamplingParams field{}",
               where(source_name, skey.source()), skey.str(),
               config_detail::suggest(sampling_fields, skey.str()));
        }
        at(source_name, snode.source(), [&] {
          config_detail::apply_sampling_value(out.sampling, *f, to_json(snode),
                                              fmt::format("sampling.{}", skey.str()));
        });
      }
      continue;
    }
    if (k == "faults") {
      // [faults]: inject = ["SPEC", ...] (the --fault flags) and the recovery settings.
      const toml::table* faults = node.as_table();
      if (!faults)
        fail("{}: 'faults' must be a table ([faults]) with inject = [\"KIND:key=value\", ...], "
             "max_executor_restarts, execute_timeout",
             where(source_name, key.source()));
      for (const auto& [fkey_ptr, fnode_ptr] : in_file_order(*faults)) {
        const std::string_view fk = fkey_ptr->str();
        const std::string_view field = fk == "inject" ? std::string_view("fault") : fk;
        const FieldInfo* f = fk == "inject" || fk == "max_executor_restarts" ||
                                     fk == "execute_timeout"
                                 ? config_detail::find_field(engine_fields, field)
                                 : nullptr;
        if (!f)
          fail("{}: unknown key 'faults.{}'; allowed: inject, max_executor_restarts, "
               "execute_timeout",
               where(source_name, fkey_ptr->source()), fk);
        const toml::node& fnode = *fnode_ptr;  // clang 14 cannot capture the binding itself
        at(source_name, fnode.source(), [&] {
          config_detail::apply_engine_value(out.engine, *f, to_json(fnode),
                                            fmt::format("faults.{}", fk), &out.notices);
        });
      }
      continue;
    }
    const FieldInfo* f = config_detail::find_field(engine_fields, k);
    if (!f) {
      fail("{}: unknown key '{}': not an EngineArgs field{}", where(source_name, key.source()), k,
           config_detail::suggest(engine_fields, k));
    }
    at(source_name, node.source(),
       [&] { config_detail::apply_engine_value(out.engine, *f, to_json(node), k, &out.notices); });
  }
  if (validate_result) {
    try {
      validate(out.engine);
      validate(out.sampling);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", source_name, e.what()));
    }
  }
  return out;
}

EngineConfigFile load_engine_toml(const std::filesystem::path& path, const EngineArgs& base,
                                  const SamplingParams& sbase) {
  return parse_engine_toml(read_text_file(path, "engine config file"), path.string(), base, sbase);
}

}  // namespace troupe
