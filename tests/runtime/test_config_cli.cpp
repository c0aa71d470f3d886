// tools/cli_args: flags registered from the tables, parsed from fake argv; precedence
// defaults < --config file < flags; vLLM's boolean and list forms; errors naming the flag.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "tools/cli_args.hpp"

using Catch::Matchers::Contains;

namespace {

/// An app with both flag groups and positional prompts, parsed from `args` (without the
/// program name) as tools/main.cpp does.
struct Cli {
  CLI::App app{"test"};
  std::vector<std::string> prompts;
  explicit Cli(std::vector<std::string> args) {
    troupe::add_engine_args(app);
    troupe::add_sampling_args(app);
    app.add_option("prompts", prompts);
    args = troupe::join_boolean_values(std::move(args));
    std::reverse(args.begin(), args.end());  // CLI11 takes the vector back to front
    app.parse(args);
  }
};

struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& text) {
    path = std::filesystem::temp_directory_path() /
           ("troupe_test_cli_" + std::to_string(reinterpret_cast<uintptr_t>(this)) + ".toml");
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

std::string cli_error(std::vector<std::string> args) {
  Cli cli(std::move(args));
  try {
    (void)troupe::config_from_cli(cli.app);
  } catch (const troupe::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every table row has its flag, and the two groups do not collide", "[config]") {
  Cli cli({});
  for (const auto* table : {&troupe::engine_arg_fields(), &troupe::sampling_param_fields(),
                            &troupe::beam_search_fields()}) {
    for (const auto& f : *table) {
      INFO(f.name);
      const CLI::Option* opt = cli.app.get_option_no_throw("--" + std::string(f.flag));
      REQUIRE(opt != nullptr);
      if (f.arity == troupe::FieldInfo::Arity::flag) {
        CHECK(cli.app.get_option_no_throw("--no-" + std::string(f.flag)) == opt);
      }
    }
  }
  CHECK(cli.app.get_option_no_throw("--config") != nullptr);
}

TEST_CASE("no flags: the defaults", "[config]") {
  Cli cli({"--model", "m"});
  std::vector<std::string> notices;
  auto a = troupe::engine_args_from_cli(cli.app, &notices);
  CHECK(a == troupe::EngineArgs{.model = "m"});
  CHECK(troupe::sampling_params_from_cli(cli.app) == troupe::SamplingParams{});
  CHECK(notices.empty());
}

TEST_CASE("flags set EngineArgs in vLLM's forms", "[config]") {
  Cli cli({"--model",
           "/ckpt",
           "--max-num-seqs",
           "64",
           "--max-model-len",
           "4K",
           "--enforce-eager",
           "--no-enable-prefix-caching",
           "--dtype",
           "half",
           "--served-model-name",
           "a",
           "--served-model-name",
           "b",
           "--executor-endpoints",
           "h:1",
           "--executor-endpoints",
           "h:2",
           "--max-log-len=100",
           "--enable-chunked-prefill=false"});
  auto a = troupe::engine_args_from_cli(cli.app);
  CHECK(a.model == "/ckpt");
  CHECK(a.max_num_seqs == 64);
  CHECK(a.max_model_len == 4096);
  CHECK(a.enforce_eager);
  CHECK_FALSE(a.enable_prefix_caching);
  CHECK(a.dtype == "half");
  CHECK(a.served_model_name == std::vector<std::string>{"a", "b"});
  CHECK(a.executor_endpoints == std::vector<std::string>{"h:1", "h:2"});
  CHECK(a.max_log_len == 100);
  CHECK_FALSE(a.enable_chunked_prefill);
}

TEST_CASE("the last of --x / --no-x wins, as with argparse", "[config]") {
  Cli cli({"--model", "m", "--no-enforce-eager", "--enforce-eager", "--block-size", "8",
           "--block-size", "32"});
  auto a = troupe::engine_args_from_cli(cli.app);
  CHECK(a.enforce_eager);
  CHECK(a.block_size == 32);
  Cli cli2({"--model", "m", "--enforce-eager", "--no-enforce-eager"});
  CHECK_FALSE(troupe::engine_args_from_cli(cli2.app).enforce_eager);
}

TEST_CASE("sampling flags, with list flags repeated or given several values", "[config]") {
  Cli cli({"--temperature",
           "0.5",
           "--top-p",
           "0.9",
           "--top-k",
           "-1",
           "--stop",
           "a",
           "--stop",
           "b c",
           "--stop-token-ids",
           "1,2",
           "--stop-token-ids",
           "3",
           "--stop-token-ids",
           "4,5",
           "--sampling-seed",
           "11",
           "--max-tokens",
           "None",
           "--logit-bias",
           "7:1.5",
           "--no-skip-special-tokens",
           "--n",
           "2"});
  auto p = troupe::sampling_params_from_cli(cli.app);
  CHECK(p.temperature == 0.5);
  CHECK(p.top_p == 0.9);
  CHECK(p.top_k == -1);
  CHECK(p.stop == std::vector<std::string>{"a", "b c"});
  CHECK(p.stop_token_ids == std::vector<int32_t>{1, 2, 3, 4, 5});
  CHECK(p.seed == 11);
  CHECK_FALSE(p.max_tokens);
  CHECK(p.logit_bias.at(7) == 1.5);
  CHECK_FALSE(p.skip_special_tokens);
  CHECK(p.n == 2);
}

TEST_CASE("precedence: defaults < --config file < flags", "[config]") {
  TempFile file(
      "model = \"from-file\"\nmax_num_seqs = 64\nblock_size = 32\nenforce_eager = true\n"
      "[sampling]\ntemperature = 0.5\ntop_p = 0.8\n");
  Cli cli({"--config", file.path.string(), "--max-num-seqs", "128", "--no-enforce-eager", "--top-p",
           "0.95"});
  auto c = troupe::config_from_cli(cli.app);
  CHECK(c.engine.model == "from-file");  // file over default
  CHECK(c.engine.max_num_seqs == 128);   // flag over file
  CHECK(c.engine.block_size == 32);      // file over default
  CHECK_FALSE(c.engine.enforce_eager);   // flag over file
  CHECK(c.engine.swap_space == 4.0);     // default
  CHECK(c.sampling.temperature == 0.5);  // file
  CHECK(c.sampling.top_p == 0.95);       // flag over file
  CHECK(troupe::engine_args_from_cli(cli.app) == c.engine);
  CHECK(troupe::sampling_params_from_cli(cli.app) == c.sampling);
}

TEST_CASE("a flag may fix what the file set, validation runs on the result", "[config]") {
  TempFile file("model = \"m\"\nmax_num_seqs = 512\nmax_num_batched_tokens = 256\n");
  Cli fixed({"--config", file.path.string(), "--max-num-seqs", "128"});
  CHECK(troupe::engine_args_from_cli(fixed.app).max_num_seqs == 128);
  Cli broken({"--config", file.path.string()});
  CHECK_THROWS_WITH(troupe::engine_args_from_cli(broken.app),
                    Contains("max_num_batched_tokens = 256: allowed: >= max_num_seqs"));
}

TEST_CASE("command-line errors name the flag, file errors the file and line", "[config]") {
  CHECK_THAT(cli_error({"--model", "m", "--max-num-seqs", "0"}),
             Contains("--max-num-seqs = 0: allowed: >= 1"));
  CHECK_THAT(cli_error({"--model", "m", "--max-num-seqs", "lots"}),
             Contains("--max-num-seqs = lots: expected an integer"));
  CHECK_THAT(cli_error({"--model", "m", "--data-parallel-size", "2"}),
             Contains("--data-parallel-size = 2: not supported yet in troupe (data parallelism"));
  CHECK_THAT(cli_error({"--model", "m", "--enable-lora"}),
             Contains("--enable-lora = true: not supported yet in troupe"));
  CHECK_THAT(cli_error({"--model", "m", "--dtype", "int8"}),
             Contains("--dtype = \"int8\": allowed:"));
  CHECK_THAT(cli_error({"--model", "m", "--top-p", "0"}),
             Contains("--top-p = 0.0: allowed: (0, 1]"));
  CHECK_THAT(cli_error({"--model", "m", "--flat-logprobs"}),
             Contains("--flat-logprobs = true: not supported yet"));
  // Beam search's flags: its rules by name, never an unknown option.
  CHECK_THAT(cli_error({"--model", "m", "--use-beam-search"}),
             Contains("best_of = 1: allowed: >= 2 with use_beam_search"));
  CHECK_THAT(cli_error({"--model", "m", "--use-beam-search", "--best-of", "2"}),
             Contains("temperature = 1: allowed: 0 with use_beam_search"));
  CHECK(cli_error({"--model", "m", "--use-beam-search", "--temperature", "0", "--best-of", "4",
                   "--length-penalty", "0.5", "--early-stopping", "never"})
            .empty());
  CHECK_THAT(cli_error({"--model", "m", "--length-penalty", "0.5"}),
             Contains("length_penalty = 0.5: allowed: 1.0 without use_beam_search"));
  CHECK_THAT(cli_error({"--model", "m", "--early-stopping", "true"}),
             Contains("early_stopping = true: allowed: false without use_beam_search"));
  CHECK_THAT(cli_error({"--model", "m", "--early-stopping", "sometimes"}),
             Contains("--early-stopping = \"sometimes\": allowed: true, false or \"never\""));
  CHECK_THAT(cli_error({"--model", "m", "--beam-width", "4"}),
             Contains("--beam-width = 4: not supported yet in troupe"));
  CHECK(cli_error({"--model", "m", "--no-use-beam-search", "--length-penalty", "1"}).empty());
  CHECK_THAT(cli_error({"--model", "m", "--bad-words", " "}),
             Contains("--bad-words = [\" \"]: allowed: words with a character other than "
                      "whitespace"));
  CHECK_THAT(cli_error({"--config", "/nonexistent/engine.toml"}),
             Contains("--config /nonexistent/engine.toml: cannot open"));
  TempFile file("model = \"m\"\nblock_sise = 8\n");
  CHECK_THAT(cli_error({"--config", file.path.string()}),
             Contains(file.path.string() + ":2:1: unknown key 'block_sise'"));
}

TEST_CASE("legacy flags on the command line give notices", "[config]") {
  Cli cli({"--model", "m", "--worker-use-ray", "--engine-use-ray", "--max-paddings", "256",
           "--disable-log-requests", "--use-v2-block-manager", "--max-context-len-to-capture",
           "1024"});
  std::vector<std::string> notices;
  auto a = troupe::engine_args_from_cli(cli.app, &notices);
  CHECK_FALSE(a.enable_log_requests);
  CHECK(a.max_seq_len_to_capture == 1024);
  REQUIRE(notices.size() == 6);
  std::string all;
  for (const auto& n : notices) all += n + "\n";
  CHECK_THAT(all, Contains("--worker-use-ray: no Ray"));
  CHECK_THAT(all, Contains("--engine-use-ray: no Ray"));
  CHECK_THAT(all, Contains("--max-paddings: no effect"));
  CHECK_THAT(all, Contains("--disable-log-requests: vLLM renamed it"));
  CHECK_THAT(all, Contains("--use-v2-block-manager: no effect"));
  CHECK_THAT(all, Contains("old name of --max-seq-len-to-capture"));
}

TEST_CASE("a list flag takes one value per occurrence and leaves the prompts alone", "[config]") {
  // issue 21: `--stop . "Once upon a time"` generated for no prompt.
  Cli stop({"--stop", ".", "Once upon a time"});
  CHECK(troupe::sampling_params_from_cli(stop.app).stop == std::vector<std::string>{"."});
  CHECK(stop.prompts == std::vector<std::string>{"Once upon a time"});
  // Repeated, or commas in one value; stop strings keep their commas (one item each).
  Cli lists({"--stop-token-ids", "1,2", "--stop-token-ids", "3", "--stop", "a, b", "--stop", "c",
             "--executor-endpoints", "h:1,h:2", "--executor-endpoints", "h:3",
             "--served-model-name", "x,y", "--logit-bias", "5:1,6:-2", "p1", "p2"});
  const auto p = troupe::sampling_params_from_cli(lists.app);
  CHECK(p.stop_token_ids == std::vector<int32_t>{1, 2, 3});
  CHECK(p.stop == std::vector<std::string>{"a, b", "c"});
  CHECK(p.logit_bias == std::map<int32_t, double>{{5, 1.0}, {6, -2.0}});
  const auto a = troupe::engine_args_from_cli(lists.app);
  CHECK(a.executor_endpoints == std::vector<std::string>{"h:1", "h:2", "h:3"});
  CHECK(a.served_model_name == std::vector<std::string>{"x", "y"});
  CHECK(lists.prompts == std::vector<std::string>{"p1", "p2"});
  // A JSON array is one value too.
  Cli json({"--stop", R"(["x,y", "z"])", "p"});
  CHECK(troupe::sampling_params_from_cli(json.app).stop == std::vector<std::string>{"x,y", "z"});
  CHECK(json.prompts == std::vector<std::string>{"p"});
}

TEST_CASE("boolean flags: --x, --no-x, --x=false and --x false alike, never a prompt", "[config]") {
  for (const std::vector<std::string>& off :
       {std::vector<std::string>{"--enforce-eager", "false", "false"},
        std::vector<std::string>{"--enforce-eager=false", "false"},
        std::vector<std::string>{"--no-enforce-eager", "false"},
        std::vector<std::string>{"--enforce-eager", "FALSE", "false"},
        std::vector<std::string>{"--enforce-eager", "off", "false"}}) {
    Cli cli(off);
    INFO(off[0] << " " << off[1]);
    CHECK_FALSE(troupe::engine_args_from_cli(cli.app).enforce_eager);
    CHECK(cli.prompts == std::vector<std::string>{"false"});  // the last "false" is a prompt
  }
  for (const std::vector<std::string>& on :
       {std::vector<std::string>{"--enforce-eager", "true", "p"},
        std::vector<std::string>{"--enforce-eager=true", "p"},
        std::vector<std::string>{"--enforce-eager", "p"},
        std::vector<std::string>{"--enforce-eager", "yes", "p"}}) {
    Cli cli(on);
    CHECK(troupe::engine_args_from_cli(cli.app).enforce_eager);
    CHECK(cli.prompts == std::vector<std::string>{"p"});
  }
  // Sampling booleans too; after "--" everything is a prompt.
  Cli sampling({"--ignore-eos", "false", "--", "--ignore-eos", "true"});
  CHECK_FALSE(troupe::sampling_params_from_cli(sampling.app).ignore_eos);
  CHECK(sampling.prompts == std::vector<std::string>{"--ignore-eos", "true"});
  // Digits after a flag are data (token ids), never its value.
  Cli digits({"--enforce-eager", "0", "1"});
  CHECK(troupe::engine_args_from_cli(digits.app).enforce_eager);
  CHECK(digits.prompts == std::vector<std::string>{"0", "1"});
}

// (Not "--help ...": a test name that starts with "--" is read by Catch as an option when CTest
// passes it, so the case never ran.)
TEST_CASE("help: what works with its real defaults, the rest once at the end", "[config]") {
  Cli cli({});
  const std::string help = cli.app.help();
  INFO(help);
  CHECK_THAT(help, Contains("Engine:"));
  CHECK_THAT(help, Contains("Sampling:"));
  CHECK_THAT(help, Contains("--block-size INT"));
  CHECK_THAT(help, Contains("Tokens per KV-cache block. Allowed: a power of two in 1..256. "
                            "Default: 16."));
  CHECK_THAT(help, Contains("--enforce-eager,--no-enforce-eager"));
  CHECK_THAT(help, Contains("Never use CUDA graphs. Default: false."));
  // Sampling defaults come from the model's generation_config.json first.
  CHECK_THAT(help, Contains("Default: the model's generation_config.json temperature, else 1.0."));
  CHECK_THAT(help, Contains("Default: the model's generation_config.json max_new_tokens, else "
                            "16."));
  CHECK_THAT(help, Contains("Default: the embedded model, troupe-fortunes"));
  // Only the values that work are offered; other values of a supported flag are named.
  CHECK_THAT(help, Contains("Allowed: auto|safetensors|dummy (vLLM's other values are not "
                            "supported yet)."));
  CHECK_THAT(help, Contains("Allowed: mp|uni (vLLM's other values are not supported yet)."));
  CHECK_THAT(help, Contains("--tensor-parallel-size INT"));
  CHECK_THAT(help, Contains("Several: repeat the flag or use commas."));
  CHECK_THAT(help, Contains("--config FILE"));
  // Not-yet and legacy flags: no line of their own, each named once in the footer.
  const auto footer = help.find("Engine flags of vLLM not supported yet");
  REQUIRE(footer != std::string::npos);
  for (const char* flag :
       {"--enable-lora", "--kv-cache-dtype", "--speculative-config", "--flat-logprobs",
        "--structured-outputs", "--worker-use-ray", "--beam-width"}) {
    INFO(flag);
    const std::regex named(std::string(flag) + "(\\s|$)");
    const auto all = std::distance(std::sregex_iterator(help.begin(), help.end(), named),
                                   std::sregex_iterator());
    CHECK(all == 1);
    CHECK(help.find(flag) > footer);
  }
  CHECK(help.find("not supported yet:") == std::string::npos);  // the old per-flag marks
  // Every supported field has its line; not one not-yet field has.
  size_t shown = 0, hidden = 0;
  for (const auto* table : {&troupe::engine_arg_fields(), &troupe::sampling_param_fields()})
    for (const auto& f : *table)
      (f.status == troupe::FieldInfo::Status::supported ? shown : hidden) += 1;
  CHECK(shown > 50);
  CHECK(hidden > 100);
  // One or two lines a shown flag, a few flags a line for the hidden ones (before: a line
  // or two each, 329 lines in all).
  const auto lines = size_t(std::count(help.begin(), help.end(), '\n'));
  CHECK(lines < 2 * shown + hidden / 3);
  // A hidden flag is still refused by name when given.
  CHECK_THAT(cli_error({"--enable-lora"}), Contains("--enable-lora = true: not supported yet"));
}

TEST_CASE("unknown names get a suggestion only when one is close", "[config]") {
  Cli cli({});
  CHECK(troupe::suggest_option(cli.app, "--temprature") == " (did you mean --temperature?)");
  CHECK(troupe::suggest_option(cli.app, "--max-token=5") == " (did you mean --max-tokens?)");
  CHECK(troupe::suggest_option(cli.app, "--foo").empty());
  CHECK(troupe::suggest_option(cli.app, "--xyz").empty());
  // JSON and TOML keys: the same rule (this used to suggest 'n' for any short key).
  for (const char* far : {"foo", "xyz", "q", "abc", "prompts"}) {
    INFO(far);
    try {
      (void)troupe::sampling_params_from_json({{far, 1}}, {});
      FAIL("accepted " << far);
    } catch (const troupe::Error& e) {
      CHECK_THAT(e.what(), !Contains("did you mean"));
    }
  }
  CHECK_THROWS_WITH(troupe::sampling_params_from_json({{"seeed", 1}}, {}),
                    Contains("(did you mean 'seed'?)"));
  // Two letters swapped are one typo.
  CHECK_THROWS_WITH(troupe::sampling_params_from_json({{"tpo_p", 1}}, {}),
                    Contains("(did you mean 'top_p'?)"));
}
