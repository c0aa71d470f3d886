// The messages between troupe's actors: atoms, `inspect` overloads and type registration.
//
// Two kinds of message types:
// - Types that cross a process boundary (scheduler <-> remote executor: ExecutorInit,
//   ExecutorInfo, StepPlan, StepResult and their parts) have an `inspect` overload here and are
//   registered by register_message_types(), which every process calls on its config (CAF 0.17
//   needs the registration on both sides, and forgetting it only fails at run time).
// - Types that never leave the engine's process (engine requests and outputs, the KV
//   ask/grant between scheduler and cache manager, sequence updates) are marked
//   CAF_ALLOW_UNSAFE_MESSAGE_TYPE below: they are moved between actors without serialising.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/api/output_processor.hpp"
#include "runtime/api/outputs.hpp"
#include "runtime/config/sampling_params.hpp"
#include "runtime/kv/kv_cache_manager.hpp"
#include "runtime/protocol/step.hpp"
#include "runtime/sched/scheduler.hpp"

namespace troupe {

// ---- atoms (at most 10 characters: letters, digits, '_') ----
using init_atom = caf::atom_constant<caf::atom("init")>;
using execute_atom = caf::atom_constant<caf::atom("execute")>;
using grant_atom = caf::atom_constant<caf::atom("grant")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using reset_atom = caf::atom_constant<caf::atom("reset")>;
using add_atom = caf::atom_constant<caf::atom("add")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using updates_atom = caf::atom_constant<caf::atom("updates")>;
using submit_atom = caf::atom_constant<caf::atom("submit")>;
using output_atom = caf::atom_constant<caf::atom("output")>;
using encode_atom = caf::atom_constant<caf::atom("encode")>;
using decode_atom = caf::atom_constant<caf::atom("decode")>;
using detok_atom = caf::atom_constant<caf::atom("detok")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using failed_atom = caf::atom_constant<caf::atom("failed")>;
using finish_atom = caf::atom_constant<caf::atom("finish")>;
using prepare_atom = caf::atom_constant<caf::atom("prepare")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
using connect_atom = caf::atom_constant<caf::atom("connect")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using kv_region_atom = caf::atom_constant<caf::atom("kv_region")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using migrate_atom = caf::atom_constant<caf::atom("migrate")>;
using rewire_atom = caf::atom_constant<caf::atom("rewire")>;
using kv_export_atom = caf::atom_constant<caf::atom("kv_export")>;
using kv_import_atom = caf::atom_constant<caf::atom("kv_import")>;

// ---- engine-local message types ----

/// A generation request as the engine's front door takes it: text or token ids.
struct EngineRequest {
  std::string request_id;  // "" = the engine assigns one
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;  // used when non-empty; else `prompt` is encoded
  SamplingParams params;
  /// Send a RequestOutput after every step (true) or only the final one (false).
  bool stream = false;
  /// What each streamed RequestOutput holds: the whole request so far, or what is new
  /// (runtime/api/outputs.hpp).
  OutputKind output_kind = OutputKind::cumulative;
};

struct SeqSpecs {
  std::vector<SeqSpec> items;
};
struct SeqUpdates {
  std::vector<SeqUpdate> items;
};

/// A head asking a `troupe worker` for an executor (actors/worker_actor.hpp).
struct WorkerJoin {
  std::string head;   // who asks: "<hostname> pid <pid>", for logs and the busy message
  caf::actor anchor;  // lives as long as the head's engine: its end ends the session
};

/// A worker that dials the head (`troupe launch`, `--headless` nodes) says who it is.
struct WorkerHello {
  int32_t rank = -1;     // the rank its launcher gave it
  std::string node;      // the cluster file's node name
  std::string address;   // "host:port" it is known by, for error messages
  int32_t pid = 0;
};

/// Work for one tokenizer member's incremental detokenizers (DetokOpen, DetokPush:
/// runtime/api/output_processor.hpp).
struct DetokBatch {
  std::vector<DetokOpen> open;
  std::vector<DetokPush> push;
};
struct DetokDeltas {
  std::vector<std::pair<uint64_t, std::string>> items;   // (seq, text delta), in push order
  std::vector<std::pair<uint64_t, std::string>> errors;  // (seq, why) for those that failed
};

struct EngineStats {
  SchedulerStats scheduler;
  KVStats kv;
  uint64_t requests_submitted = 0;
  uint64_t requests_finished = 0;
};

// ---- inspect overloads for the cross-process types ----

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SeqSampling& x) {
  // The knobs come from their one list (runtime/sampling/sampling_knobs.hpp), so a new knob
  // crosses to remote executors without a change here.
  return with_knobs(static_cast<SamplingKnobs&>(x), [&](auto&... knobs) {
    return f(caf::meta::type_name("seq_sampling"), knobs..., x.num_logprobs, x.num_prompt_logprobs,
             x.min_tokens, x.stop_ids, x.logit_bias, x.allowed_token_ids, x.bad_words_ids,
             x.logits_processors);  // logits_processor_fns stay in-process
  });
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NewSeq& x) {
  return f(caf::meta::type_name("new_seq"), x.seq_id, x.token_ids, x.num_prompt_tokens,
           x.sampling, x.block_ids, x.num_computed_tokens, x.num_new_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CachedSeq& x) {
  return f(caf::meta::type_name("cached_seq"), x.seq_id, x.appended_token_ids, x.new_block_ids,
           x.num_computed_tokens, x.num_new_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BlockSwap& x) {
  return f(caf::meta::type_name("block_swap"), x.gpu_block, x.cpu_block);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BlockCopyPlan& x) {
  return f(caf::meta::type_name("block_copy_plan"), x.src, x.dst);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepPlan& x) {
  return f(caf::meta::type_name("step_plan"), x.step_id, x.new_seqs, x.cached_seqs,
           x.finished_seq_ids, x.swap_out, x.swap_in, x.copy_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LogprobEntry& x) {
  return f(caf::meta::type_name("logprob_entry"), x.token, x.logprob, x.rank);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PositionLogprobs& x) {
  return f(caf::meta::type_name("position_logprobs"), x.chosen, x.top);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SeqStepOutput& x) {
  return f(caf::meta::type_name("seq_step_output"), x.seq_id, x.sampled, x.token, x.logprobs,
           x.prompt_logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepResult& x) {
  return f(caf::meta::type_name("step_result"), x.step_id, x.outputs, x.execute_seconds);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ExecutorInit& x) {
  return f(caf::meta::type_name("executor_init"), x.model_dir, x.load_format, x.dtype, x.device,
           x.device_index, x.tp_rank, x.tp_size, x.pp_rank, x.pp_size, x.block_size,
           x.max_num_batched_tokens, x.max_num_seqs, x.max_model_len, x.seed,
           x.kv_cache_memory_bytes, x.gpu_memory_utilization, x.num_gpu_blocks_override,
           x.enforce_eager, x.max_seq_len_to_capture, x.cudagraph_capture_sizes, x.swap_space_bytes,
           x.swap_space_remote, x.logits_processor_plugins, x.faults, x.in_worker_process,
           x.batch_invariant);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ExecutorInfo& x) {
  return f(caf::meta::type_name("executor_info"), x.num_blocks, x.num_cpu_blocks, x.kv_block_bytes,
           x.kv_cache_bytes, x.weight_bytes, x.backend, x.load_seconds, x.checkpoint_fingerprint);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ExecutorPlacement& x) {
  return f(caf::meta::type_name("executor_placement"), x.tp_rank, x.tp_size, x.pp_rank, x.pp_size,
           x.device, x.device_index, x.collectives, x.stage_link, x.ucx_tls, x.ucx_net_devices,
           x.timeout_ms, x.ranks_on_host, x.custom_all_reduce);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, KvExport& x) {
  return f(caf::meta::type_name("kv_export"), x.cache, x.swap);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, KvImport& x) {
  return f(caf::meta::type_name("kv_import"), x.from, x.blocks, x.cpu_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ExecutorEndpoints& x) {
  return f(caf::meta::type_name("executor_endpoints"), x.collectives, x.stage, x.hostname, x.pid);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WirePeers& x) {
  return f(caf::meta::type_name("wire_peers"), x.tp, x.stages);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerJoin& x) {
  return f(caf::meta::type_name("worker_join"), x.head, x.anchor);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerHello& x) {
  return f(caf::meta::type_name("worker_hello"), x.rank, x.node, x.address, x.pid);
}

/// Registers the cross-process types (and loads the middleman). Call on every process's config.
void register_message_types(caf::actor_system_config& cfg);

/// Heartbeats between this process and its peers (CAF's middleman): one every `interval`, and a
/// connection silent for `timeout` is dropped, so that a frozen peer (SIGSTOP, a hung host, a
/// cut link) turns into down messages within `timeout`. Set on both sides. 0 turns each off.
void set_heartbeat(caf::actor_system_config& cfg, std::chrono::milliseconds interval,
                   std::chrono::milliseconds timeout);

/// The actor system's scheduler for a process that runs an engine. With `cpu_engine` (the
/// executors compute on this host's CPU cores, whose pool keeps every core busy during a step)
/// CAF gets 2 worker threads that sleep on a condition variable after 10 empty polls; CAF's
/// default has them poll on for ~25 ms after each job, waking every 50 us, which took ~8% of
/// two cores from the CPU backend under a server's load (docs/engine.md "Threads on a
/// CPU engine"). A GPU engine leaves the host's cores free, and keeps 4 workers with CAF's
/// polling (the lowest message latency). Call before the actor system is made.
void set_scheduler(caf::actor_system_config& cfg, bool cpu_engine);

/// The user-facing text of an error that came back from an actor: the message a handler put
/// in it, or CAF's rendering.
std::string error_text(const caf::error& err);

/// An error carrying `what` (a troupe::Error's message) from a handler to its requester.
caf::error make_troupe_error(const std::string& what);

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::EngineRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::RequestOutput)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::SeqSpecs)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::SeqUpdates)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::KVAsk)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::KVGrant)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::KVStats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::DetokBatch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::DetokDeltas)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::EngineStats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::SchedulerStats)
