// Batch-invariant mode (--batch-invariant, Backend::set_batch_invariant): a request's tokens,
// logprobs and prompt logprobs are bit-identical alone and inside batches of 1 to 64 other
// requests of every length, with a token budget small enough that chunked prefill cuts the
// prompts differently in every batch. The reference is the request run alone. On the CUDA
// backend (where a GPU is) the same in bfloat16 and float32, with the decode CUDA graphs.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <random>

#include "actors/executor_actor.hpp"
#include "actors/llm.hpp"
#include "cpu/cpu_backend.hpp"
#include "tests/models/recording_backend.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

EngineArgs args(bool batch_invariant, const std::string& device, const std::string& dtype) {
  EngineArgs a{.model = (fs::path(TROUPE_SOURCE_DIR) / "models" / "troupe-fortunes").string(),
               .disable_log_stats = true};
  a.device = device;
  a.dtype = dtype;
  a.batch_invariant = batch_invariant;
  a.enable_prefix_caching = false;  // every run computes the target's prompt itself
  a.max_num_seqs = 32;
  a.max_num_batched_tokens = 96;  // prompts of up to ~150 tokens are chunked, differently by batch
  return a;
}

/// The requests under test: greedy and seeded sampling, with logprobs and prompt logprobs.
std::vector<SamplingParams> targets() {
  SamplingParams greedy{.temperature = 0.0, .ignore_eos = true, .max_tokens = 24};
  greedy.logprobs = 5;
  greedy.prompt_logprobs = 3;
  SamplingParams sampled{.temperature = 0.8, .ignore_eos = true, .max_tokens = 24};
  sampled.seed = 11;
  sampled.logprobs = 2;
  return {greedy, sampled};
}

const Prompt kTarget = "The little fox went down to the river and asked the old stone";

/// `n` other requests of 2 to 120 words and 1 to 40 tokens, the targets at `at` and at + 1.
void batch(size_t n, size_t at, uint32_t seed, std::vector<Prompt>& prompts,
           std::vector<SamplingParams>& params) {
  static const std::vector<std::string> words = {"the", "cat",  "ran",   "blue",  "house",
                                                 "a",   "tree", "river", "stone", "wind",
                                                 "sun", "moon", "old",   "green", "far"};
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    if (i == at)
      for (const auto& p : targets()) {
        prompts.emplace_back(kTarget);
        params.push_back(p);
      }
    std::string text;
    const int len = std::uniform_int_distribution<int>(2, 120)(rng);
    for (int w = 0; w < len; ++w) text += (w ? " " : "") + words[rng() % words.size()];
    prompts.emplace_back(text);
    params.push_back({.temperature = 0.0,
                      .ignore_eos = true,
                      .max_tokens = std::uniform_int_distribution<int>(1, 40)(rng)});
  }
}

bool same(const RequestOutput& a, const RequestOutput& b) {
  const auto& x = a.outputs.at(0);
  const auto& y = b.outputs.at(0);
  const auto same_maps = [](const auto& p, const auto& q) {
    if (p.has_value() != q.has_value() || (p && p->size() != q->size())) return false;
    for (size_t i = 0; p && i < p->size(); ++i) {
      if ((*p)[i].size() != (*q)[i].size()) return false;
      for (const auto& [id, lp] : (*p)[i]) {
        const auto it = (*q)[i].find(id);
        // Bit for bit: the same float, not a close one.
        if (it == (*q)[i].end() || std::memcmp(&lp.logprob, &it->second.logprob, 4) != 0 ||
            lp.rank != it->second.rank)
          return false;
      }
    }
    return true;
  };
  return x.token_ids == y.token_ids && same_maps(x.logprobs, y.logprobs) &&
         same_maps(a.prompt_logprobs, b.prompt_logprobs) &&
         x.cumulative_logprob == y.cumulative_logprob;
}

/// How many of the batches changed a target's bits, against the targets run alone.
size_t batches_that_differ(bool batch_invariant, const std::string& device = "cpu",
                           const std::string& dtype = "auto") {
  INFO("device " << device << ", dtype " << dtype);
  LLM llm(args(batch_invariant, device, dtype));
  const auto t = targets();
  const auto alone = llm.generate(std::vector<Prompt>(t.size(), kTarget), t, {.use_tqdm = false});
  size_t differ = 0;
  uint32_t seed = 1;
  for (size_t n : {1, 7, 24, 64}) {
    std::vector<Prompt> prompts;
    std::vector<SamplingParams> params;
    batch(n, n / 2, seed++, prompts, params);
    const auto out = llm.generate(prompts, params, {.use_tqdm = false});
    bool changed = false;
    for (size_t k = 0; k < t.size(); ++k) {
      const auto& got = out.at(n / 2 + k);
      REQUIRE(got.prompt == kTarget.text);
      REQUIRE(got.outputs.at(0).token_ids.size() == 24);
      changed = changed || !same(got, alone.at(k));
    }
    if (batch_invariant) {
      INFO("batch of " << n << " others");
      CHECK_FALSE(changed);
    }
    differ += changed;
  }
  return differ;
}

}  // namespace

TEST_CASE("batch-invariant mode: a request alone and among 1 to 64 others gets the same bits",
          "[llm][batch_invariant]") {
  CHECK(batches_that_differ(true) == 0);
  // Without the mode OpenBLAS's blocking follows the batch's shape, and the same batches change
  // the targets' low bits (on this machine's OpenBLAS): the check above is not vacuous.
  CHECK(batches_that_differ(false) > 0);
}

TEST_CASE("batch-invariant mode on the CUDA backend: alone and among 1 to 64 others, same bits",
          "[llm][batch_invariant][cuda]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the CUDA half of the batch-invariance test is skipped");
    return;
  }
  // bfloat16 runs the tensor-core invariant GEMM and the prefill attention kernel for every
  // row; float32 the fallback GEMM and the f32 attention kernel.
  for (const std::string dtype : {"bfloat16", "float32"})
    CHECK(batches_that_differ(true, "cuda", dtype) == 0);
  // Without the mode the skinny GEMM, cuBLASLt's choices and the split-KV decode plan follow
  // the batch, and the bfloat16 targets' bits move.
  CHECK(batches_that_differ(false, "cuda", "bfloat16") > 0);
}

TEST_CASE("batch-invariant mode on CUDA with tensor parallelism is refused by name",
          "[llm][batch_invariant]") {
  EngineArgs a = args(true, "cuda", "auto");
  a.tensor_parallel_size = 2;
  CHECK_THROWS_WITH(LLM(a), Catch::Contains("batch_invariant = true with tensor_parallel_size = 2 "
                                            "on device = cuda: not supported yet"));
}

TEST_CASE("batch-invariant mode: a backend without it refuses it by name",
          "[llm][batch_invariant]") {
  // The recording test double has no mode (what any backend without one says).
  testing::RecordingBackend recording(make_cpu_backend(1));
  CHECK_NOTHROW(recording.set_batch_invariant(false));
  CHECK_THROWS_WITH(recording.set_batch_invariant(true),
                    Catch::Contains("batch_invariant: the cpu (recording) backend has no "
                                    "batch-invariant mode yet; allowed: the cpu backend"));
  CHECK_NOTHROW(make_cpu_backend(1)->set_batch_invariant(true));
}
