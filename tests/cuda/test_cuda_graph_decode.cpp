// Decode steps under CUDA graphs against the same steps run eagerly, through the real
// ModelRunner: three runners on the GPU are fed identical StepPlans (prefills, mixed steps,
// decode batches of 1 to 13 sequences padded to 1/2/4/8/16, sequences of 1 to 400 tokens,
// GQA, some longer than max_seq_len_to_capture):
// - graphs: the default (decode steps padded, recorded once per size, then replayed);
// - eager: enforce_eager (the same padded steps, run op by op);
// - exact: never padded (every step at its exact size).
// graphs and eager must agree bit for bit in every logit and every sampled token (greedy and
// a seeded random sequence). exact runs other GEMM shapes, so it is compared within a
// tolerance and its greedy agreement is reported.
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cuda/cuda_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"
#include "tests/cuda/cuda_harness.hpp"
#include "tests/models/pipelined_case.hpp"
#include "tests/models/plan_driver.hpp"

namespace troupe::test {
namespace {

using troupe::testing::PlanDriver;
using troupe::testing::random_prompts;

// A Llama-3-shaped model small enough for a test: head dim 128, 4 query heads per KV head.
std::string synthetic_model_dir() {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("troupe_graph_decode_model_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}},
                            {"model_type", "llama"},
                            {"vocab_size", 2048},
                            {"hidden_size", 512},
                            {"intermediate_size", 1024},
                            {"num_hidden_layers", 2},
                            {"num_attention_heads", 8},
                            {"num_key_value_heads", 2},
                            {"head_dim", 128},
                            {"max_position_embeddings", 4096},
                            {"rms_norm_eps", 1e-5},
                            {"rope_theta", 500000.0},
                            {"tie_word_embeddings", false},
                            {"hidden_act", "silu"},
                            {"dtype", "bfloat16"}};
  std::ofstream(dir / "config.json") << c.dump(2);
  return dir.string();
}

ExecutorInit init_for(const std::string& dir, const std::string& load_format,
                      const std::string& dtype) {
  ExecutorInit init;
  init.model_dir = dir;
  init.load_format = load_format;
  init.dtype = dtype;
  init.device = "cuda";
  init.block_size = 16;
  init.max_num_batched_tokens = 2048;
  init.max_num_seqs = 16;
  init.max_model_len = 512;
  init.num_gpu_blocks_override = 512;
  init.max_seq_len_to_capture = 384;
  init.seed = 3;
  return init;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += std::isnan(d) ? INFINITY : d * d;
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

void graphs_match_eager(const std::string& what, const ExecutorInit& base, double exact_bound) {
  ExecutorInit with_graphs = base, eager_init = base;
  with_graphs.enforce_eager = false;
  eager_init.enforce_eager = true;
  RunnerOptions never;
  never.pad_decode = RunnerOptions::PadDecode::never;
  ModelRunner graphs(make_cuda_backend(0), with_graphs);
  ModelRunner eager(make_cuda_backend(0), eager_init);
  ModelRunner exact(make_cuda_backend(0), eager_init, never);
  REQUIRE(graphs.capture_sizes() == std::vector<int32_t>{1, 2, 4, 8, 16});
  REQUIRE(eager.capture_sizes() == graphs.capture_sizes());
  REQUIRE(exact.capture_sizes().empty());

  PlanDriver driver(base.block_size, base.num_gpu_blocks_override, 17);
  const auto vocab = int32_t(graphs.model_config().vocab_size);
  // Two sequences past 256 keys (the decode kernel splits them) but within the 384 captured;
  // the late 400-token one is longer than max_seq_len_to_capture.
  const auto prompts =
      random_prompts({3, 9, 1, 17, 5, 300, 2, 7, 30, 260, 11, 6, 8, 400}, vocab, 29);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i + 1 < prompts.size(); ++i) {
    SeqSampling sampling = PlanDriver::greedy();
    if (i == 4) {  // one seeded random sequence: sampling runs outside the graph
      sampling.temperature = 0.8f;
      sampling.seed = 1234;
    }
    ids.push_back(driver.add(prompts[i], sampling));
  }

  int64_t agree = 0, sampled = 0;
  double worst_exact = 0.0;
  auto step = [&](std::vector<uint64_t> batch) {
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    const StepPlan plan = driver.plan(batch);
    const StepResult rg = graphs.execute(plan);
    const StepResult re = eager.execute(plan);
    const StepResult rx = exact.execute(plan);
    INFO(what << ": step " << plan.step_id << " of " << batch.size() << " sequences");
    REQUIRE(rg.outputs.size() == re.outputs.size());
    REQUIRE(rg.outputs.size() == rx.outputs.size());
    for (size_t i = 0; i < rg.outputs.size(); ++i) {
      CHECK(rg.outputs[i].token == re.outputs[i].token);
      CHECK(rg.outputs[i].logprobs.chosen.logprob == re.outputs[i].logprobs.chosen.logprob);
      if (rg.outputs[i].sampled) {
        ++sampled;
        agree += rg.outputs[i].token == rx.outputs[i].token ? 1 : 0;
      }
    }
    const auto lg = graphs.last_sampled_logits(), le = eager.last_sampled_logits(),
               lx = exact.last_sampled_logits();
    REQUIRE(lg.size() == le.size());
    REQUIRE(lg.size() == lx.size());
    CHECK(std::memcmp(lg.data(), le.data(), lg.size() * sizeof(float)) == 0);
    if (!lg.empty()) {
      const double err = rel_l2(lx, lg);
      worst_exact = std::max(worst_exact, err);
      CHECK(err < exact_bound);
    }
    driver.apply(rg);
  };

  step(ids);  // prefill of 13 sequences
  // Each size at least twice, so every capture size is recorded once and then replayed.
  const std::vector<size_t> sizes{1, 1, 2, 2, 3, 3, 4, 5, 5, 8, 7, 13, 13, 6, 1, 12, 2, 9};
  size_t rotate = 0;
  for (size_t n : sizes) {  // n distinct sequences, a different mix each step
    std::vector<uint64_t> batch;
    for (size_t i = 0; i < n; ++i) batch.push_back(ids[(rotate + i) % ids.size()]);
    rotate += 4;
    step(batch);
  }
  const std::vector<uint64_t> short_ones = ids;
  ids.push_back(driver.add(prompts.back()));
  step({ids[0], ids[5], ids.back()});  // mixed prefill + decode: exact size everywhere
  for (int i = 0; i < 6; ++i) step({ids[1], ids[9], ids.back()});  // 400+ tokens: eager
  step(short_ones);                                               // 13: pads to 16
  step(short_ones);

  std::printf("%-40s graph == eager: %lld steps, %lld replays, %d sizes; unpadded: rel err <= "
              "%.3g, greedy agreement %lld/%lld\n",
              what.c_str(), (long long)graphs.stats().steps,
              (long long)graphs.stats().graph_replays, graphs.stats().graphs_captured,
              worst_exact, (long long)agree, (long long)sampled);
  CHECK(graphs.stats().graphs_captured == 5);  // 1, 2, 4, 8, 16
  CHECK(graphs.stats().graph_replays >= 10);
  CHECK(graphs.stats().padded_steps == eager.stats().padded_steps);
  CHECK(eager.stats().graph_replays == 0);
  CHECK(eager.stats().graphs_captured == 0);
  CHECK(exact.stats().padded_steps == 0);
  CHECK(graphs.stats().padded_steps < graphs.stats().steps);  // prefills and long ones eager
}

TEST_CASE("cuda graphs: decode steps replayed from graphs equal eager steps bit for bit",
          "[cuda][graphs]") {
  TROUPE_REQUIRE_GPU();
  const std::string fixtures = std::string(TROUPE_FIXTURES_DIR) + "/models/";
  graphs_match_eager("llama_gqa f32 (head dim 16)",
                     init_for(fixtures + "llama_gqa", "auto", "float32"), 1e-4);
  graphs_match_eager("qwen2 bf16 (q/k/v biases)", init_for(fixtures + "qwen2", "auto", "bfloat16"),
                     5e-2);
  graphs_match_eager("qwen3 bf16 (q and k head norms)",
                     init_for(fixtures + "qwen3", "auto", "bfloat16"), 5e-2);
  const std::string dir = synthetic_model_dir();
  graphs_match_eager("synthetic bf16 (head dim 128, GQA 4:1)", init_for(dir, "dummy", "bfloat16"),
                     5e-2);
  graphs_match_eager("synthetic f16", init_for(dir, "dummy", "float16"), 5e-2);
  std::filesystem::remove_all(dir);
}

// Pipelined steps on the GPU (tests/models/pipelined_case.hpp): step N+1's graph replays on
// tokens the device feeds from step N's sampler results before the host has them; every token
// and logprob equals the sequential runner's.
TEST_CASE("cuda runner: pipelined steps equal sequential ones bit for bit", "[cuda][graphs]") {
  TROUPE_REQUIRE_GPU();
  const std::string dir = synthetic_model_dir();
  for (const bool eager : {false, true}) {
    ExecutorInit init = init_for(dir, "dummy", "bfloat16");
    init.enforce_eager = eager;
    ModelRunner ref(make_cuda_backend(0), init);
    ModelRunner pipe(make_cuda_backend(0), init);
    INFO("enforce_eager " << eager);
    troupe::testing::pipelined_matches_sequential(ref, pipe, init.block_size);
    CHECK(pipe.stats().graph_replays == ref.stats().graph_replays);
    if (!eager) CHECK(pipe.stats().graph_replays > 0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("cuda graphs: a failing op inside a capture leaves the backend usable",
          "[cuda][graphs]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  CHECK(p.gpu().can_capture());
  const Tensor x = p.gpu_floats(DType::f32, {4}, {1, 2, 3, 4});
  const Tensor y = p.gpu_nan(DType::f32, {4});
  // download is not capturable: the capture ends and the error comes out.
  CHECK_THROWS_AS(p.gpu().capture([&] {
    p.gpu().copy(y, x);
    std::vector<float> host(4);
    p.gpu().download(host.data(), y, 16);
  }),
                  Error);
  auto graph = p.gpu().capture([&] { p.gpu().copy(y, x); });
  REQUIRE(graph != nullptr);
  graph->replay();
  CHECK(p.read(y) == std::vector<float>{1, 2, 3, 4});
}

}  // namespace
}  // namespace troupe::test
