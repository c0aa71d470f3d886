// The engine and sampling flags of the `troupe` command, registered from the EngineArgs and
// SamplingParams tables (runtime/config), so every field has its vLLM kebab-case flag.
//
// --help shows the flags troupe supports, each with the default that really applies (for the
// sampling fields a model's generation_config.json sets, that file's value first); the flags
// it does not support yet are listed once, compactly, at the end, and refused with "not
// supported yet" when given.
//
// Precedence, lowest first: the `base` values, then the file given by --config engine.toml,
// then the flags actually given on the command line. Every flag takes its value from one
// argument, so a flag never swallows a prompt: booleans take `--x`, `--no-x`, `--x=false` and
// `--x false` (see join_boolean_values); list flags take one value per occurrence (repeat the
// flag) and split it at commas, except free-text lists (--stop, --bad-words: one item each),
// or a JSON array. Two sampling flags are renamed because an engine flag has the name:
// --sampling-seed and --sampling-logits-processors.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "runtime/config/engine_args.hpp"
#include "runtime/config/sampling_params.hpp"

namespace troupe {

/// Every EngineArgs field (group "Engine") and --config FILE.
void add_engine_args(CLI::App& app);
/// Every SamplingParams field (group "Sampling").
void add_sampling_args(CLI::App& app);

/// After app.parse(): defaults (`base`), then --config, then the engine flags given; then
/// validate(). Legacy flags add a notice to `notices` (when not null) for the caller to log.
/// Throws troupe::Error naming the flag (or the file:line:column) on a bad value.
EngineArgs engine_args_from_cli(const CLI::App& app, std::vector<std::string>* notices = nullptr,
                                const EngineArgs& base = {});
/// The same for sampling: `base`, then the [sampling] table of --config, then the flags.
SamplingParams sampling_params_from_cli(const CLI::App& app, const SamplingParams& base = {});
/// Both at once, reading --config once; notices in the result.
EngineConfigFile config_from_cli(const CLI::App& app, const EngineArgs& base = {},
                                 const SamplingParams& sbase = {});

/// Rewrites `--x VALUE` into `--x=VALUE` when --x is the flag of a boolean EngineArgs or
/// SamplingParams field (not its `--no-x` form) and VALUE is true/false/yes/no/on/off (any
/// case), so CLI11 (whose flags take no separate value) does not read VALUE as a prompt.
/// Stops at "--". `args` excludes argv[0].
[[nodiscard]] std::vector<std::string> join_boolean_values(std::vector<std::string> args);

/// " (did you mean --temperature?)" for an unknown option close to one of `app`'s (or its
/// subcommands'), else "" (also for a known option).
[[nodiscard]] std::string suggest_option(const CLI::App& app, std::string_view unknown);

}  // namespace troupe
