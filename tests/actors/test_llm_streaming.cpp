// LLM::generate's streaming form (the one `troupe generate` writes results with as they
// finish): each request's output is handed over as soon as it is complete, with its prompt
// index; cancelling aborts what is still running; a callback that throws stops the rest.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <stdexcept>

#include "actors/llm.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

EngineArgs args() {
  return {.model = (fs::path(TROUPE_SOURCE_DIR) / "models" / "troupe-fortunes").string(),
          .disable_log_stats = true};
}

SamplingParams greedy(int64_t max_tokens) {
  return {.temperature = 0.0, .ignore_eos = true, .max_tokens = max_tokens};
}

}  // namespace

TEST_CASE("streaming generate: outputs as requests complete, the same as the batch form",
          "[llm][streaming]") {
  LLM llm(args());
  const std::vector<Prompt> prompts = {"Once upon a time", "A wise man", "The future of AI is"};
  const std::vector<SamplingParams> params = {greedy(40), greedy(2), greedy(12)};
  std::vector<size_t> order;
  std::vector<RequestOutput> streamed(prompts.size());
  llm.generate(prompts, params,
               [&](size_t i, RequestOutput&& out) {
                 order.push_back(i);
                 streamed[i] = std::move(out);
               },
               {.use_tqdm = false});
  // All three start in the first step; the shortest finishes first.
  CHECK(order == std::vector<size_t>{1, 2, 0});
  const auto batch = llm.generate(prompts, params, {.use_tqdm = false});
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO(i);
    CHECK(streamed[i].prompt == batch[i].prompt);
    CHECK(streamed[i].outputs.at(0).token_ids == batch[i].outputs.at(0).token_ids);
    CHECK(streamed[i].outputs.at(0).token_ids.size() == size_t(*params[i].max_tokens));
  }
}

TEST_CASE("streaming generate: cancelling aborts what still runs, every request comes back",
          "[llm][streaming]") {
  LLM llm(args());
  std::atomic<bool> cancel{false};
  std::vector<Prompt> prompts(6, Prompt("Once upon a time"));
  std::vector<SamplingParams> params(6, greedy(400));
  params[3] = greedy(1);
  std::vector<std::string> reasons(prompts.size());
  size_t calls = 0;
  llm.generate(prompts, params,
               [&](size_t i, RequestOutput&& out) {
                 ++calls;
                 reasons[i] = out.outputs.at(0).finish_reason;
                 cancel = true;  // after the first one finishes
               },
               {.use_tqdm = false, .cancel = &cancel});
  CHECK(calls == prompts.size());
  CHECK(reasons[3] == "length");
  for (size_t i : {0, 1, 2, 4, 5}) {
    INFO(i);
    CHECK(reasons[i] == "abort");
  }
}

TEST_CASE("streaming generate: a callback that throws stops the run, the LLM stays usable",
          "[llm][streaming]") {
  LLM llm(args());
  const std::vector<Prompt> prompts = {"Once upon a time", "A wise man"};
  const std::vector<SamplingParams> params = {greedy(1), greedy(300)};
  CHECK_THROWS_WITH(
      llm.generate(prompts, params,
                   [](size_t, RequestOutput&&) { throw std::runtime_error("disk full"); },
                   {.use_tqdm = false}),
      "disk full");
  const auto again = llm.generate({Prompt("Hello")}, greedy(3), {.use_tqdm = false});
  CHECK(again.at(0).outputs.at(0).token_ids.size() == 3);
}
