// Fuzz target for the --input JSON lines of `troupe generate` (runtime/api/generate_input.hpp):
// any text, as a whole input file, gives one request per non-blank line, each with the
// SamplingParams its fields make over vLLM's defaults, or a troupe::Error naming the line.
// An accepted request has a prompt: ids when the line gave "prompt_token_ids", else text.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/api/generate_input.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using troupe::fuzz::accepted;
using troupe::fuzz::broken;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in{std::string(troupe::fuzz::as_text(data, size))};
  std::vector<troupe::GenerateInput> inputs;
  if (!accepted([&] { inputs = troupe::read_generate_input(in, "fuzz.jsonl"); })) return 0;
  for (const troupe::GenerateInput& input : inputs) {
    if (input.where.rfind("--input fuzz.jsonl:", 0) != 0)
      broken("a request placed at \"{}\"", input.where);
    if (!input.overrides.is_null() && !input.overrides.is_object())
      broken("{}: overrides are {}, not an object", input.where, input.overrides.type_name());
    (void)accepted([&] { (void)troupe::input_sampling_params(input, troupe::SamplingParams{}); });
  }
  return 0;
}
