// The engine and sampling flags of the `troupe` command, registered from the EngineArgs and
// SamplingParams tables (runtime/config), so every field has its vLLM kebab-case flag and
// --help lists them all with their defaults.
//
// Precedence, lowest first: the `base` values, then the file given by --config engine.toml,
// then the flags actually given on the command line. Booleans take vLLM's forms
// (--enforce-eager / --no-enforce-eager); list flags take several values and may repeat
// (--stop a --stop b, --stop-token-ids 1 2 3). Two sampling flags are renamed because an
// engine flag has the name: --sampling-seed and --sampling-logits-processors.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "runtime/config/engine_args.hpp"
#include "runtime/config/sampling_params.hpp"
#include "runtime/openai/server_args.hpp"

namespace troupe {

/// Every EngineArgs field (group "Engine") and --config FILE.
void add_engine_args(CLI::App& app);
/// Every SamplingParams field (group "Sampling").
void add_sampling_args(CLI::App& app);
/// Every ServerArgs field (group "Server"): the flags `troupe serve` adds to the engine's.
void add_server_args(CLI::App& app);

/// After app.parse(): defaults (`base`), then --config, then the engine flags given; then
/// validate(). Legacy flags add a notice to `notices` (when not null) for the caller to log.
/// Throws troupe::Error naming the flag (or the file:line:column) on a bad value.
EngineArgs engine_args_from_cli(const CLI::App& app, std::vector<std::string>* notices = nullptr,
                                const EngineArgs& base = {});
/// The same for sampling: `base`, then the [sampling] table of --config, then the flags.
SamplingParams sampling_params_from_cli(const CLI::App& app, const SamplingParams& base = {});
/// The server flags given, over the defaults; validated. Accepted-but-inert flags add a notice.
openai::ServerArgs server_args_from_cli(const CLI::App& app,
                                        std::vector<std::string>* notices = nullptr);
/// Both at once, reading --config once; notices in the result.
EngineConfigFile config_from_cli(const CLI::App& app, const EngineArgs& base = {},
                                 const SamplingParams& sbase = {});

}  // namespace troupe
