// The memory check before loading (runtime/exec/memory_fit): parameter counts against
// references outside the code (Meta's published count for Llama-3-8B, the tensors the
// fixture checkpoints hold), and the refusal of a model that cannot fit, with injected sizes
// of available memory, so nothing large is allocated.
#include <catch2/catch.hpp>

#include <filesystem>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/memory_fit.hpp"

using namespace troupe;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kGiB = int64_t(1) << 30;
const fs::path kLlama3_8B = fs::path(TROUPE_SOURCE_DIR) / "configs" / "models" / "llama-3-8b";
const Device kCpu{DeviceKind::cpu, 0};
const Device kGpu{DeviceKind::cuda, 0};

std::string refusal(const ModelMemory& need, int64_t available, const Device& device,
                    DType stored = DType::bf16) {
  try {
    check_model_fits(need, available, device, stored);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parameter counts: Llama-3-8B is Meta's 8,030,261,248", "[memory_fit]") {
  const ModelConfig c = load_model_config(kLlama3_8B);
  CHECK(model_parameter_count(c) == 8'030'261'248);
  // Tensor-parallel ranks hold half of every matrix and the whole of each norm (2 per layer
  // and the final one, 4096 values each).
  const int64_t norms = (2 * 32 + 1) * 4096;
  CHECK(model_parameter_count(c, {.tp_rank = 1, .tp_size = 2}) ==
        (8'030'261'248 - norms) / 2 + norms);
  // Pipeline stages split the model without overlap.
  CHECK(model_parameter_count(c, {.pp_rank = 0, .pp_size = 2}) +
            model_parameter_count(c, {.pp_rank = 1, .pp_size = 2}) ==
        8'030'261'248);
  const ModelMemory m = model_memory(c, DType::f32, 8192);
  CHECK(m.weight_bytes == 8'030'261'248 * 4 + 8192 * 128 * 4);  // weights + the RoPE table
  CHECK(m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 4);
}

TEST_CASE("sizes that overflow int64 are refused naming config.json, not wrapped", "[memory_fit]") {
  // Each parses (every size is a positive integer) but counts past 2^63: the products wrapped
  // (undefined behaviour; the model_config fuzz target checks the estimate of every config).
  const std::string base =
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 4, "intermediate_size": 4,
          "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 8, )";
  const auto config = [&](const std::string& rest) {
    return parse_model_config(base + rest + "}", "/models/huge");
  };
  const ModelConfig wide = config(R"("hidden_size": 4611686018427387904)");  // 2^62
  CHECK_THROWS_WITH(model_parameter_count(wide), Contains("/models/huge/config.json") &&
                                                     Contains("hidden_size 4611686018427387904") &&
                                                     Contains("more than 2^63"));
  CHECK_THROWS_WITH(model_memory(wide, DType::bf16, 8), Contains("more than 2^63"));
  // The parameters fit; their bytes, or one sequence's KV cache, do not.
  const ModelConfig deep = config(R"("hidden_size": 4, "num_hidden_layers": 50000000000000000)");
  CHECK(model_parameter_count(deep) > 0);
  CHECK_THROWS_WITH(model_memory(deep, DType::f32, 8), Contains("more than 2^63"));
  const ModelConfig fine = config(R"("hidden_size": 4, "head_dim": 1000000000000000)");
  CHECK_NOTHROW(model_memory(fine, DType::bf16, 1));
  CHECK_THROWS_WITH(model_memory(fine, DType::bf16, 2147483647), Contains("more than 2^63"));
  // A linear RoPE factor that makes the table's rows beyond int64 (the cast was undefined).
  const ModelConfig stretched =
      config(R"("hidden_size": 4, "rope_scaling": {"type": "linear", "factor": 1e300})");
  CHECK_THROWS_WITH(model_memory(stretched, DType::bf16, 8),
                    Contains("rope_scaling factor") && Contains("beyond any position table"));
}

TEST_CASE("parameter counts equal the tensors of every fixture checkpoint", "[memory_fit]") {
  for (const char* name : {"llama_gqa", "llama3_tied", "llama_gelu", "qwen2", "qwen3"}) {
    const fs::path dir = fs::path(TROUPE_FIXTURES_DIR) / "models" / name;
    INFO(name);
    const ModelConfig c = load_model_config(dir);
    const CheckpointReader ckpt = CheckpointReader::open(dir);
    int64_t stored = 0;
    for (const auto& t : ckpt.names()) {
      // A tied head may be saved as its own copy; troupe reads the embedding for it.
      if (c.tie_word_embeddings && t == "lm_head.weight") continue;
      stored += ckpt.get(t).numel();
    }
    CHECK(model_parameter_count(c) == stored);
  }
}

TEST_CASE("Llama-3-8B on a CPU with 24 GiB available is refused with the sizes", "[memory_fit]") {
  const ModelConfig c = load_model_config(kLlama3_8B);
  const ModelMemory f32 = model_memory(c, DType::f32, 8192);  // the CPU computes in float32
  const std::string e = refusal(f32, 24 * kGiB, kCpu);
  INFO(e);
  CHECK_THAT(e, Contains("does not fit"));
  CHECK_THAT(e, Contains("8.03 B parameters in float32"));
  CHECK_THAT(e, Contains("29.92 GiB"));               // the model's bytes
  CHECK_THAT(e, Contains("MemAvailable 24.00 GiB"));  // what is available
  CHECK_THAT(e, Contains("--device cuda"));           // what would help
  CHECK_THAT(e, Contains("14.96 GiB in bfloat16"));
  // The same model where it fits: 64 GiB available.
  CHECK_NOTHROW(check_model_fits(f32, 64 * kGiB, kCpu, DType::bf16));
}

TEST_CASE("on a GPU the refusal names --dtype for float32 and another device otherwise",
          "[memory_fit]") {
  const ModelConfig c = load_model_config(kLlama3_8B);
  const std::string f32 = refusal(model_memory(c, DType::f32, 8192), 20 * kGiB, kGpu);
  CHECK_THAT(f32, Contains("free on cuda:0"));
  CHECK_THAT(f32, Contains("--dtype bfloat16"));
  const std::string bf16 = refusal(model_memory(c, DType::bf16, 8192), 12 * kGiB, kGpu);
  CHECK_THAT(bf16, Contains("14.96 GiB"));
  CHECK_THAT(bf16, Contains("another device"));
  CHECK_NOTHROW(check_model_fits(model_memory(c, DType::bf16, 8192), 80 * kGiB, kGpu, DType::bf16));
}

TEST_CASE("weights that fit without one full-length sequence's KV cache: --max-model-len",
          "[memory_fit]") {
  const ModelConfig c = load_model_config(kLlama3_8B);
  // 16 GiB free, 15.2 GiB of it usable (a 0.8 GiB margin): 14.96 GiB of bf16 weights fit,
  // with 8192 tokens of KV cache (1 GiB) they do not.
  const int64_t available = 16 * kGiB;
  const ModelMemory full = model_memory(c, DType::bf16, 8192);
  const std::string e = refusal(full, available, kGpu);
  INFO(e);
  CHECK_THAT(e, Contains("max_model_len = 8192"));
  CHECK_THAT(e, Contains("lower --max-model-len (at most "));
  // The length it names fits, one more token does not.
  const auto at = e.find("at most ") + 8;
  const int64_t most = std::stoll(e.substr(at, e.find(' ', at) - at));
  CHECK(most > 0);
  CHECK(most < 8192);
  CHECK_NOTHROW(check_model_fits(model_memory(c, DType::bf16, most), available, kGpu, DType::bf16));
  CHECK_THROWS(
      check_model_fits(model_memory(c, DType::bf16, most + 1), available, kGpu, DType::bf16));
}

TEST_CASE("the margin is 5% of what is available, at least 512 MiB", "[memory_fit]") {
  CHECK(memory_margin_bytes(4 * kGiB) == 512 * (int64_t(1) << 20));
  CHECK(memory_margin_bytes(100 * kGiB) == 5 * kGiB);
}
