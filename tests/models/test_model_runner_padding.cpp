// The decode-step padding that CUDA graphs run on, checked on the CPU: the input builder's
// padded layout value by value, the capture sizes, and a ModelRunner forced through the padded
// fixed-buffer path (RunnerOptions::PadDecode::always) against one that never pads, fed the
// same steps: GQA, batch sizes that pad (3 -> 4, 5 -> 8, 13 -> 16), sequences of different
// lengths crossing block boundaries, mixed prefill/decode steps and sequences longer than
// max_seq_len_to_capture (which must run unpadded).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"
#include "runtime/exec/step_inputs.hpp"
#include "tests/models/plan_driver.hpp"
#include "tests/models/recording_backend.hpp"

using namespace troupe;
using namespace troupe::testing;

TEST_CASE("decode capture sizes are vLLM's (1, 2, 4, every 8, every 16 past 256), at most 512",
          "[exec][graphs]") {
  std::vector<int32_t> to_256{1, 2, 4};
  for (int32_t s = 8; s <= 256; s += 8) to_256.push_back(s);
  CHECK(decode_capture_sizes(256, 8192) == to_256);
  CHECK(decode_capture_sizes(100, 8192) ==
        std::vector<int32_t>{1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 100});
  const auto big = decode_capture_sizes(1024, 8192);
  CHECK(big.back() == 512);
  CHECK(big.size() == to_256.size() + 16);  // 272, 288, ..., 512
  CHECK(std::find(big.begin(), big.end(), 264) == big.end());
  CHECK(std::find(big.begin(), big.end(), 272) != big.end());
  CHECK(decode_capture_sizes(16, 6) == std::vector<int32_t>{1, 2, 4, 6});
  CHECK(decode_capture_sizes(3, 8192) == std::vector<int32_t>{1, 2, 3});
  CHECK(decode_capture_sizes(1, 8192) == std::vector<int32_t>{1});
  CHECK(decode_capture_sizes(0, 8192).empty());
}

TEST_CASE("step inputs: exact layout and a padded one, value by value", "[exec][graphs]") {
  const int32_t bs = 4;
  // A decodes position 4 (block 1 of its table [3, 1]); B decodes position 2 of [2].
  const std::vector<int32_t> a_tokens{5, 6, 7, 8, 9}, a_table{3, 1};
  const std::vector<int32_t> b_tokens{1, 2, 3}, b_table{2};
  const std::vector<SeqSlice> seqs{SeqSlice{a_tokens, a_table, 4, 1},
                                   SeqSlice{b_tokens, b_table, 2, 1}};
  const std::vector<int32_t> logits_rows{1, 0};

  SECTION("exact") {
    const auto l = StepInputLayout::make(2, 2, 2, 2);
    CHECK(l.total == 3 * 2 + 2 + 3 + 2 + 2 * 2);
    std::vector<int32_t> out(l.total, 77);
    fill_step_inputs(seqs, logits_rows, bs, l, out);
    const std::vector<int32_t> want{9, 3,  4, 2,  4, 10,  1, 0,  0, 1, 2,  5, 3,  3, 1, 2, 0};
    CHECK(out == want);
  }
  SECTION("padded to 4 sequences, 3 table columns") {
    const auto l = StepInputLayout::make(4, 4, 4, 3);
    std::vector<int32_t> out(l.total, 77);
    fill_step_inputs(seqs, logits_rows, bs, l, out);
    auto part = [&](size_t off, size_t n) {
      return std::vector<int32_t>(out.begin() + ptrdiff_t(off), out.begin() + ptrdiff_t(off + n));
    };
    CHECK(part(l.token_ids, 4) == std::vector<int32_t>{9, 3, 0, 0});
    CHECK(part(l.positions, 4) == std::vector<int32_t>{4, 2, 0, 0});
    CHECK(part(l.slot_mapping, 4) == std::vector<int32_t>{4, 10, -1, -1});  // padding: no KV
    CHECK(part(l.logits_indices, 4) == std::vector<int32_t>{1, 0, 2, 3});
    CHECK(part(l.query_start_loc, 5) == std::vector<int32_t>{0, 1, 2, 2, 2});  // no rows
    CHECK(part(l.seq_lens, 4) == std::vector<int32_t>{5, 3, 0, 0});             // no keys
    CHECK(part(l.block_tables, 12) ==
          std::vector<int32_t>{3, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0});
  }
  SECTION("errors") {
    std::vector<int32_t> out(1000);
    CHECK_THROWS_AS(StepInputLayout::make(0, 1, 1, 1), Error);
    // One table column cannot hold A's 5 positions.
    CHECK_THROWS_WITH(fill_step_inputs(seqs, logits_rows, bs, StepInputLayout::make(4, 4, 4, 1),
                                       out),
                      Catch::Contains("needs 2 blocks"));
    CHECK_THROWS_AS(
        fill_step_inputs(seqs, logits_rows, bs, StepInputLayout::make(4, 1, 4, 3), out), Error);
    const std::vector<int32_t> bad_rows{2};
    CHECK_THROWS_WITH(
        fill_step_inputs(seqs, bad_rows, bs, StepInputLayout::make(4, 4, 4, 3), out),
        Catch::Contains("logits row 2"));
    const std::vector<int32_t> short_table{3};
    const std::vector<SeqSlice> short_seq{SeqSlice{a_tokens, short_table, 4, 1}};
    CHECK_THROWS_AS(
        fill_step_inputs(short_seq, logits_rows, bs, StepInputLayout::make(4, 4, 4, 3), out),
        Error);
  }
}

namespace {

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += std::isnan(d) ? INFINITY : d * d;
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

void padded_matches_unpadded(const ExecutorInit& init) {
  RunnerOptions pad, exact;
  pad.pad_decode = RunnerOptions::PadDecode::always;
  exact.pad_decode = RunnerOptions::PadDecode::never;
  ModelRunner ref(make_cpu_backend(2), init, exact);
  ModelRunner padded(make_cpu_backend(2), init, pad);
  CHECK(ref.capture_sizes().empty());
  CHECK(padded.capture_sizes() == std::vector<int32_t>{1, 2, 4, 8, 16});

  PlanDriver driver(4, 256, 5);
  const int32_t vocab = int32_t(ref.model_config().vocab_size);
  // Prompts of many lengths; the 40-token one outgrows max_seq_len_to_capture = 48 on the way.
  const auto prompts = random_prompts({3, 9, 1, 17, 5, 12, 2, 7, 30, 4, 11, 6, 8, 40}, vocab, 9);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i + 1 < prompts.size(); ++i) ids.push_back(driver.add(prompts[i]));

  int64_t steps = 0, expect_padded = 0;
  auto step = [&](const std::vector<uint64_t>& batch, bool decode) {
    int32_t longest = 0;
    for (uint64_t id : batch) longest = std::max(longest, driver.length(id));
    const StepPlan plan = driver.plan(batch);
    const StepResult want = ref.execute(plan);
    const StepResult got = padded.execute(plan);
    ++steps;
    if (decode && longest <= 48) ++expect_padded;
    INFO("step " << plan.step_id << ": " << batch.size() << " sequences, decode " << decode);
    REQUIRE(got.outputs.size() == want.outputs.size());
    for (size_t i = 0; i < want.outputs.size(); ++i) {
      CHECK(got.outputs[i].sampled == want.outputs[i].sampled);
      CHECK(got.outputs[i].token == want.outputs[i].token);
    }
    const auto a = padded.last_sampled_logits(), b = ref.last_sampled_logits();
    REQUIRE(a.size() == b.size());
    // Not bit for bit: OpenBLAS's sgemm blocks a 4-row product differently from a 3-row one.
    CHECK(rel_l2(a, b) < 1e-5);
    driver.apply(want);
  };

  step(ids, false);  // prefill of 13 sequences: exact size
  const std::vector<size_t> sizes{1, 2, 3, 3, 5, 8, 13, 4, 7, 1, 16 - 3, 2};
  size_t rotate = 0;
  for (size_t n : sizes) {
    std::vector<uint64_t> batch;
    for (size_t i = 0; i < n; ++i) batch.push_back(ids[(rotate + i * 3) % ids.size()]);
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    rotate += 5;
    step(batch, true);
  }
  // A new sequence's prefill together with decodes: a mixed step, exact size.
  ids.push_back(driver.add(prompts.back()));
  step({ids[0], ids[4], ids.back()}, false);
  // The 40-token sequence decodes past 48 tokens: those steps run unpadded.
  for (int i = 0; i < 10; ++i) step({ids[1], ids.back()}, true);

  CHECK(ref.stats().steps == steps);
  CHECK(ref.stats().padded_steps == 0);
  CHECK(padded.stats().steps == steps);
  CHECK(padded.stats().padded_steps == expect_padded);
  CHECK(padded.stats().padded_steps < steps - 1);
  CHECK(padded.stats().graph_replays == 0);  // the CPU records no graphs
  CHECK(padded.stats().graphs_captured == 0);
}

}  // namespace

TEST_CASE("requested capture sizes replace the default, less those no decode step can fill",
          "[exec][graphs]") {
  CHECK(decode_capture_sizes(256, 8192, {24, 3, 8, 3, 1000}) == std::vector<int32_t>{3, 8, 24});
  CHECK(decode_capture_sizes(16, 8192, {32, 64}).empty());  // none fit: no graphs
  CHECK(decode_capture_sizes(1024, 8192, {600, 1024}) == std::vector<int32_t>{600, 1024});

  // A runner padding decode steps to {3, 8}: 5 rows pad to 8, 9 rows run unpadded.
  ExecutorInit init = small_cpu_init();
  init.cudagraph_capture_sizes = {8, 3};
  RunnerOptions pad;
  pad.pad_decode = RunnerOptions::PadDecode::always;
  ModelRunner runner(make_cpu_backend(2), init, pad);
  CHECK(runner.capture_sizes() == std::vector<int32_t>{3, 8});
  PlanDriver driver(4, 256, 3);
  const auto prompts =
      random_prompts({3, 4, 5, 6, 7, 8, 9, 10, 11}, int32_t(runner.model_config().vocab_size), 4);
  std::vector<uint64_t> ids;
  for (const auto& p : prompts) ids.push_back(driver.add(p));
  driver.apply(runner.execute(driver.plan(ids)));  // prefill: exact
  CHECK(runner.stats().padded_steps == 0);
  driver.apply(runner.execute(driver.plan({ids[0], ids[1], ids[2], ids[3], ids[4]})));
  CHECK(runner.stats().padded_steps == 1);  // 5 -> 8
  driver.apply(runner.execute(driver.plan(ids)));
  CHECK(runner.stats().padded_steps == 1);  // 9 > 8: eager
}

TEST_CASE("decode graphs are recorded at start-up and replay the eager steps' bits",
          "[exec][graphs]") {
  // A backend that records graphs on the CPU (tests/models/recording_backend.hpp): the runner
  // records every capture size when it is made, then replays them; a runner padding the same
  // steps eagerly must give the same bits.
  const ExecutorInit init = small_cpu_init();
  auto recording = std::make_unique<RecordingBackend>(make_cpu_backend(2));
  RecordingBackend& rec = *recording;
  ModelRunner graphs(std::move(recording), init);
  CHECK(graphs.capture_sizes() == std::vector<int32_t>{1, 2, 4, 8, 16});
  CHECK(rec.captures == 5);
  CHECK(graphs.stats().graphs_captured == 5);
  CHECK(graphs.stats().steps == 0);  // the warm-up steps are not counted
  CHECK(graphs.stats().padded_steps == 0);
  RunnerOptions pad;
  pad.pad_decode = RunnerOptions::PadDecode::always;
  ModelRunner eager(make_cpu_backend(2), init, pad);

  PlanDriver driver(4, 256, 11);
  const auto prompts = random_prompts({3, 9, 1, 17, 5, 12, 2, 7, 30, 4, 11},
                                      int32_t(eager.model_config().vocab_size), 12);
  std::vector<uint64_t> ids;
  for (const auto& p : prompts) ids.push_back(driver.add(p));
  auto step = [&](const std::vector<uint64_t>& batch) {
    const StepPlan plan = driver.plan(batch);
    const StepResult want = eager.execute(plan);
    const StepResult got = graphs.execute(plan);
    REQUIRE(got.outputs.size() == want.outputs.size());
    for (size_t i = 0; i < want.outputs.size(); ++i)
      CHECK(got.outputs[i].token == want.outputs[i].token);
    const auto a = graphs.last_sampled_logits(), b = eager.last_sampled_logits();
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    driver.apply(want);
  };
  step(ids);  // prefill: eager in both
  for (size_t n : {1, 3, 11, 2, 8, 5, 11, 1}) {
    step(std::vector<uint64_t>(ids.begin(), ids.begin() + ptrdiff_t(n)));
  }
  CHECK(graphs.stats().graph_replays == 8);
  CHECK(graphs.stats().padded_steps == eager.stats().padded_steps);
  CHECK(rec.replays == 8);
  CHECK(rec.captures == 5);  // nothing recorded after start-up

  // A recording that fails leaves the runner eager, and right.
  auto failing = std::make_unique<RecordingBackend>(make_cpu_backend(1));
  failing->fail_captures = true;
  ModelRunner fallback(std::move(failing), init);
  CHECK(fallback.stats().graphs_captured == 0);
  {
    PlanDriver d2(4, 256, 11);
    std::vector<uint64_t> ids2;
    for (const auto& p : prompts) ids2.push_back(d2.add(p));
    ModelRunner eager2(make_cpu_backend(1), init, pad);
    for (int k = 0; k < 3; ++k) {
      const StepPlan plan = d2.plan(k == 0 ? ids2 : std::vector<uint64_t>{ids2[0], ids2[1]});
      const StepResult want = eager2.execute(plan);
      const StepResult got = fallback.execute(plan);
      REQUIRE(got.outputs.size() == want.outputs.size());
      for (size_t i = 0; i < want.outputs.size(); ++i)
        CHECK(got.outputs[i].token == want.outputs[i].token);
      d2.apply(want);
    }
    CHECK(fallback.stats().graph_replays == 0);
  }

  // enforce_eager: nothing is recorded.
  ExecutorInit no_graphs = init;
  no_graphs.enforce_eager = true;
  auto plain = std::make_unique<RecordingBackend>(make_cpu_backend(1));
  RecordingBackend& p = *plain;
  ModelRunner r(std::move(plain), no_graphs);
  CHECK(p.captures == 0);
  CHECK(r.stats().graphs_captured == 0);
}

TEST_CASE("cpu runner: padded decode steps give the unpadded logits and tokens",
          "[exec][graphs]") {
  SECTION("llama_gqa fixture (4/2 heads of 16)") { padded_matches_unpadded(small_cpu_init()); }
  SECTION("Llama-3-shaped dummy model (8/2 heads of 128)") {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("troupe_padding_model_" + std::to_string(::getpid()));
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
    ExecutorInit init = small_cpu_init();
    init.model_dir = dir.string();
    init.load_format = "dummy";
    padded_matches_unpadded(init);
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("cpu backend records no graphs", "[exec][graphs]") {
  auto b = make_cpu_backend(1);
  CHECK_FALSE(b->can_capture());
  bool called = false;
  CHECK(b->capture([&] { called = true; }) == nullptr);
  CHECK_FALSE(called);
}
