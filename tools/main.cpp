// troupe: LLM inference and serving as an actor system.
//
//   troupe generate [--model DIR] [engine flags] [sampling flags] [--input F.jsonl|-]
//                   [--output F.jsonl] [PROMPT ...]
//   troupe tokenize [--tokenizer DIR] [--decode] TEXT ...
//   troupe serve    [MODEL] [engine flags] [--host H] [--port P] [--api-key K] [...]
//                   (the OpenAI-compatible server)
//   troupe worker   [--host H] [--port P]      (a remote executor for another process)
//   troupe bench latency|throughput [--input-len N] [--output-len N] [...] [--output-json F]
//   troupe launch CLUSTER.toml -- generate|bench ...   (the command on a cluster file's workers)
//   troupe --version
//
// --log-level may come anywhere on the line (before or after the subcommand).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include "tools/cli_args.hpp"
#include "tools/commands.hpp"

int main(int argc, char** argv) {
  // Logs go to stderr so that stdout carries only results (JSON lines, token ids).
  spdlog::set_default_logger(spdlog::stderr_color_mt("troupe"));
  spdlog::set_pattern("%^%L%$ %m-%d %H:%M:%S.%e %v");

  CLI::App app{"troupe: LLM inference and serving as an actor system", "troupe"};
  app.require_subcommand(1);
  // Subcommands inherit it: options of this level (--log-level) are accepted after them too.
  app.fallthrough();
  app.set_help_all_flag("--help-all", "help for every subcommand");
  app.set_version_flag("--version", troupe::cli::version_text());
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();

  std::map<const CLI::App*, troupe::cli::Runner> runners;
  auto add = [&](CLI::App* sub, troupe::cli::Runner r) { runners.emplace(sub, std::move(r)); };
  auto* generate = app.add_subcommand("generate", "generate text for prompts (offline batch)");
  add(generate, troupe::cli::add_generate_command(*generate));
  auto* tokenize = app.add_subcommand("tokenize", "print the token ids of texts (or decode ids)");
  add(tokenize, troupe::cli::add_tokenize_command(*tokenize));
  auto* serve = app.add_subcommand("serve", "the OpenAI-compatible API server (vllm serve)");
  add(serve, troupe::cli::add_serve_command(*serve));
  auto* worker = app.add_subcommand("worker", "serve an executor to another troupe process");
  add(worker, troupe::cli::add_worker_command(*worker));
  auto* bench = app.add_subcommand("bench", "benchmarks: latency, throughput, serving");
  add(bench, troupe::cli::add_bench_command(*bench));
  // Listed for --help; the line is rewritten before parsing (tools/launch_command.cpp).
  app.add_subcommand("launch", "CLUSTER.toml -- generate|bench ...: run on a cluster file's workers");

  std::vector<std::string> args(argv + 1, argv + argc);
  // vLLM's short forms, which CLI11 cannot name (one letter after a single dash).
  for (auto& a : args)
    for (const auto& [alias, flag] :
         {std::pair{"-tp", "--tensor-parallel-size"}, std::pair{"-pp", "--pipeline-parallel-size"},
          std::pair{"-dp", "--data-parallel-size"}})
      if (a == alias || a.starts_with(std::string(alias) + "="))
        a = flag + a.substr(std::string(alias).size());
  try {
    args = troupe::cli::rewrite_launch(troupe::join_boolean_values(args));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes it reversed
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e);
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      for (const auto& a : args)
        if (a.starts_with("--"))
          if (const std::string hint = troupe::suggest_option(app, a); !hint.empty())
            std::fprintf(stderr, "%s%s\n", a.c_str(), hint.c_str());
    }
    return status;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  try {
    for (const auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 1;
}
