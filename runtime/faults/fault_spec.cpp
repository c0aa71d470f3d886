#include "runtime/faults/fault_spec.hpp"

#include <fmt/format.h>

#include <charconv>
#include <set>
#include <string_view>

#include "runtime/error.hpp"

namespace troupe {

namespace {

struct KindInfo {
  FaultKind kind;
  const char* name;
  std::set<std::string_view> keys;  // allowed keys
  std::set<std::string_view> required;
};

const std::vector<KindInfo>& kinds() {
  static const std::vector<KindInfo> k = {
      {FaultKind::kill_worker, "kill-worker", {"rank", "step"}, {}},
      {FaultKind::kill_executor, "kill-executor", {"rank", "step"}, {}},
      {FaultKind::freeze, "freeze", {"rank", "step"}, {}},
      {FaultKind::drop, "drop", {"message", "rank", "step"}, {"message"}},
      {FaultKind::delay, "delay", {"message", "rank", "step", "ms"}, {"message", "ms"}},
      {FaultKind::ucx_fail, "ucx-fail", {"rank", "step"}, {}},
      {FaultKind::refuse_kv, "refuse-kv", {"step", "count"}, {}},
      {FaultKind::slow, "slow", {"rank", "step", "factor"}, {"factor"}},
      {FaultKind::drain, "drain", {"rank", "step"}, {}},
  };
  return k;
}

std::string kind_list() {
  std::string out;
  for (const KindInfo& k : kinds()) out += fmt::format("{}{}", out.empty() ? "" : ", ", k.name);
  return out;
}

std::string key_list(const std::set<std::string_view>& keys) {
  std::string out;
  for (auto k : keys) out += fmt::format("{}{}", out.empty() ? "" : ", ", k);
  return out;
}

int64_t read_int(const std::string& spec, std::string_view key, std::string_view v, int64_t lo,
                 int64_t hi) {
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || x < lo || x > hi)
    fail("fault '{}': {} = '{}': allowed: an integer in {} .. {}", spec, key, v, lo, hi);
  return x;
}

double read_factor(const std::string& spec, std::string_view v) {
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || !(x > 1.0) || x > 1000.0)
    fail("fault '{}': factor = '{}': allowed: a number > 1 and <= 1000 (how many times as long "
         "each step takes)",
         spec, v);
  return x;
}

}  // namespace

const char* fault_kind_name(FaultKind kind) {
  for (const KindInfo& k : kinds())
    if (k.kind == kind) return k.name;
  return "?";
}

FaultSpec parse_fault_spec(const std::string& text) {
  FaultSpec f;
  f.text = text;
  const std::string_view all(text);
  const auto colon = all.find(':');
  const std::string_view kind = all.substr(0, colon);
  const KindInfo* info = nullptr;
  for (const KindInfo& k : kinds())
    if (kind == k.name) info = &k;
  if (info == nullptr)
    fail("fault '{}': unknown kind '{}'; allowed: {} (KIND:key=value,...; docs/faults.md)", text,
         kind, kind_list());
  f.kind = info->kind;
  std::set<std::string_view> seen;
  if (colon != std::string_view::npos) {
    std::string_view rest = all.substr(colon + 1);
    if (rest.empty()) fail("fault '{}': nothing after ':'; give key=value pairs or no ':'", text);
    while (true) {
      const auto comma = rest.find(',');
      const std::string_view pair = rest.substr(0, comma);
      const auto eq = pair.find('=');
      if (eq == std::string_view::npos || eq == 0 || eq + 1 == pair.size())
        fail("fault '{}': '{}' is not key=value", text, pair);
      const std::string_view key = pair.substr(0, eq), value = pair.substr(eq + 1);
      if (!info->keys.contains(key))
        fail("fault '{}': {} takes no key '{}'; allowed: {}", text, info->name, key,
             key_list(info->keys));
      if (!seen.insert(key).second) fail("fault '{}': '{}' given twice", text, key);
      if (key == "rank") {
        f.rank = int32_t(read_int(text, key, value, 0, 1 << 20));
      } else if (key == "step") {
        f.step = uint64_t(read_int(text, key, value, 1, int64_t(1) << 40));
      } else if (key == "ms") {
        f.ms = int32_t(read_int(text, key, value, 1, 600000));
      } else if (key == "count") {
        f.count = int32_t(read_int(text, key, value, 1, 1000000));
      } else if (key == "factor") {
        f.factor = read_factor(text, value);
      } else if (key == "message") {
        if (value == "execute") f.message = FaultMessage::execute;
        else if (value == "result") f.message = FaultMessage::result;
        else if (value == "grant" && f.kind == FaultKind::delay) f.message = FaultMessage::grant;
        else
          fail("fault '{}': message = '{}': allowed: execute (the step's plan, to the rank) or "
               "result (the rank's answer){}",
               text, value,
               f.kind == FaultKind::delay ? ", or grant (the cache manager's answer to the step's "
                                            "ask for KV blocks)"
                                          : "");
      }
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  }
  if (f.message == FaultMessage::grant && seen.contains("rank"))
    fail("fault '{}': message = grant is the head's cache manager's answer, not a rank's; give "
         "no rank",
         text);
  for (auto key : info->required)
    if (!seen.contains(key))
      fail("fault '{}': {} needs {} (e.g. {})", text, info->name, key,
           f.kind == FaultKind::slow   ? "slow:rank=0,factor=3"
           : f.kind == FaultKind::drop ? "drop:message=result,rank=0,step=5"
                                       : "delay:message=execute,rank=0,step=5,ms=200");
  return f;
}

std::vector<FaultSpec> parse_fault_specs(const std::vector<std::string>& texts) {
  std::vector<FaultSpec> out;
  out.reserve(texts.size());
  for (const std::string& t : texts) out.push_back(parse_fault_spec(t));
  return out;
}

void check_fault_layout(const std::vector<FaultSpec>& faults, const FaultLayout& layout) {
  const int32_t ranks = layout.tensor_parallel_size * layout.pipeline_parallel_size;
  for (const FaultSpec& f : faults) {
    if ((f.on_rank() || f.kind == FaultKind::drain) && f.rank >= ranks)
      fail("fault '{}': rank {} is outside [0, {}) (tensor_parallel_size {} x "
           "pipeline_parallel_size {})",
           f.text, f.rank, ranks, layout.tensor_parallel_size, layout.pipeline_parallel_size);
    if (f.kind == FaultKind::kill_worker && !layout.worker_processes)
      fail("fault '{}': the executor runs in this process, so there is no worker process to "
           "kill; use kill-executor, or run the ranks in worker processes (tensor or pipeline "
           "parallel, or executor_endpoints)",
           f.text);
    if (f.kind == FaultKind::drain && !layout.worker_processes)
      fail("fault '{}': the executor runs in this process, so there is no worker to move its "
           "rank to; allowed with worker processes (tensor or pipeline parallel)",
           f.text);
    if (f.kind == FaultKind::ucx_fail) {
      if (layout.pipeline_parallel_size < 2)
        fail("fault '{}': UCX carries pipeline-stage transfers, and pipeline_parallel_size is 1; "
             "allowed with pipeline_parallel_size >= 2",
             f.text);
      if (f.rank / layout.tensor_parallel_size == layout.pipeline_parallel_size - 1)
        fail("fault '{}': rank {} is on the last pipeline stage, which sends nothing over UCX; "
             "allowed: ranks 0 .. {}",
             f.text, f.rank, (layout.pipeline_parallel_size - 1) * layout.tensor_parallel_size - 1);
    }
  }
}

}  // namespace troupe
