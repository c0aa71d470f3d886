#include "runtime/sampling/logits_processors.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "runtime/error.hpp"
#include "runtime/sampling/logits_processor_plugin.h"

namespace troupe {

ProcessorSpec parse_processor_spec(std::string_view spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos) return {std::string(spec), ""};
  return {std::string(spec.substr(0, colon)), std::string(spec.substr(colon + 1))};
}

struct LogitsProcessorPlugins::Library {
  std::string path;
  void* handle = nullptr;
  ~Library() {
    if (handle) dlclose(handle);
  }
};

LogitsProcessorPlugins::LogitsProcessorPlugins(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    auto lib = std::make_unique<Library>();
    lib->path = path;
    // RTLD_LOCAL: two plug-ins may use the same symbol names inside.
    lib->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib->handle) {
      const char* why = dlerror();
      fail("logits_processor_plugin = \"{}\": cannot load it ({})", path, why ? why : "?");
    }
    using Entry = int (*)(uint32_t, const troupe_logits_processor**, size_t*);
    auto entry = reinterpret_cast<Entry>(dlsym(lib->handle, "troupe_logits_processors"));
    if (!entry)
      fail(
          "logits_processor_plugin = \"{}\": not a troupe logits-processor plug-in (no "
          "troupe_logits_processors symbol; see runtime/sampling/logits_processor_plugin.h)",
          path);
    const troupe_logits_processor* table = nullptr;
    size_t count = 0;
    if (entry(TROUPE_LOGITS_PROCESSOR_ABI_VERSION, &table, &count) != 0 || (count > 0 && !table))
      fail("logits_processor_plugin = \"{}\": the plug-in refused ABI version {}", path,
           TROUPE_LOGITS_PROCESSOR_ABI_VERSION);
    for (size_t i = 0; i < count; ++i) {
      const troupe_logits_processor& p = table[i];
      if (!p.name || !*p.name || !p.apply)
        fail("logits_processor_plugin = \"{}\": processor {} has no name or no apply", path, i);
      const std::string name = p.name;
      if (name.find(':') != std::string::npos)
        fail("logits_processor_plugin = \"{}\": processor name \"{}\" holds a ':'", path, name);
      if (by_name_.contains(name))
        fail("logits_processor_plugin = \"{}\": processor \"{}\" is already loaded", path, name);
      by_name_.emplace(name, &p);
    }
    libraries_.push_back(std::move(lib));
  }
}

LogitsProcessorPlugins::~LogitsProcessorPlugins() {
  by_name_.clear();
  libraries_.clear();
}

const troupe_logits_processor& LogitsProcessorPlugins::find(const std::string& name,
                                                            std::string_view spec) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    std::vector<std::string> names;
    for (const auto& [n, p] : by_name_) names.push_back(n);
    fail("logits_processors: \"{}\": no such processor; allowed: {}", spec,
         names.empty() ? std::string("none loaded (load plug-ins with --logits-processor-plugin)")
                       : fmt::format("{} (or name:argument)", fmt::join(names, ", ")));
  }
  return *it->second;
}

void LogitsProcessorPlugins::check(std::string_view spec) const {
  const ProcessorSpec s = parse_processor_spec(spec);
  const troupe_logits_processor& p = find(s.name, spec);
  if (!p.check) return;
  char error[512] = {};
  if (p.check(s.argument.c_str(), error, sizeof error) != 0) {
    error[sizeof error - 1] = '\0';
    fail("logits_processors: \"{}\": {}", spec, *error ? error : "argument refused");
  }
}

void LogitsProcessorPlugins::apply(std::string_view spec, std::span<const int32_t> prompt_ids,
                                   std::span<const int32_t> output_ids,
                                   std::span<float> logits) const {
  const ProcessorSpec s = parse_processor_spec(spec);
  const troupe_logits_processor& p = find(s.name, spec);
  troupe_logits_row row{prompt_ids.data(), int64_t(prompt_ids.size()),
                        output_ids.data(), int64_t(output_ids.size()),
                        logits.data(),     int64_t(logits.size())};
  char error[512] = {};
  if (p.apply(s.argument.c_str(), &row, error, sizeof error) != 0) {
    error[sizeof error - 1] = '\0';
    fail("logits processor \"{}\" failed: {}", spec, *error ? error : "no reason given");
  }
}

std::vector<std::string> LogitsProcessorPlugins::describe() const {
  std::vector<std::string> out;
  for (const auto& [name, p] : by_name_)
    out.push_back(p->description ? fmt::format("{} ({})", name, p->description) : name);
  return out;
}

void append_changes_as_bias(std::span<const float> before, std::span<const float> after,
                            std::vector<std::pair<int32_t, float>>& bias, std::string_view who) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < after.size(); ++i) {
    const float b = before[i], a = after[i];
    if (a == b || (std::isnan(a) && std::isnan(b))) continue;
    if (std::isnan(a)) fail("{} set token {}'s logit to NaN", who, i);
    if (a == -kInf) {
      bias.emplace_back(int32_t(i), -kInf);
      continue;
    }
    if (!std::isfinite(b) || a == kInf)
      fail("{} changed token {}'s logit from {} to {}; allowed: finite values or -inf (a ban)", who,
           i, b, a);
    // The sampler adds the bias in float: find the d with b + d == a (d = a - b, nudged).
    float d = a - b;
    for (int k = 0; k < 4 && b + d != a; ++k) d = std::nextafter(d, b + d < a ? kInf : -kInf);
    bias.emplace_back(int32_t(i), d);
  }
}

}  // namespace troupe
