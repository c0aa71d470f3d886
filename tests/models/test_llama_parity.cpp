// Parity with Hugging Face transformers: the checkpoints and references that
// tools/make_fixtures.py writes (tests/fixtures/models/<name>/, or the directory named by the
// TROUPE_MODEL_FIXTURES environment variable). A missing fixture directory is skipped with a
// warning, so the suite runs before the fixtures are generated.
//
// Per fixture: the last-position logits of every prompt (each prompt prefilled alone) and the
// logits of every position of the 7-token prompt within 1e-4 relative error (||a-b|| / ||b||),
// then 24 greedy tokens for all prompts at once: one batched prefill, then one token per
// sequence per forward through a paged cache (block size 8, shuffled block ids), token for
// token identical to transformers' generate().
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>

#include "cpu/cpu_backend.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/model_config.hpp"
#include "tests/models/parity.hpp"

using namespace troupe;
using namespace troupe::testing;


TEST_CASE("parity: llama_gqa (Llama, GQA, F32) vs transformers", "[models][parity]") {
  run_parity(*make_cpu_backend(0), "llama_gqa", "LlamaForCausalLM");
}

TEST_CASE("parity: llama3_tied (Llama 3 RoPE, tied, sharded BF16) vs transformers",
          "[models][parity]") {
  run_parity(*make_cpu_backend(0), "llama3_tied", "LlamaForCausalLM");
}

TEST_CASE("parity: qwen2 (q/k/v biases, tied, F16) vs transformers", "[models][parity]") {
  run_parity(*make_cpu_backend(0), "qwen2", "Qwen2ForCausalLM");
}

TEST_CASE(
    "parity: qwen3 (q and k head norms, head_dim 32 over hidden 64, tied, BF16) vs "
    "transformers",
    "[models][parity]") {
  run_parity(*make_cpu_backend(0), "qwen3", "Qwen3ForCausalLM");
}

TEST_CASE("parity: llama_gelu (gated GELU, tanh approximation, MQA) vs transformers",
          "[models][parity]") {
  run_parity(*make_cpu_backend(0), "llama_gelu", "LlamaForCausalLM");
}
