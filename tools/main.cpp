// troupe: LLM inference and serving as an actor system.
//
//   troupe generate [--model DIR] [engine flags] [sampling flags] [--input F.jsonl]
//                   [--output F.jsonl] [PROMPT ...]
//   troupe tokenize [--tokenizer DIR] [--decode] TEXT ...
//   troupe serve    [MODEL] [engine flags] [--host H] [--port P] [--api-key K] [...]
//                   (the OpenAI-compatible server)
//   troupe worker   [--host H] [--port P]      (a remote executor for another process)
//   troupe bench latency|throughput [--input-len N] [--output-len N] [...] [--output-json F]
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>
#include <map>

#include "tools/commands.hpp"

int main(int argc, char** argv) {
  // Logs go to stderr so that stdout carries only results (JSON lines, token ids).
  spdlog::set_default_logger(spdlog::stderr_color_mt("troupe"));
  spdlog::set_pattern("%^%L%$ %m-%d %H:%M:%S.%e %v");

  CLI::App app{"troupe: LLM inference and serving as an actor system"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
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
