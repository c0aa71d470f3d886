// troupe generate: offline batch generation, the command-line face of troupe::LLM.
//
// Prompts come from the arguments or from --input (JSON lines: {"prompt": "..."} or
// {"prompt_token_ids": [...]}, optionally with per-request SamplingParams fields; `-` reads
// standard input; runtime/api/generate_input.hpp reads them). Results are JSON lines, to
// --output or stdout:
//   {"request_id": "0" (the input's position, as vLLM numbers offline requests),
//    "prompt": ..., "prompt_token_ids": [...], "outputs": [{"index": 0, "text": ...,
//    "token_ids": [...], "cumulative_logprob": ... (null without --logprobs),
//    "finish_reason": "length"|"stop", "stop_reason": ...}]}
//
// Nothing finished is lost:
// - each result is written (and flushed) as soon as it is complete: in input order as far as
//   the finished prefix allows (--output-order input, the default), or as they finish
//   (--output-order completion);
// - --output is opened, and an existing file truncated, only when the first result is ready,
//   so a run that fails or is stopped before that leaves the old file as it was (whether the
//   file can be written is checked before the model loads);
// - on a fatal error (an executor lost) every result that finished is written, then the
//   command exits 1 with the reason; requests that failed are not written;
// - once generation has started, Ctrl-C (SIGINT) or SIGTERM aborts the requests still
//   running, writes every result that finished and exits 130 (143 for SIGTERM); a second
//   Ctrl-C kills at once. While the model loads they end the process as usual.
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "actors/cluster_launch.hpp"
#include "actors/engine.hpp"
#include "actors/llm.hpp"
#include "runtime/api/generate_input.hpp"
#include "runtime/api/outputs_json.hpp"
#include "runtime/error.hpp"
#include "tools/cli_args.hpp"
#include "tools/commands.hpp"

namespace troupe::cli {

namespace {

std::vector<GenerateInput> read_input(const std::string& path) {
  if (path == "-") return read_generate_input(std::cin, "<stdin>");
  std::ifstream in(path);
  if (!in) fail("--input {}: cannot open the file", path);
  return read_generate_input(in, path);
}

/// Fails now, before the model loads, when `path` could not be written later.
void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) fail("--output {}: is a directory", path);
  if (fs::exists(p, ec)) {
    if (access(path.c_str(), W_OK) != 0)
      fail("--output {}: cannot write the file ({})", path, std::strerror(errno));
    return;
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) fail("--output {}: no directory {}", path, dir.string());
  if (access(dir.c_str(), W_OK) != 0)
    fail("--output {}: cannot create files in {} ({})", path, dir.string(), std::strerror(errno));
}

/// Writes result lines as they become ready (see the header comment for the order and when
/// the file is opened). Requests that failed or were aborted are skipped.
class ResultWriter {
 public:
  ResultWriter(std::string path, size_t total, bool input_order)
      : path_(std::move(path)), input_order_(input_order), lines_(total), resolved_(total) {}
  ~ResultWriter() {
    if (file_ != nullptr && file_ != stdout) std::fclose(file_);
  }
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;

  void add(size_t index, const RequestOutput& out) {
    resolved_[index] = true;
    ++returned_;
    bool complete = out.error.empty();
    for (const auto& c : out.outputs) complete = complete && c.finish_reason != "abort";
    if (complete) {
      nlohmann::ordered_json j = to_json(out);
      j["request_id"] = std::to_string(index);
      lines_[index] = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    if (!input_order_) {
      if (lines_[index]) write(index);
      return;
    }
    while (next_ < lines_.size() && resolved_[next_]) {
      if (lines_[next_]) write(next_);
      ++next_;
    }
  }

  /// Writes every finished result not written yet (those behind an unfinished one), in order.
  void flush_all() {
    for (size_t i = 0; i < lines_.size(); ++i)
      if (lines_[i]) write(i);
  }

  [[nodiscard]] size_t written() const { return written_; }
  [[nodiscard]] size_t returned() const { return returned_; }

 private:
  void write(size_t index) {
    if (file_ == nullptr) {
      file_ = path_.empty() ? stdout : std::fopen(path_.c_str(), "w");
      if (file_ == nullptr)
        fail("--output {}: cannot open the file for writing ({})", path_, std::strerror(errno));
    }
    const std::string& line = *lines_[index];
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() ||
        std::fputc('\n', file_) == EOF || std::fflush(file_) != 0)
      fail("--output {}: write failed ({})", path_.empty() ? "<stdout>" : path_,
           std::strerror(errno));
    lines_[index].reset();  // written: keep no copy
    ++written_;
  }

  std::string path_;
  bool input_order_;
  std::FILE* file_ = nullptr;
  std::vector<std::optional<std::string>> lines_;  // ready, not yet written
  std::vector<bool> resolved_;                     // came back (finished, failed or aborted)
  size_t next_ = 0;                                // input order: the first not written yet
  size_t written_ = 0, returned_ = 0;
};

// Set by the signal handler; read by LLM::generate (GenerateOptions::cancel).
std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

void on_stop_signal(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
  std::signal(sig, SIG_DFL);  // a second one stops the process at once
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> prompts;
    std::string input, output, output_order = "input";
    bool no_progress = false;
  };
  auto o = std::make_shared<Options>();
  add_engine_args(app);
  add_sampling_args(app);
  app.add_option("--input", o->input,
                 "JSON lines file (- reads standard input): {\"prompt\": ...} or "
                 "{\"prompt_token_ids\": [...]}, plus optional SamplingParams fields per line")
      ->group("Input/output");
  app.add_option("--output", o->output,
                 "write the JSON lines here, each as soon as it is ready; the file is replaced "
                 "when the first result is ready, not before. Default: standard output")
      ->group("Input/output");
  app.add_option("--output-order", o->output_order,
                 "input: results in input order, each written once those before it are; "
                 "completion: each as it finishes (request_id gives its input position)")
      ->check(CLI::IsMember({"input", "completion"}))
      ->capture_default_str()
      ->group("Input/output");
  app.add_flag("--disable-progress-bar", o->no_progress, "no progress bar on stderr")
      ->group("Input/output");
  app.add_option("prompts", o->prompts, "prompts (besides or instead of --input)");

  return [o, &app]() -> int {
    std::vector<std::string> notices;
    EngineArgs engine_args = engine_args_from_cli(app, &notices);
    for (const auto& n : notices) spdlog::warn("{}", n);
    // A node past 0 of vLLM's multi-node flags runs its workers only; the head has the prompts.
    if (engine_args.headless) return run_headless_node(engine_args);

    std::vector<GenerateInput> inputs;
    if (!o->input.empty()) inputs = read_input(o->input);
    for (const auto& p : o->prompts)
      inputs.push_back(GenerateInput{p, {}, nullptr, fmt::format("prompt {}", inputs.size())});
    if (inputs.empty()) fail("no prompts: give PROMPT arguments or --input FILE.jsonl");
    if (!o->output.empty()) check_writable(o->output);

    LLM llm(std::move(engine_args));
    // Sampling: the model's generation_config defaults, then the flags given, then each
    // input line's own fields.
    const SamplingParams base = sampling_params_from_cli(app, llm.get_default_sampling_params());
    std::vector<Prompt> prompts;
    std::vector<SamplingParams> params;
    for (const auto& in : inputs) {
      Prompt prompt(in.text);
      prompt.token_ids = in.token_ids;
      prompts.push_back(std::move(prompt));
      params.push_back(input_sampling_params(in, base));
    }

    // From here on a signal stops generation cleanly; before, while the model loads, there
    // is nothing to keep and it ends the process as usual.
    g_stop.store(false);
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    ResultWriter writer(o->output, inputs.size(), o->output_order == "input");
    GenerateOptions opts;
    opts.use_tqdm = !o->no_progress;
    opts.cancel = &g_stop;
    try {
      llm.generate(
          prompts, params, [&](size_t i, RequestOutput&& out) { writer.add(i, out); }, opts);
    } catch (const Error& e) {
      writer.flush_all();
      if (writer.returned() == 0) throw;  // refused before anything ran
      fail("{} ({} of {} results written)", e.what(), writer.written(), inputs.size());
    }
    writer.flush_all();
    if (g_stop.load()) {
      const int sig = g_signal.load();
      spdlog::warn("generate: stopped by {}: {} of {} results written", strsignal(sig),
                   writer.written(), inputs.size());
      return 128 + sig;
    }
    return 0;
  };
}

}  // namespace troupe::cli
