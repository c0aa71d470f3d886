// The architecture registry: one line per architecture, naming the function in that
// architecture's file that builds its layer program.
#include "runtime/models/model.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace troupe {

// Defined in llama.cpp: the Llama family, whose members differ by llama_layer_extras().
std::unique_ptr<CausalLM> make_llama(const ModelConfig&, Backend&, const ParallelRank&);

namespace {

struct Entry {
  const char* architecture;
  std::unique_ptr<CausalLM> (*make)(const ModelConfig&, Backend&, const ParallelRank&);
};

constexpr Entry registry[] = {
    {"LlamaForCausalLM", make_llama},
    {"MistralForCausalLM", make_llama},
    {"Qwen2ForCausalLM", make_llama},
    {"Qwen3ForCausalLM", make_llama},
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

void check_parallel_layout(const ModelConfig& c, int64_t tp, int64_t pp) {
  const std::string where = (c.dir / "config.json").string();
  if (tp < 1) fail("tensor_parallel_size = {}: allowed: >= 1", tp);
  if (pp < 1) fail("pipeline_parallel_size = {}: allowed: >= 1", pp);
  if (c.num_attention_heads % tp != 0)
    fail("{}: num_attention_heads ({}) must be divisible by tensor_parallel_size ({})", where,
         c.num_attention_heads, tp);
  if (c.num_key_value_heads % tp != 0 && tp % c.num_key_value_heads != 0)
    fail("{}: num_key_value_heads ({}) and tensor_parallel_size ({}) must divide one another",
         where, c.num_key_value_heads, tp);
  if (c.intermediate_size % tp != 0)
    fail("{}: intermediate_size ({}) must be divisible by tensor_parallel_size ({})", where,
         c.intermediate_size, tp);
  if (c.vocab_size % tp != 0)
    fail("{}: vocab_size ({}) must be divisible by tensor_parallel_size ({})", where, c.vocab_size,
         tp);
  if (c.num_hidden_layers < pp)
    fail("{}: num_hidden_layers ({}) is fewer than pipeline_parallel_size ({})", where,
         c.num_hidden_layers, pp);
}

LayerRange stage_layers(int64_t num_layers, int32_t pp_rank, int32_t pp_size) {
  if (pp_size < 1 || pp_rank < 0 || pp_rank >= pp_size)
    fail("pp_rank {} is outside [0, pp_size {})", pp_rank, pp_size);
  if (num_layers < pp_size)
    fail("num_hidden_layers ({}) is fewer than pipeline_parallel_size ({})", num_layers, pp_size);
  std::vector<int64_t> per(size_t(pp_size), num_layers / pp_size);
  for (int64_t i = 0; i < num_layers % pp_size; ++i) per[size_t(pp_size - 2 - i)] += 1;
  LayerRange r;
  for (int32_t s = 0; s < pp_rank; ++s) r.begin += per[size_t(s)];
  r.end = r.begin + per[size_t(pp_rank)];
  return r;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& e : registry) out.emplace_back(e.architecture);
  return out;
}

}  // namespace troupe
