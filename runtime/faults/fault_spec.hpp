// Fault injection (issue 22): what `--fault SPEC` (repeatable) and the `inject` list of a
// `[faults]` table in the engine or cluster TOML ask for. Plain data and its parser; the
// actors and transports hold the injection points (docs/faults.md lists them).
//
// A spec is KIND[:KEY=VALUE[,KEY=VALUE...]]:
//   kill-worker:rank=R,step=N     the worker process of rank R kills itself (SIGKILL) when
//                                 step N reaches it (needs worker processes)
//   kill-executor:rank=R,step=N   rank R's executor actor exits with an error at step N (its
//                                 process lives on)
//   freeze:rank=R,step=N          rank R stops answering at step N: a worker process stops
//                                 itself (SIGSTOP); an in-process executor keeps every message
//                                 unanswered
//   drop:message=M,rank=R,step=N  M = execute: rank R never sees step N's plan; M = result: it
//                                 runs step N but its result never comes back
//   delay:message=M,rank=R,step=N,ms=T   the same message, delivered T ms late
//   delay:message=grant,step=N,ms=T   the cache manager's answer to step N's ask for KV blocks
//                                 comes T ms late (a busy head; no rank)
//   ucx-fail:rank=R,step=N        rank R's UCX stage link fails step N's transfer to the next
//                                 stage (closing its endpoint, as a broken connection does);
//                                 rank R must be on a stage before the last
//   refuse-kv:step=N,count=C      the cache manager refuses every KV-block allocation of C
//                                 steps from step N (sequences are preempted, then resumed)
//   slow:rank=R,factor=F,step=N   rank R takes F times as long for every step from step N on
//   drain:rank=R,step=N           rank R's worker asks to leave before step N is planned (as a
//                                 SIGTERM to `troupe worker` does): the engine moves the rank
//                                 to a fresh worker with its KV cache (Engine::drain_rank; needs
//                                 worker processes the engine started)
// rank defaults to 0, step to 1 (steps are the scheduler's step ids, counted from 1 and never
// reused, so a fault fires once even after the executors it hit were replaced).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

enum class FaultKind {
  kill_worker,
  kill_executor,
  freeze,
  drop,
  delay,
  ucx_fail,
  refuse_kv,
  slow,
  drain,
};

enum class FaultMessage { none, execute, result, grant };

struct FaultSpec {
  FaultKind kind = FaultKind::kill_executor;
  int32_t rank = 0;
  uint64_t step = 1;
  FaultMessage message = FaultMessage::none;  // drop, delay (grant: delay only)
  int32_t ms = 0;                             // delay
  int32_t count = 1;                          // refuse-kv
  double factor = 1.0;                        // slow
  std::string text;                           // as written, for logs and errors

  /// Whether the fault acts on an executor rank (everything but refuse-kv and a delayed
  /// grant, which are the cache manager's, and drain, which the scheduler starts: all on the
  /// head).
  [[nodiscard]] bool on_rank() const {
    return kind != FaultKind::refuse_kv && kind != FaultKind::drain &&
           message != FaultMessage::grant;
  }
};

/// Parses one spec. Throws troupe::Error naming the spec, the key or value at fault and what
/// is allowed.
FaultSpec parse_fault_spec(const std::string& text);

/// Parses every spec (the first bad one throws).
std::vector<FaultSpec> parse_fault_specs(const std::vector<std::string>& texts);

/// What an engine's layout allows: rank within the ranks, kill-worker and a process freeze
/// only with worker processes, ucx-fail only with pipeline stages, refuse-kv and the rest
/// anywhere. Throws troupe::Error naming the spec.
struct FaultLayout {
  int32_t tensor_parallel_size = 1;
  int32_t pipeline_parallel_size = 1;
  bool worker_processes = false;     // executors run in `troupe worker` processes
};
void check_fault_layout(const std::vector<FaultSpec>& faults, const FaultLayout& layout);

/// "kill-worker", ...
const char* fault_kind_name(FaultKind kind);

}  // namespace troupe
