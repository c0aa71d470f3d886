#include "actors/scheduler_actor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>

namespace troupe {

namespace {

using Clock = std::chrono::steady_clock;

struct scheduler_state {
  std::unique_ptr<Scheduler> sched;
  SchedulerLoopConfig config;
  cache_manager_actor cache_manager;
  ExecutorRanks ranks;  // every rank; the driver's results are applied
  engine_actor engine;
  recovery_actor recovery;  // replaces lost executors (null: they cannot be replaced)
  bool planning = false;  // waiting for the cache manager's grant
  bool replan = false;    // step() was called while planning: the plan may be out of date
  bool executors_lost = false;  // for good: nothing runs any more
  // Fault recovery: while `recovering`, new executors are being started and nothing is
  // planned. `epoch` counts losses, so that answers meant for the executors (or the cache
  // manager's state) before one are told apart and dropped.
  bool recovering = false;
  uint64_t epoch = 0;
  int32_t restarts_in_a_row = 0;
  Clock::time_point lost_at;
  uint64_t faults_seen = 0, recoveries = 0, sequences_recomputed = 0;
  double recovery_seconds = 0, last_recovery_seconds = 0;
  // A rank moving to another worker with its KV cache (drain_atom: a worker asked to leave, or
  // the embedding application): no step is planned meanwhile; once none is in flight the
  // recovery actor moves it (ExecutorGroup::migrate) and the running sequences go on where
  // they were. Those who asked hear how it went.
  struct Drain {
    size_t rank = 0;
    Clock::time_point asked;
    std::vector<caf::typed_response_promise<std::string>> waiters;
  };
  std::optional<Drain> drain;  // the move in progress
  std::deque<Drain> queued;    // ranks asked to move meanwhile (a node's workers all leaving)
  bool migrating = false;
  std::vector<bool> drain_faults_fired;  // per config.faults entry: a drain fault fires once
  uint64_t migrations = 0, blocks_migrated = 0, swap_blocks_migrated = 0;
  double migration_seconds = 0;
  // Steps sent to the executors, oldest first (two with async scheduling: the one running and
  // the one planned ahead; up to pipeline_parallel_size micro-batches under PP). Each collects
  // a result from every executor of the group; the driver's is used. Results are applied in
  // step order.
  struct StepInFlight {
    uint64_t step_id = 0;
    std::vector<StepResult> results;
    size_t replies = 0;
    bool failed = false;
    bool discard = false;  // planned before a failure: its results are dropped
    std::string error;
    size_t failed_rank = 0;  // the first rank whose answer was an error (or none came)
    bool has_prompt = false;
    uint64_t tokens = 0;
    Clock::time_point sent;
  };
  std::deque<StepInFlight> in_flight;
  // Stats since the last log line.
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  Clock::time_point last_log = Clock::now();
  // Where a step's wall time goes (all steps since start): planning (propose, the cache
  // manager's grant, apply), the executor round trip and the executor's own time inside it,
  // and applying the result. Logged at exit: the host-side overhead per step that the GPU
  // waits through.
  struct Timings {
    uint64_t steps = 0;
    double plan = 0, round_trip = 0, inside = 0, finish = 0;
    // By kind (SchedulerStats). A step's time is from when it was sent, or from when the
    // step before it returned if that is later (steps planned ahead overlap), to its result.
    uint64_t prompt_steps = 0, prompt_tokens = 0, decode_steps = 0, decode_tokens = 0;
    double prompt_seconds = 0, decode_seconds = 0;
    StepTokenHistogram step_tokens;
    Clock::time_point step_start, last_result;
    ~Timings() {
      if (steps == 0) return;
      const double ms = 1000.0 / double(steps);
      spdlog::info(
          "scheduler: {} steps; per step {:.3f} ms planning, {:.3f} ms executor round "
          "trip ({:.3f} ms inside the executor), {:.3f} ms applying results",
          steps, plan * ms, round_trip * ms, inside * ms, finish * ms);
    }
  } timings;
  static inline const char* name = "troupe.scheduler";
};

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using self_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

void step(self_ptr self);
void start_drain(self_ptr self);
void end_drain(self_ptr self, const caf::error& err, const std::string& done, bool all);

/// Fails every sequence with `why`; `fatal` when no executor is left to run another step.
void fail_everything(self_ptr self, const std::string& why, bool fatal) {
  auto& st = self->state;
  SeqUpdates failed{st.sched->fail_all()};
  self->send(st.engine, failed_atom::value, why, fatal);
  if (!failed.items.empty()) self->send(st.engine, updates_atom::value, std::move(failed));
  self->send(st.cache_manager, reset_atom::value);
}

/// An executor was lost (`rank`: down, failed a step or did not answer one; `process_lost` when
/// its process died or froze): every sequence goes back to waiting and the recovery actor
/// starts new executors, or, when none can be started (no recovery actor, or too many
/// restarts in a row), every sequence fails with `why`.
void lose(self_ptr self, size_t rank, const std::string& why, bool process_lost) {
  auto& st = self->state;
  if (st.executors_lost || st.recovering) return;
  end_drain(self, make_troupe_error(fmt::format("the move was cut short: {}", why)), {}, true);
  ++st.faults_seen;
  ++st.epoch;
  st.in_flight.clear();  // late answers of these steps find nothing and are dropped
  st.planning = false;   // a grant in flight belongs to the old epoch
  if (!st.recovery || st.restarts_in_a_row >= st.config.max_executor_restarts) {
    st.executors_lost = true;
    const std::string fatal =
        !st.recovery || st.config.max_executor_restarts == 0
            ? why
            : fmt::format("{} (after {} restart(s) in a row without a step completing, "
                          "max_executor_restarts = {})",
                          why, st.restarts_in_a_row, st.config.max_executor_restarts);
    spdlog::error("scheduler: {}: the engine cannot run steps any more", fatal);
    fail_everything(self, fatal, true);
    return;
  }
  st.recovering = true;
  ++st.restarts_in_a_row;
  st.lost_at = Clock::now();
  const size_t requeued = st.sched->requeue_all();
  st.sequences_recomputed += requeued;
  spdlog::error("scheduler: {}; replacing the executors (restart {} of at most {} in a row), "
                "{} sequence(s) to recompute",
                why, st.restarts_in_a_row, st.config.max_executor_restarts, requeued);
  self->send(st.cache_manager, reset_atom::value);
  const uint64_t epoch = st.epoch;
  for (const auto& h : st.ranks.handles) self->demonitor(h.address());
  // Bounded: starting workers and loading a large model on every rank takes minutes at most.
  self->request(st.recovery, std::chrono::minutes(15), recover_atom::value, uint64_t(rank),
                process_lost)
      .then(
          [=](ExecutorRanks& ranks) {
            auto& s = self->state;
            if (s.epoch != epoch || s.executors_lost) return;
            s.ranks = std::move(ranks);
            for (const auto& h : s.ranks.handles) self->monitor(h);
            s.recovering = false;
            s.last_recovery_seconds = since(s.lost_at);
            s.recovery_seconds += s.last_recovery_seconds;
            ++s.recoveries;
            spdlog::warn("scheduler: executors replaced in {:.3f} s; resuming {} sequence(s)",
                         s.last_recovery_seconds, s.sched->stats().num_waiting);
            step(self);
          },
          [=](caf::error& e) {
            auto& s = self->state;
            if (s.epoch != epoch || s.executors_lost) return;
            s.recovering = false;
            s.executors_lost = true;
            const std::string fatal =
                fmt::format("{}; replacing it failed: {}", why, error_text(e));
            spdlog::error("scheduler: {}", fatal);
            fail_everything(self, fatal, true);
          });
}

/// Answers everyone waiting for the drain in progress and ends it; the next queued one (if
/// any) becomes the one in progress, or with `all` every queued one gets `err` too.
void end_drain(self_ptr self, const caf::error& err, const std::string& done, bool all) {
  auto& st = self->state;
  if (!st.drain) return;
  for (auto& rp : st.drain->waiters) {
    if (err)
      rp.deliver(err);
    else
      rp.deliver(done);
  }
  st.drain.reset();
  st.migrating = false;
  if (all) {
    for (auto& d : st.queued)
      for (auto& rp : d.waiters) rp.deliver(err);
    st.queued.clear();
  }
  if (!st.queued.empty()) {
    st.drain = std::move(st.queued.front());
    st.queued.pop_front();
  }
}

/// Rank `rank` is asked to move: it joins the move in progress or the queue (once each).
scheduler_state::Drain& ask_drain(self_ptr self, size_t rank) {
  auto& st = self->state;
  if (st.drain && st.drain->rank == rank) return *st.drain;
  for (auto& d : st.queued)
    if (d.rank == rank) return d;
  scheduler_state::Drain d;
  d.rank = rank;
  d.asked = Clock::now();
  spdlog::info("scheduler: moving {} to another worker once the steps in flight are done",
               st.ranks.names[rank]);
  if (!st.drain) {
    st.drain = std::move(d);
    return *st.drain;
  }
  st.queued.push_back(std::move(d));
  return st.queued.back();
}

/// Moves the rank of the drain in progress once no step is in flight: the cache manager names
/// the blocks with contents, the recovery actor moves the rank with them, and the running
/// sequences are announced again to the new layout. A move that cannot start leaves
/// everything as it was; one that fails part-way restarts the executors (lose()).
void start_drain(self_ptr self) {
  auto& st = self->state;
  if (!st.drain || st.migrating || st.planning || !st.in_flight.empty()) return;
  if (st.executors_lost || st.recovering) {
    end_drain(self, make_troupe_error("the executors are being replaced after a fault"), {},
              true);
    return;
  }
  if (!st.recovery) {
    end_drain(self, make_troupe_error("this engine cannot replace executors"), {}, true);
    return;
  }
  st.migrating = true;
  const uint64_t epoch = st.epoch;
  const size_t rank = st.drain->rank;
  self->request(st.cache_manager, caf::infinite, migrate_atom::value)
      .then([=](std::vector<int32_t>& blocks, std::vector<int32_t>& cpu_blocks) {
        auto& s = self->state;
        if (s.epoch != epoch) return;
        self->request(s.recovery, std::chrono::minutes(15), migrate_atom::value, uint64_t(rank),
                      std::move(blocks), std::move(cpu_blocks))
            .then(
                [=](ExecutorRanks& ranks, MigrationReport& report) {
                  auto& s2 = self->state;
                  if (s2.epoch != epoch || s2.executors_lost) return;
                  const auto old = s2.ranks.handles[rank];
                  self->demonitor(old.address());
                  s2.ranks = std::move(ranks);
                  self->monitor(s2.ranks.handles[rank]);
                  s2.sched->reannounce_running();
                  const double took = since(s2.drain->asked);
                  ++s2.migrations;
                  s2.blocks_migrated += report.blocks;
                  s2.swap_blocks_migrated += report.cpu_blocks;
                  s2.migration_seconds += took;
                  const std::string done = fmt::format(
                      "moved {} to {} with its KV cache: {} block(s) and {} swapped block(s), "
                      "{:.1f} MiB copied in {:.3f} s; the move took {:.3f} s and no sequence "
                      "was recomputed",
                      report.from, report.to, report.blocks, report.cpu_blocks,
                      double(report.bytes) / double(1 << 20), report.copy_seconds, took);
                  spdlog::warn("scheduler: {}", done);
                  end_drain(self, {}, done, false);
                  step(self);
                },
                [=](caf::error& e) {
                  auto& s2 = self->state;
                  if (s2.epoch != epoch || s2.executors_lost) return;
                  const bool untouched = e == caf::sec::feature_disabled;
                  const std::string why = error_text(e);
                  end_drain(self, e, {}, !untouched);
                  if (untouched) {
                    spdlog::warn("scheduler: rank {} stays where it is: {}", rank, why);
                    step(self);
                    return;
                  }
                  lose(self, rank, fmt::format("moving rank {} to another worker failed: {}",
                                               rank, why),
                       false);
                });
      },
      [=](caf::error& e) {
        auto& s = self->state;
        if (s.epoch != epoch) return;
        end_drain(self, e, {}, false);
        step(self);
      });
}

/// Applies the results of the oldest steps in flight that have all their replies.
void finish_steps(self_ptr self) {
  auto& st = self->state;
  while (!st.in_flight.empty() && st.in_flight.front().replies == st.ranks.handles.size()) {
    scheduler_state::StepInFlight done = std::move(st.in_flight.front());
    st.in_flight.pop_front();
    // After a lost executor everything has failed already (the down handler).
    if (done.discard || st.executors_lost) continue;
    if (done.failed) {
      spdlog::error("scheduler: step {} failed: {}", done.step_id, done.error);
      // The steps planned after it were built on its outcome: their results go too, and the
      // executors are replaced (a rank that failed a step may hold a half-done batch).
      // Its process may be fine (a failed transfer, a lost message) or stopped: the group
      // restarts the workers whose processes died or stopped, and rejoins the others.
      lose(self, done.failed_rank, done.error, false);
      return;
    }
    st.restarts_in_a_row = 0;
    const auto t0 = Clock::now();
    auto& t = st.timings;
    t.round_trip += std::chrono::duration<double>(t0 - done.sent).count();
    const auto from = std::max(done.sent, t.last_result);
    const double took = std::chrono::duration<double>(t0 - from).count();
    t.last_result = t0;
    t.step_tokens.observe(done.tokens);
    if (done.has_prompt) {
      ++t.prompt_steps;
      t.prompt_tokens += done.tokens;
      t.prompt_seconds += took;
    } else {
      ++t.decode_steps;
      t.decode_tokens += done.tokens;
      t.decode_seconds += took;
    }
    const StepResult& r = done.results[st.ranks.driver];
    st.timings.inside += r.execute_seconds;
    SeqUpdates ups;
    try {
      ups.items = st.sched->on_result(r);
    } catch (const std::exception& e) {  // a result that contradicts the plan: a bug to surface
      spdlog::error("scheduler: step {}: {}", done.step_id, e.what());
      for (auto& later : st.in_flight) later.discard = true;
      fail_everything(self, e.what(), false);
      continue;
    }
    for (const auto& u : ups.items) st.generated_tokens += u.new_token_ids.size();
    if (!ups.items.empty()) self->send(st.engine, updates_atom::value, std::move(ups));
    st.timings.finish += since(t0);
    ++st.timings.steps;
  }
  step(self);
}

void run_plan(self_ptr self, StepPlan plan) {
  auto& st = self->state;
  scheduler_state::StepInFlight f;
  f.step_id = plan.step_id;
  f.has_prompt = !plan.new_seqs.empty();
  for (const auto& n : plan.new_seqs) {
    st.prompt_tokens += uint64_t(n.num_new_tokens);
    f.tokens += uint64_t(n.num_new_tokens);
  }
  for (const auto& c : plan.cached_seqs) {
    if (c.num_new_tokens > 1) {
      st.prompt_tokens += uint64_t(c.num_new_tokens);
      f.has_prompt = true;
    }
    f.tokens += uint64_t(c.num_new_tokens);
  }
  f.results.assign(st.ranks.handles.size(), StepResult{});
  f.sent = Clock::now();
  st.timings.plan += std::chrono::duration<double>(f.sent - st.timings.step_start).count();
  const uint64_t id = plan.step_id;
  st.in_flight.push_back(std::move(f));
  auto find = [self](uint64_t step_id) -> scheduler_state::StepInFlight* {
    for (auto& g : self->state.in_flight)
      if (g.step_id == step_id) return &g;
    return nullptr;  // dropped by fail_everything's reset
  };
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(st.config.execute_timeout_seconds));
  for (size_t i = 0; i < st.ranks.handles.size(); ++i) {
    self->request(st.ranks.handles[i], timeout, execute_atom::value, plan)
        .then(
            [=](StepResult& r) {
              auto* g = find(id);
              if (g == nullptr) return;
              g->results[i] = std::move(r);
              if (++g->replies == self->state.ranks.handles.size()) finish_steps(self);
            },
            [=](caf::error& e) {
              auto* g = find(id);
              if (g == nullptr) return;
              if (!g->failed) {
                g->failed = true;
                g->failed_rank = i;
                g->error = e == caf::sec::request_timeout
                               ? fmt::format("{} did not answer step {} within execute_timeout = "
                                             "{} s",
                                             self->state.ranks.names[i], id,
                                             self->state.config.execute_timeout_seconds)
                               : fmt::format("{} failed: {}", self->state.ranks.names[i],
                                             error_text(e));
              }
              if (++g->replies == self->state.ranks.handles.size()) finish_steps(self);
            });
  }
}

// An injected delay:message=grant (fault_spec.hpp): the ask goes through a one-shot actor that
// hands it to the cache manager `ms` late, so the grant comes back that much later and this
// actor takes its other messages meanwhile, as with a busy head.
cache_manager_actor delayed_cache_manager(self_ptr self, cache_manager_actor cache_manager,
                                          int32_t ms) {
  caf::actor forwarder =
      self->home_system().spawn([cache_manager, ms](caf::event_based_actor* d) -> caf::behavior {
        return {[=](grant_atom, KVAsk& ask) {
          auto promise = d->make_response_promise();
          d->delayed_send(d, std::chrono::milliseconds(ms), tick_atom::value);
          d->become([=, ask = std::move(ask)](tick_atom) mutable {
            promise.delegate(cache_manager, grant_atom::value, std::move(ask));
            d->quit();
          });
        }};
      });
  return caf::actor_cast<cache_manager_actor>(forwarder);
}

void step(self_ptr self) {
  auto& st = self->state;
  if (st.planning) st.replan = true;
  if (st.planning || st.executors_lost || st.recovering) return;
  // An injected drain (fault_spec.hpp): the rank's worker asks to leave before this step.
  for (size_t i = 0; i < st.config.faults.size(); ++i) {
    const FaultSpec& f = st.config.faults[i];
    if (f.kind != FaultKind::drain || st.drain_faults_fired[i] ||
        st.sched->next_step_id() < f.step || size_t(f.rank) >= st.ranks.handles.size())
      continue;
    st.drain_faults_fired[i] = true;
    spdlog::warn("scheduler: injected fault '{}': {} asks to leave", f.text,
                 st.ranks.names[size_t(f.rank)]);
    (void)ask_drain(self, size_t(f.rank));
  }
  if (st.drain) {  // nothing more is planned until the rank has moved
    start_drain(self);
    return;
  }
  if (!st.sched->has_work() && !st.sched->has_pending_releases()) return;
  // One step at a time, or a second one planned ahead (async scheduling), or one micro-batch
  // per pipeline stage. A step sent with no sequences (only releases or swaps) is not in the
  // scheduler's count but is in ours.
  const size_t depth = size_t(std::max(2, st.config.policy.pipeline_parallel_size));
  if (st.in_flight.size() >= depth) return;
  if (!st.in_flight.empty() && !(st.sched->steps_in_flight() == 0 || st.sched->can_plan_ahead()))
    return;
  st.planning = true;
  st.replan = false;
  st.timings.step_start = Clock::now();
  KVAsk ask;
  try {
    ask = st.sched->propose();
  } catch (const std::exception& e) {  // a broken invariant: fail loudly, keep the actor
    st.planning = false;
    fail_everything(self, e.what(), false);
    return;
  }
  const uint64_t planned = st.sched->next_step_id();
  for (const FaultSpec& f : st.config.faults)
    if (f.kind == FaultKind::refuse_kv && planned >= f.step && planned < f.step + uint64_t(f.count)) {
      spdlog::warn("scheduler: injected fault '{}': step {}'s KV-block allocations are refused",
                   f.text, planned);
      ask.refuse_allocations = true;
    }
  cache_manager_actor granter = st.cache_manager;
  for (const FaultSpec& f : st.config.faults)
    if (f.kind == FaultKind::delay && f.message == FaultMessage::grant && planned == f.step) {
      spdlog::warn("scheduler: injected fault '{}': step {}'s grant comes {} ms late", f.text,
                   planned, f.ms);
      granter = delayed_cache_manager(self, st.cache_manager, f.ms);
    }
  const bool refused = ask.refuse_allocations;
  const uint64_t epoch = st.epoch;
  self->request(granter, caf::infinite, grant_atom::value, std::move(ask))
      .then(
          [=](KVGrant& grant) {
            auto& s = self->state;
            if (s.epoch != epoch) return;  // granted before a loss reset the cache manager
            s.planning = false;
            StepPlan plan;
            try {
              plan = s.sched->apply(grant);
            } catch (const std::exception& e) {
              for (auto& later : s.in_flight) later.discard = true;
              fail_everything(self, e.what(), false);
              return;
            }
            if (plan.empty() && plan.finished_seq_ids.empty() && !plan.has_swaps()) {
              if (refused) {  // an injected refusal: nothing could run; try again shortly
                self->delayed_send(self, std::chrono::milliseconds(10), step_atom::value);
                return;
              }
              if (s.replan) {
                // Requests came, or results or aborts were applied, while the grant was out
                // (this actor takes messages meanwhile; step() then waits for the grant): the
                // plan was made without them, so plan again. Taking this empty plan as final
                // failed every request ("a waiting request cannot fit") or left the engine
                // idle with requests waiting (2026-12-06: a second generate() on a
                // pipeline-parallel engine, ~1 run in 13 under load).
                step(self);
                return;
              }
              if (s.in_flight.empty() && s.sched->has_work() &&
                  s.sched->stats().num_running == 0) {
                // Nothing runs and the head of the queue does not fit an empty cache: it never
                // will (the engine checks lengths, so this is a bug to surface, not hide).
                fail_everything(self, "scheduler: a waiting request cannot fit in the KV cache",
                                false);
              }
              if (s.drain) start_drain(self);
              return;
            }
            run_plan(self, std::move(plan));
            step(self);  // plans the next step ahead when async scheduling allows
          },
          [=](caf::error& e) {
            if (self->state.epoch != epoch) return;
            self->state.planning = false;
            fail_everything(self, "cache manager failed: " + error_text(e), false);
          });
}

std::chrono::milliseconds stats_interval(const SchedulerLoopConfig& c) {
  return std::chrono::milliseconds(int64_t(c.stats_interval_seconds * 1000.0));
}

void log_stats(self_ptr self) {
  auto& st = self->state;
  const double secs = std::chrono::duration<double>(Clock::now() - st.last_log).count();
  const SchedulerStats ss = st.sched->stats();
  const bool active = st.prompt_tokens + st.generated_tokens > 0 || ss.num_running > 0 ||
                      ss.num_waiting > 0 || ss.num_swapped > 0;
  if (!active || secs <= 0) return;
  const double prompt_tps = double(st.prompt_tokens) / secs;
  const double gen_tps = double(st.generated_tokens) / secs;
  st.prompt_tokens = st.generated_tokens = 0;
  st.last_log = Clock::now();
  // Faults, once there were any: losses seen, recoveries, sequences recomputed, recovery time.
  const std::string faults =
      st.faults_seen == 0
          ? std::string()
          : fmt::format(", Faults: {} (recovered {}, {} sequences recomputed, recovery {:.2f} s)",
                        st.faults_seen, st.recoveries, st.sequences_recomputed,
                        st.recovery_seconds);
  self->request(st.cache_manager, std::chrono::seconds(5), stats_atom::value)
      .then(
          [=](const KVStats& kv) {
            const double hit = kv.prefix_queries
                                   ? 100.0 * double(kv.prefix_hits) / double(kv.prefix_queries)
                                   : 0.0;
            const double cpu_usage =
                kv.num_cpu_blocks ? 100.0 * double(kv.num_cpu_blocks - kv.num_free_cpu_blocks) /
                                        double(kv.num_cpu_blocks)
                                  : 0.0;
            spdlog::info(
                "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} "
                "tokens/s, Running: {} reqs, Swapped: {} reqs, Waiting: {} reqs, KV cache "
                "usage: {:.1f}%, CPU KV cache usage: {:.1f}%, Prefix cache hit rate: {:.1f}%, "
                "Preemptions: {} (swapped out {}, in {}){}",
                prompt_tps, gen_tps, ss.num_running, ss.num_swapped, ss.num_waiting,
                100.0 * kv.usage, cpu_usage, hit, ss.num_preemptions, ss.num_swap_outs,
                ss.num_swap_ins, faults);
          },
          [](caf::error&) {});
}

scheduler_actor::behavior_type scheduler_behavior(self_ptr self, SchedulerLoopConfig config,
                                                  cache_manager_actor cache_manager,
                                                  ExecutorRanks executors,
                                                  engine_actor engine, recovery_actor recovery) {
  auto& st = self->state;
  st.sched = std::make_unique<Scheduler>(config.policy);
  st.config = config;
  st.drain_faults_fired.assign(config.faults.size(), false);
  st.cache_manager = std::move(cache_manager);
  st.ranks = std::move(executors);
  st.engine = std::move(engine);
  st.recovery = std::move(recovery);
  for (const auto& e : st.ranks.handles) self->monitor(e);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& s = self->state;
    // Stopped by its owner (the engine shutting down, whose exit may reach this actor after the
    // executors'; or a recovery replacing it): not a fault to recover from.
    if (dm.reason == caf::exit_reason::user_shutdown) return;
    for (size_t i = 0; i < s.ranks.handles.size(); ++i) {
      if (dm.source != s.ranks.handles[i].address()) continue;
      // A lost connection is a dead or frozen process (restarted); an executor that exited
      // with an error left its process running (rejoined).
      lose(self, i, fmt::format("{} is gone ({})", s.ranks.names[i], caf::to_string(dm.reason)),
           dm.reason == caf::exit_reason::remote_link_unreachable);
      return;
    }
  });
  if (config.log_stats) self->delayed_send(self, stats_interval(config), tick_atom::value);
  return {
      [=](add_atom, SeqSpecs& specs) {
        auto& s = self->state;
        if (s.executors_lost) {
          SeqUpdates failed;
          for (const auto& spec : specs.items)
            failed.items.push_back(SeqUpdate{spec.seq_id, {}, {}, {}, FinishReason::error, {}});
          self->send(s.engine, updates_atom::value, std::move(failed));
          return;
        }
        SeqUpdates rejected;
        for (auto& spec : specs.items) {
          const uint64_t id = spec.seq_id;
          try {
            s.sched->add(std::move(spec));
          } catch (const std::exception& e) {
            spdlog::error("scheduler: {}", e.what());
            rejected.items.push_back(SeqUpdate{id, {}, {}, {}, FinishReason::error, {}});
          }
        }
        if (!rejected.items.empty()) self->send(s.engine, updates_atom::value, std::move(rejected));
        step(self);
      },
      [=](abort_atom, const std::vector<uint64_t>& ids) {
        for (uint64_t id : ids) self->state.sched->abort(id);
        step(self);  // releases the aborted sequences' blocks
      },
      [=](stats_atom) -> SchedulerStats {
        const auto& t = self->state.timings;
        SchedulerStats ss = self->state.sched->stats();
        ss.timed_steps = t.steps;
        ss.plan_seconds = t.plan;
        ss.round_trip_seconds = t.round_trip;
        ss.executor_seconds = t.inside;
        ss.apply_seconds = t.finish;
        ss.prompt_steps = t.prompt_steps;
        ss.prompt_step_tokens = t.prompt_tokens;
        ss.prompt_step_seconds = t.prompt_seconds;
        ss.decode_steps = t.decode_steps;
        ss.decode_step_tokens = t.decode_tokens;
        ss.decode_step_seconds = t.decode_seconds;
        ss.step_tokens = t.step_tokens;
        const auto& st2 = self->state;
        ss.faults_seen = st2.faults_seen;
        ss.recoveries = st2.recoveries;
        ss.sequences_recomputed = st2.sequences_recomputed;
        ss.recovery_seconds = st2.recovery_seconds;
        ss.last_recovery_seconds = st2.last_recovery_seconds;
        ss.migrations = st2.migrations;
        ss.blocks_migrated = st2.blocks_migrated;
        ss.swap_blocks_migrated = st2.swap_blocks_migrated;
        ss.migration_seconds = st2.migration_seconds;
        return ss;
      },
      [=](step_atom) { step(self); },
      [=](drain_atom, uint64_t rank) -> caf::result<std::string> {
        auto& s = self->state;
        auto rp = self->make_response_promise<std::string>();
        if (s.executors_lost) {
          rp.deliver(make_troupe_error("the engine's executors are lost"));
          return rp;
        }
        if (rank >= s.ranks.handles.size()) {
          rp.deliver(make_troupe_error(fmt::format(
              "rank {} does not exist: the engine has {} rank(s)", rank, s.ranks.handles.size())));
          return rp;
        }
        ask_drain(self, size_t(rank)).waiters.push_back(rp);
        start_drain(self);
        return rp;
      },
      [=](tick_atom) {
        log_stats(self);
        self->delayed_send(self, stats_interval(self->state.config), tick_atom::value);
      },
  };
}

}  // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, SchedulerLoopConfig config,
                                cache_manager_actor cache_manager,
                                ExecutorRanks executors, engine_actor engine,
                                recovery_actor recovery) {
  return sys.spawn(scheduler_behavior, std::move(config), std::move(cache_manager),
                   std::move(executors), std::move(engine), std::move(recovery));
}

}  // namespace troupe
