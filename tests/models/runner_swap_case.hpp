// The ModelRunner swap round trip, for every backend (tests/models/test_model_runner_swap.cpp
// on the CPU, tests/cuda/test_cuda_swap.cpp on the GPU): a sequence's KV blocks swapped out
// to the host pool, the device blocks overwritten by another sequence, and swapped back into
// other device blocks (in another order) must give the very logits of a run that never
// swapped, for two steps after the swap in.
#pragma once

#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/exec/model_runner.hpp"

namespace troupe::testing {

/// The llama_gqa fixture with 32 device blocks of `block_size` tokens and `swap_space_bytes`
/// of swap space, on `device`.
inline ExecutorInit swap_runner_init(const std::string& device, int32_t block_size,
                                     int64_t swap_space_bytes) {
  ExecutorInit init;
  init.model_dir = std::string(TROUPE_FIXTURES_DIR) + "/models/llama_gqa";
  init.device = device;
  init.dtype = "float32";
  init.block_size = block_size;
  init.max_num_batched_tokens = 64;
  init.max_num_seqs = 4;
  init.max_model_len = 64;
  init.num_gpu_blocks_override = 32;
  init.swap_space_bytes = swap_space_bytes;
  return init;
}

/// The round trip with runners made by make_runner(swap_space_bytes); their block size is
/// `block_size` (the prompt fills three blocks, the last one partly).
inline void check_swap_round_trip(
    const std::function<std::unique_ptr<ModelRunner>(int64_t)>& make_runner,
    int32_t block_size) {
  SeqSampling greedy;
  greedy.temperature = 0.0f;
  const std::vector<int32_t> tokens{5, 17, 3, 99, 42, 7, 8, 61, 12, 30, 1, 2, 3, 4, 5, 6, 7, 8,
                                    9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24};
  const auto n = int32_t(2 * block_size + 2);
  REQUIRE(size_t(n) <= tokens.size());
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + n);

  // Reference: prefill, then two decode steps, never swapped.
  const std::unique_ptr<ModelRunner> ref = make_runner(0);
  CHECK(ref->info().num_cpu_blocks == 0);
  StepPlan p1;
  p1.step_id = 1;
  p1.new_seqs.push_back(NewSeq{1, prompt, n, greedy, {0, 1, 2}, 0, n});
  const StepResult r1 = ref->execute(p1);
  REQUIRE(r1.outputs.at(0).sampled);
  const int32_t t1 = r1.outputs[0].token;
  StepPlan p2;
  p2.step_id = 2;
  p2.cached_seqs.push_back(CachedSeq{1, {t1}, {}, n, 1});
  const StepResult r2 = ref->execute(p2);
  const std::vector<float> ref_logits2 = ref->last_sampled_logits();
  const int32_t t2 = r2.outputs.at(0).token;
  StepPlan p3;
  p3.step_id = 3;
  p3.cached_seqs.push_back(CachedSeq{1, {t2}, {}, n + 1, 1});
  (void)ref->execute(p3);
  const std::vector<float> ref_logits3 = ref->last_sampled_logits();

  // With swap space: the same prefill, then swap out (and forget), let another sequence write
  // the same device blocks, then swap in to blocks {9, 5, 20} and continue.
  const std::unique_ptr<ModelRunner> run = make_runner(int64_t(1) << 20);
  REQUIRE(run->info().num_cpu_blocks > 3);
  CHECK(run->info().kv_block_bytes > 0);
  CHECK(run->info().num_cpu_blocks == int32_t((int64_t(1) << 20) / run->info().kv_block_bytes));
  REQUIRE(run->execute(p1).outputs.at(0).token == t1);

  StepPlan out;
  out.step_id = 2;
  out.finished_seq_ids = {1};
  out.swap_out = {BlockSwap{0, 3}, BlockSwap{1, 0}, BlockSwap{2, 2}};
  std::vector<int32_t> other(size_t(n), 0);
  for (size_t i = 0; i < other.size(); ++i) other[i] = int32_t(200 + i);
  out.new_seqs.push_back(NewSeq{2, other, n, greedy, {2, 0, 1}, 0, n});  // reuses 0..2
  (void)run->execute(out);
  CHECK(run->num_live_sequences() == 1);
  CHECK(run->stats().blocks_swapped_out == 3);

  StepPlan in;
  in.step_id = 3;
  in.finished_seq_ids = {2};
  in.swap_in = {BlockSwap{9, 3}, BlockSwap{5, 0}, BlockSwap{20, 2}};
  std::vector<int32_t> grown = prompt;
  grown.push_back(t1);
  in.new_seqs.push_back(NewSeq{1, grown, n, greedy, {9, 5, 20}, n, 1});
  const StepResult s2 = run->execute(in);
  CHECK(run->stats().blocks_swapped_in == 3);
  CHECK(s2.outputs.at(0).token == t2);
  CHECK(run->last_sampled_logits() == ref_logits2);  // bit for bit
  StepPlan next;
  next.step_id = 4;
  next.cached_seqs.push_back(CachedSeq{1, {t2}, {}, n + 1, 1});
  (void)run->execute(next);
  CHECK(run->last_sampled_logits() == ref_logits3);
}

}  // namespace troupe::testing
