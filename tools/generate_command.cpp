// troupe generate: offline batch generation, the command-line face of troupe::LLM.
//
// Prompts come from the arguments or from --input (JSON lines: {"prompt": "..."} or
// {"prompt_token_ids": [...]}, optionally with per-request SamplingParams fields). Results are
// JSON lines in input order, to --output or stdout:
//   {"prompt": ..., "prompt_token_ids": [...], "outputs": [{"index": 0, "text": ...,
//    "token_ids": [...], "cumulative_logprob": ... (null without --logprobs),
//    "finish_reason": "length"|"stop"}]}
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>

#include "actors/engine.hpp"
#include "actors/llm.hpp"
#include "runtime/api/outputs_json.hpp"
#include "runtime/error.hpp"
#include "tools/cli_args.hpp"
#include "tools/commands.hpp"

namespace troupe::cli {

namespace {

struct Input {
  Prompt prompt;
  nlohmann::json overrides;  // per-request SamplingParams fields (object or null)
};

std::vector<Input> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("--input {}: cannot open the file", path);
  std::vector<Input> out;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail("--input {}:{}: not JSON ({})", path, lineno, e.what());
    }
    if (!j.is_object()) fail("--input {}:{}: expected a JSON object", path, lineno);
    Input item;
    if (j.contains("prompt_token_ids")) {
      const auto& ids = j["prompt_token_ids"];
      if (!ids.is_array() || ids.empty())
        fail("--input {}:{}: prompt_token_ids must be a non-empty array of token ids", path,
             lineno);
      for (const auto& v : ids) {
        if (!v.is_number_integer())
          fail("--input {}:{}: prompt_token_ids holds {}, not a token id", path, lineno,
               v.dump());
        item.prompt.token_ids.push_back(v.get<int32_t>());
      }
      j.erase("prompt_token_ids");
      if (j.contains("prompt") && j["prompt"].is_string())
        item.prompt.text = j["prompt"].get<std::string>();
      j.erase("prompt");
    } else if (j.contains("prompt")) {
      if (!j["prompt"].is_string()) fail("--input {}:{}: prompt must be a string", path, lineno);
      item.prompt.text = j["prompt"].get<std::string>();
      j.erase("prompt");
    } else {
      fail("--input {}:{}: needs \"prompt\" or \"prompt_token_ids\"", path, lineno);
    }
    if (!j.empty()) item.overrides = std::move(j);
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> prompts;
    std::string input, output;
    bool no_progress = false;
  };
  auto o = std::make_shared<Options>();
  add_engine_args(app);
  add_sampling_args(app);
  auto* io = &app;
  io->add_option("--input", o->input,
                 "JSON lines file: {\"prompt\": ...} or {\"prompt_token_ids\": [...]}, plus "
                 "optional SamplingParams fields per line")
      ->group("Input/output");
  io->add_option("--output", o->output, "write JSON lines here (default: stdout)")
      ->group("Input/output");
  io->add_flag("--disable-progress-bar", o->no_progress, "no progress bar on stderr")
      ->group("Input/output");
  io->add_option("prompts", o->prompts, "prompts (besides or instead of --input)");

  return [o, &app] {
    std::vector<std::string> notices;
    EngineArgs defaults;
    defaults.model = default_model_dir();  // the embedded checkpoint unless --model is given
    EngineArgs engine_args = engine_args_from_cli(app, &notices, defaults);
    for (const auto& n : notices) spdlog::warn("{}", n);

    std::vector<Input> inputs;
    if (!o->input.empty()) inputs = read_jsonl(o->input);
    for (const auto& p : o->prompts) inputs.push_back(Input{Prompt(p), nullptr});
    if (inputs.empty()) fail("no prompts: give PROMPT arguments or --input FILE.jsonl");

    std::ofstream file;
    if (!o->output.empty()) {
      file.open(o->output);
      if (!file) fail("--output {}: cannot open the file for writing", o->output);
    }

    LLM llm(std::move(engine_args));
    // Sampling: the model's generation_config defaults, then the flags given, then each
    // input line's own fields.
    const SamplingParams base = sampling_params_from_cli(app, llm.get_default_sampling_params());
    std::vector<Prompt> prompts;
    std::vector<SamplingParams> params;
    for (size_t i = 0; i < inputs.size(); ++i) {
      prompts.push_back(inputs[i].prompt);
      try {
        params.push_back(inputs[i].overrides.is_null()
                             ? base
                             : sampling_params_from_json(inputs[i].overrides, base));
      } catch (const std::exception& e) {
        fail("--input line {}: {}", i + 1, e.what());
      }
    }
    GenerateOptions opts;
    opts.use_tqdm = !o->no_progress;
    const auto outputs = llm.generate(prompts, params, opts);
    std::ostream& out = o->output.empty() ? std::cout : file;
    for (const auto& r : outputs) {
      nlohmann::ordered_json j = to_json(r);
      j.erase("request_id");
      out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    out.flush();
    return 0;
  };
}

}  // namespace troupe::cli
