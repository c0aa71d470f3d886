// The --input JSON lines of `troupe generate` (runtime/api/generate_input.hpp): prompts as text
// or ids, per-request sampling fields over the command line's, and errors that name the file
// and the line an editor shows.
#include <catch2/catch.hpp>

#include <sstream>

#include "runtime/api/generate_input.hpp"
#include "tests/runtime/test_error_of.hpp"

using Catch::Matchers::Contains;
using troupe::GenerateInput;
using troupe::SamplingParams;
using troupe::test::error_of;

namespace {

std::vector<GenerateInput> read(const std::string& text) {
  std::istringstream in(text);
  return troupe::read_generate_input(in, "in.jsonl");
}

}  // namespace

TEST_CASE("generate input: text and id prompts, their sampling fields, blank lines counted",
          "[generate_input]") {
  const auto inputs = read(
      "{\"prompt\": \"Once upon a time\"}\n"
      "\n"
      "  \t\r\n"
      "{\"prompt_token_ids\": [0, 322, 2093], \"prompt\": \"kept\", \"n\": 2, \"seed\": 7}\r\n"
      "{\"prompt\": \"A wise man\", \"temperature\": 0, \"max_tokens\": 16}");  // no final newline
  REQUIRE(inputs.size() == 3);
  CHECK(inputs[0].text == "Once upon a time");
  CHECK(inputs[0].token_ids.empty());
  CHECK(inputs[0].overrides.is_null());
  CHECK(inputs[0].where == "--input in.jsonl:1");
  CHECK(inputs[1].token_ids == std::vector<int32_t>{0, 322, 2093});
  CHECK(inputs[1].text == "kept");
  CHECK(inputs[1].where == "--input in.jsonl:4");
  CHECK(inputs[2].where == "--input in.jsonl:5");

  const SamplingParams base{.temperature = 0.5, .top_p = 0.9};
  CHECK(troupe::input_sampling_params(inputs[0], base) == base);  // nothing of its own
  const SamplingParams two = troupe::input_sampling_params(inputs[1], base);
  CHECK(two.n == 2);
  CHECK(two.seed == 7);
  CHECK(two.top_p == 0.9);  // the base's, where the line sets nothing
  const SamplingParams three = troupe::input_sampling_params(inputs[2], base);
  CHECK(three.temperature == 0.0);
  CHECK(three.max_tokens == 16);
}

TEST_CASE("generate input: a bad line is refused naming the file and its line",
          "[generate_input]") {
  CHECK_THAT(error_of([] { (void)read("{\"prompt\": \"ok\"}\n{\"prompt\": 5}\n"); }),
             Contains("--input in.jsonl:2: prompt must be a string"));
  CHECK_THAT(error_of([] { (void)read("\n\n{\"prompt\": \"ok\"\n"); }),
             Contains("--input in.jsonl:3: not JSON"));
  // nlohmann's out_of_range for a number beyond a double (found by the generate_input fuzz
  // target: it escaped as a non-troupe exception).
  CHECK_THAT(error_of([] { (void)read("{\"prompt\": \"x\", \"temperature\": 1e400}\n"); }),
             Contains("--input in.jsonl:1: not JSON") && Contains("overflow"));
  CHECK_THAT(error_of([] { (void)read("[1, 2]\n"); }),
             Contains("--input in.jsonl:1: expected a JSON object"));
  CHECK_THAT(error_of([] { (void)read("{\"max_tokens\": 4}\n"); }),
             Contains("needs \"prompt\" or \"prompt_token_ids\""));
  CHECK_THAT(error_of([] { (void)read("{\"prompt_token_ids\": []}\n"); }),
             Contains("prompt_token_ids must be a non-empty array"));
  CHECK_THAT(error_of([] { (void)read("{\"prompt_token_ids\": [1, \"2\"]}\n"); }),
             Contains("prompt_token_ids holds \"2\", not a token id"));
  // Beyond 32 bits is refused, not wrapped (4294967297 was read as token 1).
  CHECK_THAT(error_of([] { (void)read("{\"prompt_token_ids\": [5, 4294967297]}\n"); }),
             Contains("--input in.jsonl:1: prompt_token_ids holds 4294967297, not a token id"));
  CHECK_THAT(error_of([] { (void)read("{\"prompt_token_ids\": [-2147483649]}\n"); }),
             Contains("holds -2147483649"));
  CHECK(read("{\"prompt_token_ids\": [2147483647, 0]}\n")[0].token_ids ==
        std::vector<int32_t>{2147483647, 0});

  // A sampling field is checked against the base it goes over, and named with the line.
  const auto inputs = read("{\"prompt\": \"ok\"}\n\n{\"prompt\": \"a\", \"temprature\": 0.5}\n");
  CHECK_THAT(error_of([&] { (void)troupe::input_sampling_params(inputs[1], {}); }),
             Contains("--input in.jsonl:3: ") && Contains("did you mean 'temperature'"));
}
