// troupe serve: the OpenAI-compatible server, a drop-in for `vllm serve`.
//
//   troupe serve [MODEL] [--model DIR] [engine flags] [--host H] [--port P] [--api-key K]
//                [--served-model-name NAME ...] [--chat-template FILE] [...]
//
// Every engine flag of `troupe generate` (vLLM's names), plus the server's own (vLLM's
// FrontendArgs: runtime/openai/server_args.hpp). With no model it serves the embedded one. It
// runs until SIGINT or SIGTERM (in-flight requests get --shutdown-timeout seconds, then it exits
// 0) or until the engine can no longer serve: then /health answers 503, in-flight streams end
// with an error event and the process exits 1, so a supervisor restarts it (vLLM exits 0).
#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <sys/resource.h>
#include <csignal>
#include <cstdlib>
#include <ctime>

#include "actors/api_server.hpp"
#include "actors/engine.hpp"
#include "actors/messages.hpp"
#include "runtime/checkpoint/generation_config.hpp"
#include "runtime/error.hpp"
#include "tools/cli_args.hpp"
#include "tools/commands.hpp"
#include "troupe_version.hpp"  // generated at build time by cmake/troupe_version.cmake

namespace troupe::cli {

namespace {

/// Many streams need many sockets: the soft file limit goes up to the hard one (vLLM's
/// set_ulimit does the same).
void raise_open_file_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  const auto before = r.rlim_cur;
  r.rlim_cur = r.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &r) == 0)
    spdlog::debug("serve: open file limit {} -> {}", before, r.rlim_cur);
}

openai::SamplingDefaults sampling_defaults(const EngineArgs& args) {
  GenerationConfig g;
  if (args.generation_config == "auto")
    g = load_generation_config(args.model);
  else if (args.generation_config != "vllm")
    g = load_generation_config(args.generation_config);
  openai::SamplingDefaults d;
  d.temperature = g.temperature;
  d.top_p = g.top_p;
  d.top_k = g.top_k;
  d.repetition_penalty = g.repetition_penalty;
  d.max_tokens = g.max_new_tokens;
  return d;
}

int run_serve(const CLI::App& app, const std::string& model_tag) {
  // Signals are taken by this thread alone (sigtimedwait below): block them before any other
  // thread starts, so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  raise_open_file_limit();

  std::vector<std::string> notices;
  EngineArgs defaults;
  defaults.model = default_model_dir();
  EngineArgs args = engine_args_from_cli(app, &notices, defaults);
  if (!model_tag.empty()) {
    const CLI::Option* m = app.get_option_no_throw("--model");
    if (m && m->count() > 0 && args.model != model_tag)
      fail("model: given twice, as '{}' and --model '{}'", model_tag, args.model);
    args.model = model_tag;
  }
  const openai::ServerArgs sargs = server_args_from_cli(app, &notices);
  for (const auto& n : notices) spdlog::warn("{}", n);

  ApiServerConfig config;
  config.args = sargs;
  config.served_model_names = args.served_model_name.empty() ? std::vector<std::string>{args.model}
                                                             : args.served_model_name;
  config.model_root = args.model;
  config.api_keys = sargs.api_key;
  if (const char* key = std::getenv("VLLM_API_KEY"); key && *key) config.api_keys.emplace_back(key);
  if (sargs.chat_template) config.chat_template = load_chat_template_arg(*sargs.chat_template);
  config.sampling_defaults = sampling_defaults(args);
  config.max_num_seqs = args.max_num_seqs;
  config.log_requests = args.enable_log_requests;
  config.version = TROUPE_VERSION;

  caf::actor_system_config cfg;
  register_message_types(cfg);
  set_scheduler(cfg, computes_on_cpu(args));
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(500)});
  caf::actor_system sys{cfg};
  int status = 0;
  {
    Engine engine(sys, args);
    {
      ApiServer server(sys, engine, config);  // logs the address it listens on
      // Wait for a signal, or for the engine to fail.
      for (;;) {
        timespec tick{0, 100'000'000};
        const int sig = sigtimedwait(&signals, nullptr, &tick);
        if (sig == SIGINT || sig == SIGTERM) {
          spdlog::info("serve: {} received: finishing in-flight requests (up to {} s)",
                       sig == SIGINT ? "SIGINT" : "SIGTERM", sargs.shutdown_timeout);
          server.stop(std::chrono::milliseconds(int64_t(sargs.shutdown_timeout * 1000)));
          break;
        }
        if (!server.healthy()) {
          spdlog::error("serve: the engine failed ({}); exiting with status 1", server.failure());
          // In-flight streams got their error events from the failed outputs; let them drain.
          server.stop(std::chrono::milliseconds(2000));
          status = 1;
          break;
        }
      }
    }
  }
  return status;
}

}  // namespace

Runner add_serve_command(CLI::App& app) {
  auto model_tag = std::make_shared<std::string>();
  app.add_option("model_tag", *model_tag,
                 "The model directory (as in `vllm serve MODEL`); same as --model. Default: the "
                 "embedded model.");
  add_engine_args(app);
  add_server_args(app);
  return [&app, model_tag] { return run_serve(app, *model_tag); };
}

}  // namespace troupe::cli
