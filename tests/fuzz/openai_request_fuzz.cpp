// Fuzz target for the OpenAI request parser (runtime/openai/protocol.hpp, parse_request): any
// bytes, for every endpoint, give a checked request or a 400 ApiError, never an exception, a
// crash or undefined behaviour (the server feeds it raw request bodies).
#include <cstdint>
#include <string_view>
#include <variant>

#include "runtime/openai/protocol.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using troupe::openai::Endpoint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes = troupe::fuzz::as_text(data, size);
  for (const Endpoint ep : {Endpoint::completions, Endpoint::chat_completions, Endpoint::tokenize,
                            Endpoint::detokenize, Endpoint::generate}) {
    const troupe::openai::ParsedRequest r = troupe::openai::parse_request(ep, bytes);
    if (const auto* e = std::get_if<troupe::openai::ApiError>(&r); e && e->status != 400)
      troupe::fuzz::broken("parse_request answered {}, not 400: {}", e->status, e->message);
  }
  return 0;
}
