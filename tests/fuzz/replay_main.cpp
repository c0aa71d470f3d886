// The replay driver of the fuzz targets, for CTest: links with one target's
// LLVMFuzzerTestOneInput (built with g++, no libFuzzer) and feeds it every file of the
// directories (or files) given, each also cut at every length, since truncated inputs are where
// a parser's bounds checks are tried. tools/fuzz.sh builds the same targets with clang's
// libFuzzer instead of this file.
//
// A target returns normally for an accepted or a rejected input (troupe::Error) and ends the
// process for anything else (a broken invariant, an unexpected exception); this driver names
// the file and the length that did it.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& entry : fs::directory_iterator(argv[i]))
        if (entry.is_regular_file()) files.push_back(entry.path());
    } else {
      files.emplace_back(argv[i]);
    }
  }
  size_t inputs = 0;
  for (const fs::path& p : files) {
    std::ifstream in(p, std::ios::binary);
    const std::string body{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    // A copy of exactly n bytes per prefix, so a read past its end is one past the buffer.
    for (size_t n = 0; n <= body.size(); ++n, ++inputs) {
      const std::vector<uint8_t> bytes(body.begin(), body.begin() + std::ptrdiff_t(n));
      try {
        LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s, first %zu bytes: exception escaped the target: %s\n", p.c_str(),
                     n, e.what());
        return 1;
      }
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "no corpus files given\n");
    return 1;
  }
  std::printf("%zu inputs from %zu files: every one accepted or rejected cleanly\n", inputs,
              files.size());
  return 0;
}
