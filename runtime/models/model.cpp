// The architecture registry: one line per architecture, naming the function in that
// architecture's file that builds its layer program.
#include "runtime/models/model.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace troupe {

// Defined in llama.cpp.
std::unique_ptr<CausalLM> make_llama(const ModelConfig&, Backend&, const ParallelRank&);
std::unique_ptr<CausalLM> make_qwen2(const ModelConfig&, Backend&, const ParallelRank&);

namespace {

struct Entry {
  const char* architecture;
  std::unique_ptr<CausalLM> (*make)(const ModelConfig&, Backend&, const ParallelRank&);
};

constexpr Entry registry[] = {
    {"LlamaForCausalLM", make_llama},
    {"MistralForCausalLM", make_llama},
    {"Qwen2ForCausalLM", make_qwen2},
};

}  // namespace

std::unique_ptr<CausalLM> make_causal_lm(const ModelConfig& config, Backend& backend,
                                         const ParallelRank& rank) {
  for (const auto& e : registry)
    if (config.architecture == e.architecture) return e.make(config, backend, rank);
  fail("{}: architecture \"{}\" is not supported; supported: {}",
       (config.dir / "config.json").string(), config.architecture,
       fmt::join(supported_architectures(), ", "));
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& e : registry) out.emplace_back(e.architecture);
  return out;
}

}  // namespace troupe
