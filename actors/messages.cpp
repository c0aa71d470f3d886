#include "actors/messages.hpp"

#include <caf/io/all.hpp>

namespace troupe {

void register_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<SeqSampling>("troupe_seq_sampling");
  cfg.add_message_type<NewSeq>("troupe_new_seq");
  cfg.add_message_type<CachedSeq>("troupe_cached_seq");
  cfg.add_message_type<BlockSwap>("troupe_block_swap");
  cfg.add_message_type<BlockCopyPlan>("troupe_block_copy_plan");
  cfg.add_message_type<StepPlan>("troupe_step_plan");
  cfg.add_message_type<LogprobEntry>("troupe_logprob_entry");
  cfg.add_message_type<PositionLogprobs>("troupe_position_logprobs");
  cfg.add_message_type<SeqStepOutput>("troupe_seq_step_output");
  cfg.add_message_type<StepResult>("troupe_step_result");
  cfg.add_message_type<ExecutorInit>("troupe_executor_init");
  cfg.add_message_type<ExecutorInfo>("troupe_executor_info");
  cfg.add_message_type<ExecutorPlacement>("troupe_executor_placement");
  cfg.add_message_type<ExecutorEndpoints>("troupe_executor_endpoints");
  cfg.add_message_type<WirePeers>("troupe_wire_peers");
  cfg.add_message_type<KvExport>("troupe_kv_export");
  cfg.add_message_type<KvImport>("troupe_kv_import");
  cfg.add_message_type<WorkerJoin>("troupe_worker_join");
  cfg.add_message_type<WorkerHello>("troupe_worker_hello");
  cfg.add_message_type<std::vector<uint8_t>>("troupe_bytes");  // a memory node's region descriptor
  cfg.load<caf::io::middleman>();
}

void set_heartbeat(caf::actor_system_config& cfg, std::chrono::milliseconds interval,
                   std::chrono::milliseconds timeout) {
  cfg.set("middleman.heartbeat-interval", caf::timespan{interval});
  cfg.set("middleman.connection-timeout", caf::timespan{timeout});
}

void set_scheduler(caf::actor_system_config& cfg, bool cpu_engine) {
  if (!cpu_engine) {
    cfg.set("scheduler.max-threads", 4);
    return;
  }
  cfg.set("scheduler.max-threads", 2);
  cfg.set("work-stealing.aggressive-poll-attempts", 10);
  cfg.set("work-stealing.moderate-poll-attempts", 0);
}

caf::error make_troupe_error(const std::string& what) {
  return caf::make_error(caf::sec::runtime_error, what);
}

std::string error_text(const caf::error& err) {
  if (!err) return "no error";
  const caf::message& ctx = err.context();
  for (size_t i = 0; i < ctx.size(); ++i)
    if (ctx.match_element<std::string>(i)) return ctx.get_as<std::string>(i);
  return caf::to_string(err);
}

}  // namespace troupe
