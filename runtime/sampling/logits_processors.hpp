// Per-request logits processors (vLLM's SamplingParams.logits_processors), in two forms:
// - C++ callables (LogitsProcessorFn), for programs that embed troupe: they travel with the
//   request to in-process executors only (a callable cannot cross to a `troupe worker`);
// - processors named from plug-in shared libraries (logits_processor_plugin.h), for the command
//   line, JSON input, TOML and the server: the engine and every executor load the same plug-ins
//   (EngineArgs::logits_processor_plugin), and a request names "name" or "name:argument".
//
// How a processed row is sampled. The executor copies only the rows of sequences with
// processors to the host, runs the processors on a copy, and turns what they changed into
// logit-bias entries (new - old per changed token, -inf for a ban), which every backend already
// applies. So the logprobs a request gets stay the raw model's (vLLM V1's raw_logprobs), the
// processors act where vLLM applies them (before logit_bias, penalties and temperature), and the
// CUDA backend needs no new kernel: requests without processors run exactly as before.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

struct troupe_logits_processor;

namespace troupe {

/// A C++ logits processor: sees the prompt ids, the sequence's output ids so far and its logits
/// row [vocab] f32, and may change the row in place. Called on an executor thread; it may be
/// called for several sequences at once and must be thread-safe. Throwing fails the step.
class LogitsProcessorFn {
 public:
  using Signature = void(std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                         std::span<float> logits);
  LogitsProcessorFn() = default;
  template <class F>
  requires std::is_invocable_v<F&, std::span<const int32_t>, std::span<const int32_t>,
                               std::span<float>>
  LogitsProcessorFn(F f)  // NOLINT: implicit, so a lambda can be pushed as it is
      : fn_(std::make_shared<const std::function<Signature>>(std::move(f))) {}

  void operator()(std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                  std::span<float> logits) const {
    (*fn_)(prompt_ids, output_ids, logits);
  }
  [[nodiscard]] explicit operator bool() const { return fn_ != nullptr; }
  /// The same callable (copies share it).
  bool operator==(const LogitsProcessorFn&) const = default;

 private:
  std::shared_ptr<const std::function<Signature>> fn_;
};

/// A request's processor name split at its first ':' ("no_repeat_ngram:3" -> name, "3").
struct ProcessorSpec {
  std::string name;
  std::string argument;
};
[[nodiscard]] ProcessorSpec parse_processor_spec(std::string_view spec);

/// The processors of the plug-in libraries this process loaded. Immutable once made, so one
/// instance may serve several threads.
class LogitsProcessorPlugins {
 public:
  LogitsProcessorPlugins() = default;
  /// Loads every library (dlopen) and reads its table. Throws troupe::Error naming
  /// logits_processor_plugin and the path when a library cannot be loaded, lacks the entry
  /// point, refuses the ABI version, or repeats a name already loaded.
  explicit LogitsProcessorPlugins(const std::vector<std::string>& paths);
  ~LogitsProcessorPlugins();
  LogitsProcessorPlugins(const LogitsProcessorPlugins&) = delete;
  LogitsProcessorPlugins& operator=(const LogitsProcessorPlugins&) = delete;

  /// Throws troupe::Error naming logits_processors, the spec and what is loaded when the name
  /// is unknown or the plug-in refuses the argument.
  void check(std::string_view spec) const;
  /// Runs processor `spec` on `logits` [vocab]. Throws troupe::Error with the plug-in's message.
  void apply(std::string_view spec, std::span<const int32_t> prompt_ids,
             std::span<const int32_t> output_ids, std::span<float> logits) const;
  /// "name (description)" of every loaded processor, sorted by name.
  [[nodiscard]] std::vector<std::string> describe() const;
  [[nodiscard]] bool empty() const { return by_name_.empty(); }

 private:
  struct Library;
  [[nodiscard]] const troupe_logits_processor& find(const std::string& name,
                                                    std::string_view spec) const;
  std::vector<std::unique_ptr<Library>> libraries_;
  std::map<std::string, const troupe_logits_processor*> by_name_;
};

/// Appends a bias entry for every token whose logit `after` differs from `before` (both
/// [vocab]): -inf where `after` is -inf, else the float d for which before + d == after (to the
/// last bit where such a d exists; the nearest one otherwise). NaN in `after` throws
/// troupe::Error naming `who`.
void append_changes_as_bias(std::span<const float> before, std::span<const float> after,
                            std::vector<std::pair<int32_t, float>>& bias, std::string_view who);

}  // namespace troupe
