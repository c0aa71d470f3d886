// The engine's request and output logic, as plain C++ with no actors: checks that need the
// model, the fan-out of a request into sequences, and everything between a sequence's sampled
// tokens and the RequestOutputs its caller receives (incremental text, stop strings, logprobs,
// finish reasons, the assembly of a request's sequences into one output). The engine actor
// (actors/engine_actor.cpp) only turns what each call returns (Actions) into messages: text
// work to the tokenizer pool, aborts to the scheduler, outputs to each request's sink.
//
// One request's life:
//   add()          checks it, truncates its prompt, makes its sequences (n > 1: n of them, seeds
//                  seed + i) as SeqSpecs for the scheduler and DetokOpens for the detokenizers;
//   on_updates()   takes each step's SeqUpdates (tokens, logprobs, a finish by the scheduler's
//                  stop rules) and asks for their text (Actions::detokenize);
//   on_text()      takes the text, adds it and its step's tokens to the output together (so no
//                  output shows tokens ahead of its text), applies stop strings (a match ends
//                  the sequence and asks the scheduler to drop it: Actions::abort) and
//                  finishes the sequences whose last text arrived: a finish waits for its
//                  text, so the final output holds it all;
//   abort(), fail_sequences()
//                  end a request early: the caller's abort; a detokenizer error, which fails
//                  exactly the requests whose sequences it hit, with the reason.
// Outputs go out after every change when streaming (stream_interval > 1: fewer), once at the
// end otherwise; a finished request is forgotten. A streamed request's outputs are cumulative
// (the whole request so far, as the C++ API shows them) or deltas (OutputKind::delta, as the
// server asks: only what is new, so a step costs what it added, not the length so far). A delta
// never takes back text: while a sequence with stop strings runs, its last (longest stop - 1)
// bytes are held back (never splitting a UTF-8 character), since a stop string completed by a
// later token cuts them off; they go out once the sequence finishes (vLLM's detokenizer holds
// back the same in its DELTA mode).
//
// Times (RequestOutput::metrics, CompletionOutput::times): a request arrives when add() queues it
// for the scheduler; the scheduler says when it first scheduled each sequence (SeqUpdate::
// first_scheduled, kept through preemption) and when each step's result came back
// (SeqUpdate::time: a sequence's token times); the request finishes when its last sequence does.
// Every time is read from the steady clock and shown on the epoch clock through one offset per
// process, so differences stay exact.
//
// Sequences that fork. A request holds its sequences (Sequence, one CompletionOutput each) in a
// list, each found by its sequence id; assemble() alone turns that list into the RequestOutput.
// Beam search (use_beam_search): the request's n Sequences are its n results; the scheduler
// runs the beams (runtime/sched/beam_search.hpp) from one root SeqSpec (the first Sequence's
// id) and, when the search ends, sends each result's tokens and logprobs to one of the n ids
// in a single finishing update, best first. Nothing streams before that; cumulative_logprob is
// always set (the hypothesis' sum of logprobs, which its score divides by length ** penalty).
//
// best_of > n (vLLM V0's semantics): best_of sequences are sampled (seeds seed + i, as for n) and
// assemble() returns the n with the highest cumulative logprob of their sampled tokens (raw
// logprobs, as every logprob troupe returns; ties by lower sample index), best first, indexed
// 0..n-1 in that order. Every sequence computes its sampled token's logprob for the ranking even
// without `logprobs` (cumulative_logprob is still None then, as for n). A sampled logprob is
// <= 0, so a sequence's score only falls: once n sequences have finished, a running one already
// below the n-th best finished score can never be returned and is aborted at once (its KV blocks
// freed), and a finished one below it drops its output. Such a request streams nothing until it
// finishes: the ranking is only known then.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/api/outputs.hpp"
#include "runtime/config/sampling_params.hpp"
#include "runtime/sched/scheduler.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace troupe {

/// What requests are checked and built against.
struct OutputProcessorConfig {
  int32_t max_model_len = 0;
  int32_t vocab_size = 0;
  int32_t max_logprobs = 20;  // -1: no limit
  std::vector<int32_t> eos_token_ids;
  uint64_t seed = 0;  // seeds the generator that unseeded requests draw their seeds from
  bool log_requests = false;
  int32_t max_log_len = 0;  // 0: whole prompts in the request log
  /// A streamed request's output goes out once some sequence has this many tokens more than
  /// it had in the last output, or its first token, or finished (vLLM's stream_interval).
  int32_t stream_interval = 1;
  /// The logits-processor plug-ins the executors load too (null: none): request names are
  /// checked against them.
  std::shared_ptr<const LogitsProcessorPlugins> plugins;
  /// False when the executors are in other processes: C++ callables cannot reach them.
  bool in_process_executors = true;
  int32_t max_num_seqs = 0;  // a beam request's best_of must fit (0: not checked)
  // The KV cache (0: not checked): a beam group is admitted whole, so all its beams' blocks at
  // their longest must fit at once.
  int32_t kv_blocks = 0, kv_block_size = 0;
  std::string beam_search_refusal;  // why use_beam_search is refused here ("": it is not)
};

/// A new sequence's incremental detokenizer; opened before any of its tokens are pushed.
struct DetokOpen {
  uint64_t seq_id = 0;
  std::vector<int32_t> prompt_token_ids;
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;
};

/// One sequence's new tokens for its incremental detokenizer.
struct DetokPush {
  uint64_t seq_id = 0;
  std::vector<int32_t> new_token_ids;
  bool finish = false;  // flush and forget this sequence after these tokens
};

class OutputProcessor {
 public:
  /// `tokenizer` null: no text at all (skip_tokenizer_init); prompts must be token ids.
  OutputProcessor(OutputProcessorConfig config, std::shared_ptr<const Tokenizer> tokenizer);

  /// Every check of `params` that needs no prompt: validate() and those that need the model
  /// (logprob counts, token ids). Throws troupe::Error naming the field.
  void check(const SamplingParams& params) const;

  struct Admission {
    std::string request_id;
    std::vector<SeqSpec> seqs;          // for the scheduler
    std::vector<DetokOpen> detok_open;  // for the detokenizers, before any of their pushes
  };
  /// Accepts a request: check(), the prompt's own checks (after truncate_prompt_tokens), then
  /// its sequences. `request_id` "" gets the next free number. Throws troupe::Error naming the
  /// field; nothing is kept then.
  [[nodiscard]] Admission add(std::string request_id, std::string prompt,
                              std::vector<int32_t> prompt_token_ids, const SamplingParams& params,
                              bool stream, OutputKind kind = OutputKind::cumulative);

  /// What the engine actor sends after a call.
  struct Actions {
    std::vector<DetokPush> detokenize;   // their text comes back through on_text()
    std::vector<uint64_t> close_detok;   // forget these sequences' detokenizers (no text wanted)
    std::vector<uint64_t> abort;         // sequences the scheduler must drop
    std::vector<RequestOutput> outputs;  // to each request's caller; a finished one is its last
  };

  /// One step's updates from the scheduler.
  [[nodiscard]] Actions on_updates(std::vector<SeqUpdate> updates);
  /// Detokenized text, (sequence, text delta) in push order.
  [[nodiscard]] Actions on_text(const std::vector<std::pair<uint64_t, std::string>>& deltas);
  /// The caller aborts a request (unknown ids are ignored: it finished already).
  [[nodiscard]] Actions abort(const std::string& request_id);
  /// Fails every request that one of `seq_ids` belongs to, all its sequences, with `why`;
  /// other requests are untouched. Unknown sequences are ignored (their request finished).
  [[nodiscard]] Actions fail_sequences(std::span<const uint64_t> seq_ids, const std::string& why);
  /// The reason given to sequences that the scheduler fails (FinishReason::error).
  void set_failure(std::string why) { failure_ = std::move(why); }

  [[nodiscard]] bool has_request(const std::string& request_id) const {
    return requests_.contains(request_id);
  }
  [[nodiscard]] size_t num_requests() const { return requests_.size(); }
  [[nodiscard]] uint64_t num_submitted() const { return submitted_; }
  [[nodiscard]] uint64_t num_finished() const { return finished_; }

 private:
  /// One step's tokens of a sequence whose text is still being detokenized: they join the
  /// output together with their text, so an output never shows tokens (ids, logprobs, usage)
  /// ahead of the text it carries.
  struct PendingTokens {
    std::vector<int32_t> ids;
    std::vector<PositionLogprobMap> logprobs;  // when the request asked for logprobs
    double logprob_sum = 0.0;                  // their sampled tokens' logprobs
  };

  /// One sequence of a request: what its caller sees of it and where its text stands.
  struct Sequence {
    uint64_t seq_id = 0;
    CompletionOutput out;
    bool finished = false;
    FinishReason pending_finish = FinishReason::none;  // applied once its text caught up
    std::optional<int32_t> pending_stop_token;
    std::deque<PendingTokens> awaiting_text;  // detokenizer pushes, oldest first
    double score = 0.0;      // cumulative raw logprob of its sampled tokens (best_of > n ranks it)
    bool dropped = false;    // best_of > n: can no longer be among the best n
    SequenceTimes times;     // kept apart from `out`, which a dropped sequence clears
    size_t tokens_sent = 0;  // streaming: its tokens in the last output sent
    size_t text_sent = 0;    // OutputKind::delta: the bytes of its text sent
    bool finish_sent = false;  // streaming: the last output sent showed it finished
  };

  struct Request {
    std::string id;
    bool stream = false;
    OutputKind kind = OutputKind::cumulative;
    bool prompt_sent = false;          // delta: the prompt went out (with the first output)
    size_t prompt_logprobs_sent = 0;   // delta: positions of prompt_logprobs sent
    bool detokenize = true;
    std::string prompt;
    std::vector<int32_t> prompt_ids;
    SamplingParams params;
    std::vector<Sequence> seqs;      // sample-index order
    size_t num_returned = 1;         // n; fewer than seqs.size() when best_of > n ranks them
    int32_t num_cached_tokens = -1;  // from the first update that knows it
    std::optional<std::vector<PositionLogprobMap>> prompt_logprobs;
    size_t unfinished = 0;
    size_t max_stop_len = 0;
    std::string error;
    double arrival_time = 0;  // RequestMetrics' clock (see there)
    std::optional<double> finished_time;
  };

  /// A sequence and the request it belongs to; null when either is gone.
  std::pair<Request*, Sequence*> find(uint64_t seq_id);
  void check_prompt(const std::vector<int32_t>& ids) const;
  /// The token ids of `words` that the executors ban (vLLM's rule, see the .cpp).
  [[nodiscard]] std::vector<std::vector<int32_t>> bad_words_ids(
      const std::vector<std::string>& words) const;
  [[nodiscard]] PositionLogprobMap to_map(const PositionLogprobs& p) const;
  void finish(Request& r, Sequence& s, FinishReason why);
  /// Appends one step's tokens (and their logprobs) to the sequence's output.
  static void add_tokens(Sequence& s, PendingTokens got);
  /// A sequence ended early (abort, failure): the tokens whose text will not come still count,
  /// as they did before their text was awaited.
  static void add_awaited_tokens(Sequence& s);
  /// Appends text, applies stop strings, then a pending finish.
  void apply_text(Request& r, Sequence& s, const std::string& delta, Actions& act);
  /// Fails request `r` with `why`: every unfinished sequence ends with an error.
  void fail_request(Request& r, const std::string& why, Actions& act);
  /// best_of > n: aborts running sequences and drops finished ones that can no longer be among
  /// the best n (see the header comment). True when it aborted any.
  bool drop_hopeless(Request& r, Actions& act);
  /// Sends `r`'s output when due (streaming, or finished); forgets it once finished.
  void emit(const std::string& request_id, Actions& act);
  /// Streaming, unfinished `r`: whether an output is due under stream_interval.
  [[nodiscard]] bool stream_due(const Request& r) const;
  /// The caller's view of a request: every sequence in index order, or the best n when
  /// best_of > n.
  [[nodiscard]] static RequestOutput assemble(const Request& r);
  /// OutputKind::delta: what is new in `r` since its last output (and marks it sent).
  [[nodiscard]] static RequestOutput assemble_delta(Request& r);
  [[nodiscard]] static RequestMetrics request_metrics(const Request& r);

  OutputProcessorConfig config_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unordered_map<std::string, Request> requests_;
  std::unordered_map<uint64_t, std::pair<std::string, size_t>> owner_;  // seq -> (request, index)
  uint64_t next_request_ = 0;
  uint64_t next_seq_ = 1;
  std::mt19937_64 rng_;
  std::string failure_;
  uint64_t submitted_ = 0, finished_ = 0;
};

}  // namespace troupe
