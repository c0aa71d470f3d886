// Swap space in the ModelRunner on the CPU backend: a sequence's KV blocks swapped out to the
// host pool, the device blocks overwritten by another sequence, and swapped back into other
// device blocks (in another order) must give the very logits of a run that never swapped.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"

using namespace troupe;

namespace {

ExecutorInit swap_init(int64_t swap_space_bytes) {
  ExecutorInit init;
  init.model_dir = std::string(TROUPE_FIXTURES_DIR) + "/models/llama_gqa";
  init.device = "cpu";
  init.block_size = 4;
  init.max_num_batched_tokens = 64;
  init.max_num_seqs = 4;
  init.max_model_len = 64;
  init.num_gpu_blocks_override = 32;
  init.swap_space_bytes = swap_space_bytes;
  return init;
}

SeqSampling greedy() {
  SeqSampling s;
  s.temperature = 0.0f;
  return s;
}

const std::vector<int32_t> kPrompt{5, 17, 3, 99, 42, 7, 8, 61, 12, 30};  // 10 tokens: 3 blocks

}  // namespace

TEST_CASE("cpu runner: swap out, overwrite, swap in elsewhere gives the unswapped logits",
          "[exec][swap]") {
  // Reference: prefill, then two decode steps, never swapped.
  ModelRunner ref(make_cpu_backend(1), swap_init(0));
  CHECK(ref.info().num_cpu_blocks == 0);
  StepPlan p1;
  p1.step_id = 1;
  p1.new_seqs.push_back(NewSeq{1, kPrompt, 10, greedy(), {0, 1, 2}, 0, 10});
  const StepResult r1 = ref.execute(p1);
  REQUIRE(r1.outputs.at(0).sampled);
  const int32_t t1 = r1.outputs[0].token;
  StepPlan p2;
  p2.step_id = 2;
  p2.cached_seqs.push_back(CachedSeq{1, {t1}, {}, 10, 1});
  const StepResult r2 = ref.execute(p2);
  const std::vector<float> ref_logits2 = ref.last_sampled_logits();
  const int32_t t2 = r2.outputs.at(0).token;
  StepPlan p3;
  p3.step_id = 3;
  p3.cached_seqs.push_back(CachedSeq{1, {t2}, {}, 11, 1});
  (void)ref.execute(p3);
  const std::vector<float> ref_logits3 = ref.last_sampled_logits();

  // With swap space: the same prefill, then swap out (and forget), let another sequence write
  // the same device blocks, then swap in to blocks {9, 5, 20} and continue.
  ModelRunner run(make_cpu_backend(1), swap_init(int64_t(1) << 20));
  REQUIRE(run.info().num_cpu_blocks > 3);
  CHECK(run.info().kv_block_bytes > 0);
  CHECK(run.info().num_cpu_blocks == int32_t((int64_t(1) << 20) / run.info().kv_block_bytes));
  REQUIRE(run.execute(p1).outputs.at(0).token == t1);

  StepPlan out;
  out.step_id = 2;
  out.finished_seq_ids = {1};
  out.swap_out = {BlockSwap{0, 3}, BlockSwap{1, 0}, BlockSwap{2, 2}};
  std::vector<int32_t> other(10);
  for (size_t i = 0; i < other.size(); ++i) other[i] = int32_t(200 + i);
  out.new_seqs.push_back(NewSeq{2, other, 10, greedy(), {2, 0, 1}, 0, 10});  // reuses 0..2
  (void)run.execute(out);
  CHECK(run.num_live_sequences() == 1);
  CHECK(run.stats().blocks_swapped_out == 3);

  StepPlan in;
  in.step_id = 3;
  in.finished_seq_ids = {2};
  in.swap_in = {BlockSwap{9, 3}, BlockSwap{5, 0}, BlockSwap{20, 2}};
  std::vector<int32_t> tokens = kPrompt;
  tokens.push_back(t1);
  in.new_seqs.push_back(NewSeq{1, tokens, 10, greedy(), {9, 5, 20}, 10, 1});
  const StepResult s2 = run.execute(in);
  CHECK(run.stats().blocks_swapped_in == 3);
  CHECK(s2.outputs.at(0).token == t2);
  CHECK(run.last_sampled_logits() == ref_logits2);  // bit for bit
  StepPlan next;
  next.step_id = 4;
  next.cached_seqs.push_back(CachedSeq{1, {t2}, {}, 11, 1});
  (void)run.execute(next);
  CHECK(run.last_sampled_logits() == ref_logits3);
}

TEST_CASE("cpu runner: a swap without swap space or with bad block ids is an error",
          "[exec][swap]") {
  ModelRunner none(make_cpu_backend(1), swap_init(0));
  StepPlan p;
  p.step_id = 1;
  p.swap_out = {BlockSwap{0, 0}};
  CHECK_THROWS_WITH(none.execute(p), Catch::Contains("no swap space"));

  ModelRunner run(make_cpu_backend(1), swap_init(int64_t(1) << 20));
  p.swap_out = {BlockSwap{0, run.info().num_cpu_blocks}};
  CHECK_THROWS_WITH(run.execute(p),
                    Catch::Contains("swap_blocks") && Catch::Contains("out of range"));
  p.swap_out = {BlockSwap{32, 0}};
  CHECK_THROWS_WITH(run.execute(p), Catch::Contains("out of range"));
}

TEST_CASE("cpu backend: swap_blocks copies blocks both ways and checks its arguments",
          "[exec][swap]") {
  auto b = make_cpu_backend(1);
  Buffer dev = b->allocate(4 * 2 * 3 * sizeof(float));
  Buffer host = b->allocate_host(2 * 2 * 3 * sizeof(float));
  const Tensor d = dev.tensor(DType::f32, {4, 2, 1, 3});
  const Tensor h = host.tensor(DType::f32, {2, 2, 1, 3});
  for (int i = 0; i < 24; ++i) d.as<float>()[i] = float(i);
  const std::vector<BlockCopy> out{{3, 0}, {1, 1}};
  b->swap_blocks(h, d, out);
  for (int i = 0; i < 6; ++i) {
    CHECK(h.as<float>()[i] == float(18 + i));
    CHECK(h.as<float>()[6 + i] == float(6 + i));
  }
  const std::vector<BlockCopy> in{{0, 0}, {1, 2}};
  b->swap_blocks(d, h, in);
  for (int i = 0; i < 6; ++i) {
    CHECK(d.as<float>()[i] == float(18 + i));
    CHECK(d.as<float>()[12 + i] == float(6 + i));
  }
  const Tensor wrong = host.tensor(DType::f32, {2, 3, 1, 2});
  CHECK_THROWS_WITH(b->swap_blocks(wrong, d, out), Catch::Contains("block shapes differ"));
  const std::vector<BlockCopy> bad{{4, 0}};
  CHECK_THROWS_WITH(b->swap_blocks(h, d, bad), Catch::Contains("source block 4 out of range"));
}
