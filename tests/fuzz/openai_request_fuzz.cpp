// Fuzz target for the OpenAI request parser (runtime/openai/protocol.hpp, parse_request): any
// bytes, for every endpoint, give a checked request or a 400 ApiError, never an exception, a
// crash or undefined behaviour (the server feeds it raw request bodies).
//
// Built two ways:
//   - libFuzzer (clang, AddressSanitizer and UBSan, -DTROUPE_LIBFUZZER): tools/fuzz_openai.sh
//     builds it and runs it from the seed corpus for a given time;
//   - a replay of the seed corpus (tests/fuzz/CMakeLists.txt), which CTest runs in CI.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <variant>

#include "runtime/openai/protocol.hpp"

namespace {

using troupe::openai::Endpoint;

void check_one(std::string_view bytes) {
  for (const Endpoint ep : {Endpoint::completions, Endpoint::chat_completions, Endpoint::tokenize,
                            Endpoint::detokenize, Endpoint::generate}) {
    // An exception escaping parse_request ends the process: the fuzzer reports it as a crash.
    const troupe::openai::ParsedRequest r = troupe::openai::parse_request(ep, bytes);
    if (const auto* e = std::get_if<troupe::openai::ApiError>(&r); e && e->status != 400) {
      std::fprintf(stderr, "parse_request answered %d, not 400: %s\n", e->status,
                   e->message.c_str());
      std::terminate();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_one(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}

#ifndef TROUPE_LIBFUZZER
// The replay: every file of the directories (or files) given, each also cut at every length,
// since truncated bodies are where a parser's bounds checks are tried.
int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  size_t inputs = 0;
  auto run_file = [&](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::string body{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    for (size_t n = 0; n <= body.size(); ++n, ++inputs) check_one(std::string_view(body).substr(0, n));
  };
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& entry : fs::directory_iterator(argv[i]))
        if (entry.is_regular_file()) run_file(entry.path());
    } else {
      run_file(argv[i]);
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "no corpus files given\n");
    return 1;
  }
  std::printf("%zu inputs: every one a request or a 400\n", inputs);
  return 0;
}
#endif
