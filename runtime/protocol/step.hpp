// The step messages between the scheduler and the executors, as plain structs.
//
// They cross process boundaries (a remote executor is a `troupe worker`), so every field is a
// plain value; actors/messages.hpp gives each an `inspect` overload. Plans carry diffs: a
// sequence's full data (its tokens so far, its sampling settings) goes to the executors once, in
// `new_seqs`; later plans carry only the tokens appended since (the ones the executor sampled
// itself last step), new block ids, and the ids of sequences to forget.
//
// There are no prefill and decode phases: each scheduled sequence gets `num_new_tokens` tokens
// starting at `num_computed_tokens`. A prefill, a chunk of a long prompt, a decode step and a
// recompute after preemption are all the same rule.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/sampling/logits_processors.hpp"
#include "runtime/sampling/sampling_knobs.hpp"

namespace troupe {

/// Prompt positions whose logprobs one step may compute (all sequences together). Logits rows
/// of a step are at most max_num_seqs (sampled tokens) plus this, so the executor can size its
/// logits buffer once; the scheduler shortens prompt-logprob chunks to stay within it.
inline int32_t prompt_logprob_rows_per_step(int32_t max_num_batched_tokens) {
  return max_num_batched_tokens < 2048 ? max_num_batched_tokens : 2048;
}

/// vLLM's decode-step CUDA-graph sizes up to `largest`: 1, 2, 4, then every 8 up to 256 and
/// every `step_past_256` past it, plus `largest` itself (none when largest < 1). Used by the
/// executor's default (decode_capture_sizes) and by --max-cudagraph-capture-size.
inline std::vector<int32_t> capture_size_pattern(int64_t largest, int32_t step_past_256 = 16) {
  std::vector<int32_t> sizes;
  if (largest < 1) return sizes;
  for (int64_t s : {1, 2, 4})
    if (s <= largest) sizes.push_back(int32_t(s));
  for (int64_t s = 8; s <= largest; s += s < 256 ? 8 : step_past_256) sizes.push_back(int32_t(s));
  if (sizes.back() != largest) sizes.push_back(int32_t(largest));
  return sizes;
}

/// Per-sequence sampling settings, fixed for the sequence's life: the knobs (sampling_knobs.hpp)
/// and what the executor needs around them (see SamplingRow for their meaning). Derived by the
/// engine from SamplingParams.
struct SeqSampling : SamplingKnobs {
  int32_t num_logprobs = -1;         // -1: none (not even the sampled token's); N: it + top N
  int32_t num_prompt_logprobs = -1;  // -1: none; N: logprob of each prompt token + top N
  int32_t min_tokens = 0;            // before this many outputs, `stop_ids` are banned
  std::vector<int32_t> stop_ids;     // eos (unless ignore_eos) and stop_token_ids
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<int32_t> allowed_token_ids;           // sorted, unique; empty: every token
  std::vector<std::vector<int32_t>> bad_words_ids;  // each bad word's tokens (logit_masks.hpp)
  std::vector<std::string> logits_processors;       // plug-in processors, "name[:argument]"
  // C++ callables: in-process executors only (not serialised; the engine refuses them when
  // executors are remote).
  std::vector<LogitsProcessorFn> logits_processor_fns;
  [[nodiscard]] bool has_processors() const {
    return !logits_processors.empty() || !logits_processor_fns.empty();
  }
};

/// A sequence the executors have not seen (or must forget and re-learn after preemption).
struct NewSeq {
  uint64_t seq_id = 0;
  std::vector<int32_t> token_ids;  // prompt followed by any outputs already generated
  int32_t num_prompt_tokens = 0;
  SeqSampling sampling;
  std::vector<int32_t> block_ids;  // block table covering num_computed + num_new tokens
  int32_t num_computed_tokens = 0;  // tokens whose KV is already in the cache (prefix hit)
  int32_t num_new_tokens = 0;
};

/// A sequence the executors already hold.
struct CachedSeq {
  uint64_t seq_id = 0;
  std::vector<int32_t> appended_token_ids;  // outputs sampled since the last plan
  std::vector<int32_t> new_block_ids;       // appended to its block table
  int32_t num_computed_tokens = 0;
  int32_t num_new_tokens = 0;
};

/// One KV block moved between the GPU pool and the CPU swap space (swap out: gpu -> cpu;
/// swap in: cpu -> gpu). Every layer's K and V slices of the block move together.
struct BlockSwap {
  int32_t gpu_block = 0;
  int32_t cpu_block = 0;
};

/// One KV block copied inside the GPU pool (copy-on-write of a beam's partly filled last block
/// when two beams continue from one parent): every layer's K and V slices of `src` go to `dst`.
struct BlockCopyPlan {
  int32_t src = 0;
  int32_t dst = 0;
};

struct StepPlan {
  uint64_t step_id = 0;
  std::vector<NewSeq> new_seqs;
  std::vector<CachedSeq> cached_seqs;
  std::vector<uint64_t> finished_seq_ids;  // forget these (finished, aborted or preempted)
  // Block copies the executor makes before the step's forward, in this order: swap_out, then
  // swap_in, then compute. A swapped-out sequence is also in finished_seq_ids (the executor
  // forgets it); a swapped-in one comes back as a NewSeq whose num_computed_tokens are the
  // tokens whose KV the swap-in restores.
  std::vector<BlockSwap> swap_out;
  std::vector<BlockSwap> swap_in;
  // Copies inside the GPU pool, made after swap_out and before swap_in (a copy's source is a
  // block running beams hold; its destination a block just allocated, maybe one a swap-out of
  // this step vacated): beam forks, runtime/sched/beam_search.hpp.
  std::vector<BlockCopyPlan> copy_blocks;
  [[nodiscard]] bool empty() const { return new_seqs.empty() && cached_seqs.empty(); }
  [[nodiscard]] bool has_swaps() const { return !swap_out.empty() || !swap_in.empty(); }
};

struct LogprobEntry {
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
};

/// One token position's logprobs: the chosen token first, then the top N.
struct PositionLogprobs {
  LogprobEntry chosen;
  std::vector<LogprobEntry> top;
};

struct SeqStepOutput {
  uint64_t seq_id = 0;
  bool sampled = false;   // false for a prompt chunk that did not reach the end
  int32_t token = -1;     // the sampled token when `sampled`
  PositionLogprobs logprobs;  // of the sampled token (top empty unless requested)
  /// Prompt logprobs of the prompt positions this step computed, in order; the first
  /// position of the prompt has none and is skipped.
  std::vector<PositionLogprobs> prompt_logprobs;
};

struct StepResult {
  uint64_t step_id = 0;
  std::vector<SeqStepOutput> outputs;  // one per scheduled sequence, in plan order
  double execute_seconds = 0.0;        // time inside the executor
};

/// What an executor is asked to load at start-up.
struct ExecutorInit {
  std::string model_dir;
  std::string load_format = "auto";  // auto | safetensors | dummy
  std::string dtype = "auto";
  std::string device = "cpu";  // cpu | cuda
  int32_t device_index = 0;
  int32_t tp_rank = 0, tp_size = 1, pp_rank = 0, pp_size = 1;
  int32_t block_size = 16;
  int32_t max_num_batched_tokens = 8192;
  int32_t max_num_seqs = 256;
  int32_t max_model_len = 0;
  uint64_t seed = 0;
  int64_t kv_cache_memory_bytes = 0;  // 0: derive from the device
  double gpu_memory_utilization = 0.9;
  int64_t num_gpu_blocks_override = 0;
  bool enforce_eager = false;
  int32_t max_seq_len_to_capture = 8192;  // longest sequence a decode step replays a graph for
  std::vector<int32_t> cudagraph_capture_sizes;  // empty: the default sizes (model_runner.hpp)
  int64_t swap_space_bytes = 0;  // host memory for swapped-out KV blocks (0: no swap space)
  // host:port of a memory node (`troupe worker --kv-store`) holding that swap space instead of
  // this process ("": local host memory).
  std::string swap_space_remote;
  std::vector<std::string> logits_processor_plugins;  // shared libraries to load (absolute)
  // Faults to inject on this rank (runtime/faults/fault_spec.hpp, as written; the head checked
  // them), and whether this executor runs in a `troupe worker` process (which a kill-worker or
  // a freeze then stops) rather than in the engine's own.
  std::vector<std::string> faults;
  bool in_worker_process = false;
  bool batch_invariant = false;  // Backend::set_batch_invariant
};

/// The second start-up message of an executor in a group: its peers' endpoints, to connect
/// its wires to: every rank of its TP group in tp_rank order, and every stage of its pipeline
/// (the ranks with its tp_rank) in stage order, its own included; empty where it has none.
/// Every rank connects at once.
struct WirePeers {
  std::vector<std::vector<uint8_t>> tp;
  std::vector<std::vector<uint8_t>> stages;
};

/// Where an executor sits in a parallel layout and which wires join it to its peers: the
/// first of its two start-up messages (prepare, then init). Every rank of a TP group and every
/// stage are started this way, so the group's wires exist before any rank loads its weights.
struct ExecutorPlacement {
  int32_t tp_rank = 0, tp_size = 1, pp_rank = 0, pp_size = 1;
  std::string device = "cpu";  // cpu | cuda
  int32_t device_index = 0;
  std::string collectives = "none";  // the TP group's wire: none (TP = 1) | shm | ucx | nccl
  std::string stage_link = "none";   // the pipeline's wire: none (PP = 1) | ucx
  std::string ucx_tls = "auto";      // tcp | sm | auto (UCX's own choice)
  std::string ucx_net_devices;       // UCX_NET_DEVICES for its wires ("": UCX's choice)
  int32_t timeout_ms = 30000;        // the longest any collective or hand-off waits for a peer
  // Ranks of the group on this rank's host: a CPU rank takes its share of the host's cores
  // (ranks spin in the collectives, so more threads than cores would slow every rank).
  int32_t ranks_on_host = 1;
  // collectives = nccl: the custom all-reduce over CUDA IPC for small messages as well
  // (transport/nccl/tp_collectives.hpp; off with --disable-custom-all-reduce, or across hosts).
  bool custom_all_reduce = false;
};

/// The executor's answer to its placement: what its peers need to reach its ends of the wires
/// (a shared-memory name, a UCX worker address, an NCCL unique id: bytes the head passes on).
struct ExecutorEndpoints {
  std::vector<uint8_t> collectives;  // its end of the TP group (empty when none)
  std::vector<uint8_t> stage;        // its pipeline endpoint (empty when none)
  std::string hostname;              // the machine it runs on
  int32_t pid = 0;
};

/// A rank's KV cache (and local swap space) as the executor taking its place reads them (a
/// drained worker's rank moving to a spare, actors/executor_group.hpp): descriptors of UCX
/// regions over that memory (transport/kv/kv_region.hpp), empty where there is none.
struct KvExport {
  std::vector<uint8_t> cache;
  std::vector<uint8_t> swap;
};

/// What the executor taking a rank's place copies from the old one: the blocks with contents
/// (same ids on both sides, so every block table stays valid).
struct KvImport {
  KvExport from;
  std::vector<int32_t> blocks;      // of the KV cache
  std::vector<int32_t> cpu_blocks;  // of the swap space (swapped-out sequences)
};

/// What it reports once loaded: the cache it can hold.
struct ExecutorInfo {
  int32_t num_blocks = 0;
  int32_t num_cpu_blocks = 0;  // swap-space blocks: swap_space_bytes / kv_block_bytes
  int64_t kv_block_bytes = 0;  // one block across all layers, K and V
  int64_t kv_cache_bytes = 0;
  int64_t weight_bytes = 0;
  std::string backend;  // "cpu", "cuda:0"
  double load_seconds = 0.0;
  // What it loaded, so that the head can refuse a group whose ranks read different
  // checkpoints: config.json's architecture and a hash of its bytes and of the weight files'
  // names and sizes (dummy weights: of config.json and the seed).
  std::string checkpoint_fingerprint;
};

}  // namespace troupe
