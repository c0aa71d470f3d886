// tools/cli_args: flags registered from the tables, parsed from fake argv; precedence
// defaults < --config file < flags; vLLM's boolean and list forms; errors naming the flag.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "tools/cli_args.hpp"

using Catch::Matchers::Contains;

namespace {

/// An app with both flag groups, parsed from `args` (without the program name).
struct Cli {
  CLI::App app{"test"};
  explicit Cli(std::vector<std::string> args) {
    troupe::add_engine_args(app);
    troupe::add_sampling_args(app);
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
  for (const auto* table : {&troupe::engine_arg_fields(), &troupe::sampling_param_fields()}) {
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
  Cli cli({"--model", "/ckpt", "--max-num-seqs", "64", "--max-model-len", "4K", "--enforce-eager",
           "--no-enable-prefix-caching", "--dtype", "half", "--served-model-name", "a", "b",
           "--executor-endpoints", "h:1", "--executor-endpoints", "h:2", "--max-log-len=100",
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
           "1",
           "2",
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
  CHECK_THAT(cli_error({"--model", "m", "--tensor-parallel-size", "2"}),
             Contains("--tensor-parallel-size = 2: not supported yet in troupe (only 1 so far)"));
  CHECK_THAT(cli_error({"--model", "m", "--enable-lora"}),
             Contains("--enable-lora = true: not supported yet in troupe"));
  CHECK_THAT(cli_error({"--model", "m", "--dtype", "int8"}),
             Contains("--dtype = \"int8\": allowed:"));
  CHECK_THAT(cli_error({"--model", "m", "--top-p", "0"}),
             Contains("--top-p = 0.0: allowed: (0, 1]"));
  CHECK_THAT(cli_error({"--model", "m", "--bad-words", "x"}),
             Contains("--bad-words = [\"x\"]: not supported yet"));
  CHECK_THAT(cli_error({"--max-num-seqs", "8"}), Contains("model = \"\""));
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

TEST_CASE("--help lists both groups with defaults and marks not-yet flags", "[config]") {
  Cli cli({});
  std::string help = cli.app.help();
  CHECK_THAT(help, Contains("Engine:"));
  CHECK_THAT(help, Contains("Sampling:"));
  CHECK_THAT(help, Contains("--block-size INT=16"));
  CHECK_THAT(help, Contains("--gpu-memory-utilization FLOAT=0.9"));
  CHECK_THAT(help, Contains("--temperature FLOAT=1.0"));
  CHECK_THAT(help, Contains("--enforce-eager,--no-enforce-eager"));
  CHECK_THAT(help, Contains("Never use CUDA graphs. Default: false."));
  CHECK_THAT(help, Contains("(not supported yet: other values; only 1 so far)"));
  CHECK_THAT(help, Contains("(not supported yet: the KV cache uses the model dtype)"));
  CHECK_THAT(help, Contains("(legacy: no Ray in troupe"));
  CHECK_THAT(help, Contains("--config FILE"));
}
