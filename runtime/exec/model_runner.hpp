// The executor's logic, with no actors: holds one rank's model, its KV cache and the
// persistent batch (every live sequence's tokens, block table and sampling state), and turns a
// StepPlan into a StepResult.
//
// The persistent batch is what lets plans carry diffs: a sequence's tokens and settings
// arrive once; later plans only append tokens and blocks, and name the sequences to forget.
//
// Decode steps and CUDA graphs (vLLM's cudagraph capture). A step in which every scheduled
// sequence computes exactly one token, with at most the largest capture size of sequences and
// none longer than max_seq_len_to_capture, is padded to the next capture size (1, 2, 4, 8, ...
// up to max_num_seqs, at most 512) and its inputs are uploaded into fixed device buffers
// (step_inputs.hpp says what padding holds). The first step of each size runs eagerly on
// those buffers, which also loads its kernels and GEMM plans, and is then recorded as a graph;
// later steps of that size only upload and replay it. Sampling stays outside the graph. Every
// other step (prefill chunks, mixed batches, long sequences) runs eagerly at its exact size.
//
// Under enforce_eager the padded steps are padded all the same, only never recorded: the
// GEMMs' algorithms and the decode attention's split depend on the batch shape, so padding in
// both modes is what makes a graph step compute the same bits as an eager one.
//
// Pipelined steps: the executor actor runs each step as launch / finish (of the step before) /
// start_sampling, so the next step's forward is on the device before this step's tokens reach
// the host; those tokens are fed into its inputs on the device (see "pipelined steps" below).
//
// Pipeline stages (ExecutorInit::pp_size > 1): every stage gets every plan and keeps the same
// persistent batch, so each builds the step's inputs (positions, slots, attention metadata)
// itself; only the hidden states [T, H] cross between stages, over the StageLink, tagged with
// the step id: a stage past the first receives them into its model's stage input before the
// forward, a stage before the last sends its forward's output on and samples nothing (its
// sequences' tokens arrive in the plans, as the scheduler never plans a sequence into two steps
// in flight under PP). Tensor parallelism needs nothing here: the backend carries the group.
//
// Swap space: with ExecutorInit::swap_space_bytes > 0 the runner also holds a host KV cache
// of num_cpu_blocks blocks (allocate_host: page-locked on CUDA), laid out like the device one
// (per layer K and V, [num_cpu_blocks, block_size, num_kv_heads, d]). A plan's swap_out and
// swap_in pairs are copied, every layer's K and V, in that order before the step's forward,
// all on the backend's stream. A swapped-out sequence is forgotten (it is in
// finished_seq_ids) and comes back as a NewSeq with its new block table.
//
// Remote swap space (ExecutorInit::swap_space_remote, runtime/exec/remote_swap.hpp): the
// num_cpu_blocks blocks live in a memory node's host memory and kv_host_ is only a staging
// cache of at most kRemoteSwapStagingBlocks blocks. A swap goes through it in chunks: swap out
// copies a chunk device -> staging, waits for the stream and writes it to the node; swap in
// reads a chunk into staging, copies it to the device and waits. Swap steps run with nothing
// in flight (needs_finish), so the waits cost only the copies themselves.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/backend/backend.hpp"
#include "runtime/backend/collectives.hpp"
#include "runtime/checkpoint/model_config.hpp"
#include "runtime/exec/remote_swap.hpp"
#include "runtime/exec/step_inputs.hpp"
#include "runtime/models/model.hpp"
#include "runtime/protocol/step.hpp"

namespace troupe {

/// Knobs of the model runner that ExecutorInit does not carry (tests use them).
struct RunnerOptions {
  enum class PadDecode : uint8_t {
    automatic,  // pad decode steps where the backend can capture graphs (CUDA)
    always,     // on any backend: the CPU then runs the padded inputs eagerly (tests)
    never,      // every step at its exact size (and so no graphs)
  };
  PadDecode pad_decode = PadDecode::automatic;
  /// Test aid: run the maximum-size profiling step on a host backend too (it runs on device
  /// backends when the KV cache is sized by gpu_memory_utilization).
  bool profile_on_host = false;
  /// Construct only (load the weights); start() sizes the KV cache and records the graphs
  /// later. The executor of a parallel group does this: its ranks load a few at a time
  /// (--max-parallel-loading-workers) but must start together, as the profiling step and the
  /// graphs' warm-up run the group's collectives.
  bool defer_start = false;
  /// Reaches the memory node of ExecutorInit::swap_space_remote (the executor actor makes it
  /// over CAF and UCX); required when that field is set.
  RemoteSwapConnector remote_swap;
};

/// The KV cache's share of device memory under gpu_memory_utilization, vLLM V1's rule: this
/// process may use total × utilization; what it took between `at_start` (before the weights)
/// and `after_profile` (weights, activation buffers, workspaces and a maximum-size step done)
/// is not available to the KV cache; the rest is, if the device has it free now (other
/// processes' memory counts against what is free, not against the fraction, so several
/// engines can share one GPU at fractions that add up to at most 1). Throws troupe::Error
/// naming gpu_memory_utilization when nothing is left or the device lacks the memory.
/// The dtype a model runs in, by vLLM's --dtype rules: an explicit float dtype wins; "auto"
/// keeps a float16 or bfloat16 checkpoint's dtype and runs a float32 checkpoint in float16 on
/// a GPU (float32 on the CPU, which computes in float32 anyway). Throws troupe::Error naming
/// dtype for anything else.
[[nodiscard]] DType resolve_model_dtype(const std::string& requested, DType checkpoint,
                                        DeviceKind device);

[[nodiscard]] int64_t kv_cache_budget(const MemoryInfo& at_start, const MemoryInfo& after_profile,
                                      double gpu_memory_utilization);

/// What the runner did so far (tests check that the path they meant to test was taken).
struct RunnerStats {
  int64_t steps = 0;            // steps with at least one scheduled sequence
  int64_t padded_steps = 0;     // of which ran on padded fixed-buffer inputs
  int64_t graph_replays = 0;    // of which replayed a recorded graph
  int32_t graphs_captured = 0;  // batch sizes recorded so far
  // Host wall time of execute(), in three parts: reading the plan and uploading the inputs;
  // enqueueing the forward (or replaying its graph); sampling, which waits for the GPU, and
  // the logprobs read back.
  double prepare_seconds = 0, forward_seconds = 0, sample_seconds = 0;
  int64_t blocks_swapped_out = 0;
  int64_t blocks_swapped_in = 0;
  int64_t blocks_copied = 0;  // copy-on-write copies of beam forks (StepPlan::copy_blocks)
  // Host wall time of the swaps (on the CPU backend the copies themselves; on CUDA a local
  // swap only enqueues them), for the executor's closing log line.
  double swap_out_seconds = 0, swap_in_seconds = 0;
};

/// Decode batch sizes that get a graph (vLLM's): 1, 2, 4, then multiples of 8 up to 256 and
/// of 16 past it, up to min(max_num_seqs, max_num_batched_tokens, 512), plus that limit
/// itself when it is not one. `requested` (ExecutorInit::cudagraph_capture_sizes, from
/// --cudagraph-capture-sizes and friends) replaces that list, less the sizes above
/// min(max_num_seqs, max_num_batched_tokens). A step pads to the next size (larger batches
/// run eagerly); with graphs on, every size is recorded when the runner is made.
[[nodiscard]] std::vector<int32_t> decode_capture_sizes(
    int32_t max_num_seqs, int32_t max_num_batched_tokens,
    const std::vector<int32_t>& requested = {});

class ModelRunner {
 public:
  /// Loads the model described by `init` onto `backend` and sizes the KV cache. Throws
  /// troupe::Error on a bad checkpoint, an unsupported dtype or too little memory.
  ModelRunner(std::unique_ptr<Backend> backend, const ExecutorInit& init,
              const RunnerOptions& options = {}, std::shared_ptr<StageLink> stage_link = nullptr);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  /// Sizes the KV cache and records the decode graphs (see RunnerOptions::defer_start). Once.
  void start();

  // ---- a rank moved to another executor (a drained worker, actors/executor_group.hpp) ----
  /// Where the KV cache (`swap_space`: the local swap space) lies in this process's memory:
  /// planes layer 0 K, layer 0 V, layer 1 K, ..., each [num_blocks, block_size, num_kv_heads,
  /// head_dim], slice_bytes per block in a plane. Throws troupe::Error when it is not host
  /// memory (the CUDA backend: not supported yet); base is null when there is no local swap
  /// space (none, or a memory node's).
  struct KvMemory {
    void* base = nullptr;
    int32_t num_layers = 0;
    int64_t num_blocks = 0;
    int64_t slice_bytes = 0;
  };
  [[nodiscard]] KvMemory kv_memory(bool swap_space) const;
  /// Replaces the TP group and the stage link: the group's wires were joined again around a
  /// rank that moved. Nothing may be in flight.
  void replace_wires(std::shared_ptr<Collectives> group, std::shared_ptr<StageLink> link);
  [[nodiscard]] Backend& backend() { return *backend_; }
  [[nodiscard]] bool started() const { return started_; }

  [[nodiscard]] const ExecutorInfo& info() const { return info_; }
  [[nodiscard]] const ModelConfig& model_config() const { return config_; }

  /// Runs one step: launch, start_sampling and finish. Throws troupe::Error on an
  /// inconsistent plan (unknown sequence, block table too short): the scheduler and executor
  /// disagree, which is a bug to surface. Nothing may be in flight.
  [[nodiscard]] StepResult execute(const StepPlan& plan);

  // ---- pipelined steps (the executor actor's) ----
  // A step in three calls, so that the next step's forward is enqueued before this one's
  // tokens reach the host and the GPU does not wait for the host between steps:
  //   launch(N+1)        uploads N+1's inputs, feeds the tokens step N is still sampling into
  //                      them on the device (Backend::feed_sampled_tokens) and enqueues the
  //                      forward;
  //   finish()           waits for step N's tokens and returns N's result;
  //   start_sampling()   enqueues N+1's sampling (its rows need N's tokens: penalties, offsets).
  // A step with prompt logprobs, or with no row to sample, completes inside start_sampling.
  // At most one step launched and one sampling at a time.

  /// Enqueues a step's forward. Throws troupe::Error on an inconsistent plan, or when the
  /// plan must wait for the step in flight (must_finish_before).
  void launch(const StepPlan& plan);
  /// Enqueues the launched step's sampling (or completes the step, see above).
  void start_sampling();
  /// Whether finish() would return without waiting.
  [[nodiscard]] bool pending_done();
  /// The result of the step whose sampling started; waits for its tokens. Throws what
  /// sampling throws.
  [[nodiscard]] StepResult finish();
  /// True when `plan` forgets, re-adds or swaps a sequence that the step in flight is still
  /// sampling for, or swaps any blocks: finish that step before launching it.
  [[nodiscard]] bool must_finish_before(const StepPlan& plan) const;
  [[nodiscard]] bool sampling_in_flight() const { return pending_.has_value(); }
  [[nodiscard]] bool launched() const { return launched_.has_value(); }

  [[nodiscard]] size_t num_live_sequences() const { return seqs_.size(); }
  /// Forgets every sequence and any step in flight, after waiting for the device (after a
  /// failed step the scheduler starts afresh).
  void reset_batch();

  [[nodiscard]] const RunnerStats& stats() const { return stats_; }
  /// Capture sizes in use (ascending); empty when decode steps are not padded.
  [[nodiscard]] const std::vector<int32_t>& capture_sizes() const { return capture_sizes_; }
  /// Test aid: the f32 logits the last step sampled from, [sampled sequences, vocab] row-major
  /// in plan order (empty when it sampled nothing). Valid until the next execute().
  [[nodiscard]] std::vector<float> last_sampled_logits();

 private:
  struct LiveSeq {
    std::vector<int32_t> tokens;
    int32_t num_prompt = 0;
    SeqSampling sampling;
    std::vector<int32_t> block_table;
    int32_t num_computed = 0;
    // The last tokens of `tokens` that this executor sampled and the scheduler has not
    // confirmed yet (CachedSeq::appended_token_ids confirms them in order). A plan made ahead
    // (async scheduling) computes such a token before the scheduler knows it. A confirmation
    // that differs replaces the token if no step has computed on it yet.
    int32_t num_unconfirmed = 0;
    // The position whose token the sampling in flight is drawing (row awaited_row of it); the
    // token there is a placeholder until finish(). -1: none.
    int32_t awaited = -1;
    int32_t awaited_row = -1;
  };
  struct Scheduled {
    uint64_t seq_id;
    LiveSeq* seq;
    int32_t start;  // first position computed this step
    int32_t count;  // tokens computed this step
  };

  struct PromptRows {
    size_t sched_index;
    int32_t first_position;
    int32_t count;
    int32_t first_row;
  };
  // A step whose forward is enqueued (launch) and whose sampling is not yet.
  struct Launched {
    StepResult result;
    std::vector<Scheduled> sched;
    std::vector<size_t> sampled;  // indices into sched, in sampling-row order
    std::vector<PromptRows> prompt_rows;
    size_t num_logits = 0;
    bool dummy_logits = false;
    Tensor logits;
    double busy_seconds = 0;  // host time in launch
  };
  struct PendingRow {
    uint64_t seq_id;
    LiveSeq* seq;
    size_t output;  // index into the result's outputs
  };
  // A step whose sampling is in flight (or that completed inside start_sampling).
  struct Pending {
    StepResult result;
    std::vector<PendingRow> rows;  // one per sampling row
    bool completed = false;
    // Host time in launch and start_sampling; finish adds its own (waiting for the tokens
    // included) for StepResult::execute_seconds, which then does not count the time the step
    // sat in flight while the executor served the next one.
    double busy_seconds = 0;
  };

  // A recorded decode step of one batch size and the logits tensor its replays write.
  struct DecodeGraph {
    std::unique_ptr<CapturedGraph> graph;
    Tensor logits;
  };

  void size_kv_cache(const ExecutorInit& init, const MemoryInfo& at_start, bool profile_on_host);
  void allocate_kv(int64_t num_blocks);
  /// Runs one step of max_num_batched_tokens prompt tokens over up to max_num_seqs sequences,
  /// sampled with top-k, top-p and logprobs, on a temporary KV cache, then forgets it: every
  /// buffer a step can need is then allocated, so the memory left is what the KV cache can
  /// take.
  void profile_max_step();
  void size_kv_cache(const ExecutorInit& init);
  void size_swap_space(const ExecutorInit& init, size_t per_block);
  /// The hand-off of a step's hidden states: received into the model's stage input before a
  /// forward (stages past the first), sent on after it (stages before the last).
  void receive_stage_input(uint64_t step_id, int32_t num_tokens);
  void send_stage_output(uint64_t step_id, const Tensor& hidden);
  /// Copies the pairs' blocks of every layer's K and V (to_host: device -> host).
  void swap(const std::vector<BlockSwap>& pairs, bool to_host);
  void copy_blocks(const std::vector<BlockCopyPlan>& copies);
  /// The same through the staging cache and the memory node (remote_swap_ set).
  void swap_remote(const std::vector<BlockSwap>& pairs, bool to_host);
  /// Copies every layer's K and V of swap_pairs_ (to_host: device -> kv_host_).
  void copy_swap_pairs(bool to_host);
  void setup_decode_graphs(const ExecutorInit& init, const RunnerOptions& options);
  void ensure_input_capacity(size_t tokens, size_t seqs, size_t max_blocks);
  /// The capture size a step of these sequences pads to, or 0 when it runs at its exact size.
  // Records the graph of every capture size at start-up (when graphs are on).
  void capture_decode_graphs();
  [[nodiscard]] int32_t padded_batch_size(const std::vector<Scheduled>& sched, int32_t max_seq,
                                          bool prompt_logprobs) const;
  /// Runs the padded step whose inputs are in graph_inputs_: replays its graph, or runs it
  /// eagerly (and records it, the first time, when graphs are on). Returns the logits.
  Tensor run_padded_step(int32_t size, const ForwardInputs& in);
  /// Runs `s`'s logits processors on its row of the step's logits and puts what they changed
  /// at the front of `bias` (logits_processors.hpp).
  void apply_processors(const Tensor& logits_row, const LiveSeq& s,
                        std::vector<std::pair<int32_t, float>>& bias);
  [[nodiscard]] PositionLogprobs prompt_logprobs_row(const float* row, int32_t next_token,
                                                     int32_t top_n) const;

  std::unique_ptr<Backend> backend_;
  ExecutorInit init_;
  RunnerOptions options_;
  MemoryInfo at_start_;  // device memory before the weights (gpu_memory_utilization's base)
  bool started_ = false;
  std::chrono::steady_clock::time_point constructed_;
  ModelConfig config_;
  std::unique_ptr<CausalLM> model_;
  // Pipeline stages: the link to the neighbours and the host staging of the hidden states.
  std::shared_ptr<StageLink> stage_link_;
  Buffer stage_host_;
  bool profiling_ = false;  // the profiling step runs alone: no hand-off
  ExecutorInfo info_;
  int32_t block_size_ = 16;
  int32_t max_num_batched_tokens_ = 0;
  int32_t max_num_seqs_ = 0;
  int32_t max_logits_rows_ = 0;
  int32_t max_model_len_ = 0;

  Buffer kv_buffer_;
  KVCacheView kv_;
  Buffer kv_host_buffer_;  // swap space (empty without one)
  KVCacheView kv_host_;
  std::vector<BlockCopy> swap_pairs_;  // staging
  std::unique_ptr<RemoteSwapSpace> remote_swap_;  // set: kv_host_ stages for a memory node
  std::vector<RemoteSwapMove> remote_moves_;

  // Device-side step inputs, grown when a step needs more.
  Buffer input_buffer_;
  size_t input_capacity_bytes_ = 0;

  std::unordered_map<uint64_t, LiveSeq> seqs_;
  std::vector<int32_t> host_inputs_;  // staging for the step's single upload

  // Padded decode steps (see the header comment). graphs_ is declared after backend_, so it
  // is destroyed first: a graph must not outlive the stream it was recorded on.
  bool pad_decode_ = false;
  bool use_graphs_ = false;
  std::vector<int32_t> capture_sizes_;
  int32_t max_seq_len_to_capture_ = 0;
  int32_t graph_max_blocks_ = 0;  // block table width of the padded inputs
  Buffer graph_inputs_;           // fixed: recorded graphs read their inputs from here
  std::map<int32_t, DecodeGraph> graphs_;

  std::optional<Launched> launched_;
  std::optional<Pending> pending_;
  std::vector<TokenFeed> token_feeds_;  // staging

  std::unique_ptr<LogitsProcessorPlugins> plugins_;    // null: none loaded
  std::vector<float> processor_raw_, processor_work_;  // staging: one row [vocab]

  RunnerStats stats_;
  Tensor last_logits_;
  int32_t last_num_sampled_ = 0;
};

}  // namespace troupe
