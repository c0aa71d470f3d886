// Fuzz target for a checkpoint's JSON configs (runtime/checkpoint): the text is read as
// config.json (parse_model_config) and as generation_config.json (parse_generation_config), as
// the engine reads them before it loads a weight. Each gives its checked struct or a
// troupe::Error. What the engine computes next from them must work on every accepted file
// too: the parallel-layout check and the memory estimate of config.json (one rank and a
// 2 x 2 layout's last rank: sizes, and the bytes of one longest sequence, that are never
// negative), and the sampling defaults of
// generation_config.json (a SamplingParams that validates, or a troupe::Error naming the field).
#include <cstdint>
#include <string>

#include "runtime/checkpoint/generation_config.hpp"
#include "runtime/checkpoint/model_config.hpp"
#include "runtime/config/sampling_params.hpp"
#include "runtime/exec/memory_fit.hpp"
#include "runtime/models/model.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using troupe::fuzz::accepted;
using troupe::fuzz::broken;

namespace {

void check_model(const std::string& text) {
  troupe::ModelConfig c;
  if (!accepted([&] { c = troupe::parse_model_config(text, "fuzz"); })) return;
  for (const troupe::ParallelRank rank :
       {troupe::ParallelRank{},
        troupe::ParallelRank{.tp_rank = 1, .tp_size = 2, .pp_rank = 1, .pp_size = 2}}) {
    if (!accepted([&] { troupe::check_parallel_layout(c, rank.tp_size, rank.pp_size); })) continue;
    troupe::ModelMemory m;
    if (!accepted([&] {
          m = troupe::model_memory(c, troupe::DType::bf16, c.max_position_embeddings, rank);
        }))
      continue;
    if (m.parameters < 0 || m.weight_bytes < 0 || m.kv_bytes_per_token < 0 ||
        m.one_sequence_bytes() < 0)
      broken("model_memory: {} parameters, {} weight bytes, {} KV bytes per token", m.parameters,
             m.weight_bytes, m.kv_bytes_per_token);
  }
}

void check_generation(const std::string& text) {
  troupe::GenerationConfig g;
  if (!accepted([&] { g = troupe::parse_generation_config(text, "fuzz"); })) return;
  (void)accepted([&] { troupe::validate(troupe::sampling_defaults_from(g)); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(troupe::fuzz::as_text(data, size));
  check_model(text);
  check_generation(text);
  return 0;
}
