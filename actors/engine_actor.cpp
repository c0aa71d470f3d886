#include "actors/engine_actor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>
#include <unordered_map>

#include "actors/scheduler_actor.hpp"
#include "runtime/error.hpp"

namespace troupe {

namespace {

struct engine_state {
  EngineContext ctx;
  scheduler_actor scheduler;
  std::unique_ptr<OutputProcessor> outputs;  // the requests: runtime/api/output_processor.hpp
  std::unordered_map<std::string, caf::actor> sinks;  // request id -> who gets its outputs
  std::string failure;  // why the last failed sequences failed
  bool executors_lost = false;
  std::vector<caf::actor> watchers;  // told when the engine can no longer serve
  static inline const char* name = "troupe.engine";
};

using self_ptr = engine_actor::stateful_pointer<engine_state>;

void perform(self_ptr self, OutputProcessor::Actions act);

/// Sends each tokenizer member its share of `open` and `push` (a sequence's detokenizer lives in
/// the member its id picks); the text that comes back goes to the output processor, and a
/// sequence the detokenizer fails on fails its request with the reason.
void detokenize(self_ptr self, std::vector<DetokOpen> open, std::vector<DetokPush> push) {
  auto& st = self->state;
  std::map<size_t, DetokBatch> batches;
  for (auto& o : open) batches[o.seq_id % st.ctx.tokenizers.size()].open.push_back(std::move(o));
  for (auto& p : push) batches[p.seq_id % st.ctx.tokenizers.size()].push.push_back(std::move(p));
  for (auto& [member, batch] : batches) {
    std::vector<uint64_t> seqs;
    for (const auto& o : batch.open) seqs.push_back(o.seq_id);
    for (const auto& p : batch.push) seqs.push_back(p.seq_id);
    self->request(st.ctx.tokenizers.members()[member], caf::infinite, detok_atom::value,
                  std::move(batch))
        .then(
            [=](DetokDeltas& deltas) {
              perform(self, self->state.outputs->on_text(deltas.items));
              for (const auto& [seq, why] : deltas.errors) {
                spdlog::error("engine: detokenizing sequence {}: {}", seq, why);
                const std::vector<uint64_t> one{seq};
                perform(self, self->state.outputs->fail_sequences(one, "detokenizer: " + why));
              }
            },
            [=](caf::error& e) {
              const std::string why = "detokenizer failed: " + error_text(e);
              spdlog::error("engine: {}", why);
              perform(self, self->state.outputs->fail_sequences(seqs, why));
            });
  }
}

/// Turns what the output processor decided into messages.
void perform(self_ptr self, OutputProcessor::Actions act) {
  auto& st = self->state;
  if (!act.abort.empty()) self->send(st.scheduler, abort_atom::value, std::move(act.abort));
  if (!act.detokenize.empty()) detokenize(self, {}, std::move(act.detokenize));
  // Closing a detokenizer is a push that finishes it; its text is not wanted.
  for (uint64_t seq : act.close_detok) {
    DetokBatch b;
    b.push.push_back(DetokPush{seq, {}, true});
    self->request(st.ctx.tokenizers.for_sequence(seq), caf::infinite, detok_atom::value,
                  std::move(b))
        .then([](const DetokDeltas&) {}, [](caf::error&) {});
  }
  for (auto& out : act.outputs) {
    auto it = st.sinks.find(out.request_id);
    if (it == st.sinks.end()) continue;
    const bool last = out.finished;
    caf::anon_send(it->second, output_atom::value, std::move(out));  // sinks are dynamic
    if (last) st.sinks.erase(it);
  }
}

/// Accepts a request and hands its sequences to the detokenizers and the scheduler.
std::string admit(self_ptr self, EngineRequest& req, std::vector<int32_t> ids, caf::actor sink) {
  auto& st = self->state;
  OutputProcessor::Admission a = st.outputs->add(req.request_id, std::move(req.prompt),
                                                 std::move(ids), req.params, req.stream,
                                                 req.output_kind);
  st.sinks.emplace(a.request_id, std::move(sink));
  // The detokenizers must hold the sequences' state before their first tokens arrive: both
  // messages below go out now, and each tokenizer member handles its mail in order.
  if (!a.detok_open.empty()) detokenize(self, std::move(a.detok_open), {});
  self->send(st.scheduler, add_atom::value, SeqSpecs{std::move(a.seqs)});
  return a.request_id;
}

engine_actor::behavior_type engine_behavior(self_ptr self, EngineContext ctx) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.outputs = std::make_unique<OutputProcessor>(st.ctx.requests, st.ctx.tokenizer);
  st.scheduler = spawn_scheduler(self->system(), st.ctx.scheduler, st.ctx.cache_manager,
                                 st.ctx.executors, caf::actor_cast<engine_actor>(self),
                                 st.ctx.recovery);
  // The engine owns its helpers: when it goes, they go.
  self->attach_functor([sched = st.scheduler, cm = st.ctx.cache_manager,
                        toks = st.ctx.tokenizers.members()](const caf::error&) {
    caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(cm, caf::exit_reason::user_shutdown);
    for (const auto& t : toks) caf::anon_send_exit(t, caf::exit_reason::user_shutdown);
  });
  return {
      [=](submit_atom, EngineRequest& req, caf::actor sink) -> caf::result<std::string> {
        auto& s = self->state;
        try {
          if (s.executors_lost) fail("the engine has no executors left: {}", s.failure);
          // Checked before a text prompt is encoded, so a bad request costs no encode.
          s.outputs->check(req.params);
          if (!req.prompt_token_ids.empty() || !s.ctx.tokenizer) {
            if (req.prompt_token_ids.empty())
              fail("prompt: text needs a tokenizer (skip_tokenizer_init is set): pass "
                   "prompt_token_ids");
            std::vector<int32_t> ids = req.prompt_token_ids;
            return admit(self, req, std::move(ids), std::move(sink));
          }
        } catch (const std::exception& e) {
          return make_troupe_error(e.what());
        }
        auto rp = self->make_response_promise<std::string>();
        const std::string text = req.prompt;
        self->request(s.ctx.tokenizers.next(), caf::infinite, encode_atom::value, text, true)
            .then(
                [=](std::vector<int32_t>& ids) mutable {
                  try {
                    rp.deliver(admit(self, req, std::move(ids), sink));
                  } catch (const std::exception& e) {
                    rp.deliver(make_troupe_error(e.what()));
                  }
                },
                [=](caf::error& e) mutable { rp.deliver(e); });
        return rp;
      },
      [=](abort_atom, const std::string& request_id) {
        perform(self, self->state.outputs->abort(request_id));
      },
      [=](updates_atom, SeqUpdates& ups) {
        perform(self, self->state.outputs->on_updates(std::move(ups.items)));
      },
      [=](failed_atom, const std::string& why, bool fatal) {
        auto& s = self->state;
        s.failure = why;
        s.outputs->set_failure(why);
        if (fatal && !s.executors_lost)
          for (const auto& w : s.watchers) caf::anon_send(w, failed_atom::value, why, true);
        s.executors_lost = s.executors_lost || fatal;
      },
      [=](watch_atom, caf::actor watcher) {
        auto& s = self->state;
        if (s.executors_lost)
          caf::anon_send(watcher, failed_atom::value, s.failure, true);
        else
          s.watchers.push_back(std::move(watcher));
      },
      [=](stats_atom) -> caf::result<EngineStats> {
        auto rp = self->make_response_promise<EngineStats>();
        EngineStats base;
        base.requests_submitted = self->state.outputs->num_submitted();
        base.requests_finished = self->state.outputs->num_finished();
        self->request(self->state.scheduler, std::chrono::seconds(10), stats_atom::value)
            .then(
                [=](const SchedulerStats& ss) mutable {
                  EngineStats es = base;
                  es.scheduler = ss;
                  self->request(self->state.ctx.cache_manager, std::chrono::seconds(10),
                                stats_atom::value)
                      .then(
                          [=](const KVStats& kv) mutable {
                            EngineStats done = es;
                            done.kv = kv;
                            rp.deliver(done);
                          },
                          [=](caf::error& e) mutable { rp.deliver(e); });
                },
                [=](caf::error& e) mutable { rp.deliver(e); });
        return rp;
      },
      [=](drain_atom, uint64_t rank) -> caf::result<std::string> {
        auto rp = self->make_response_promise<std::string>();
        self->request(self->state.scheduler, caf::infinite, drain_atom::value, rank)
            .then([=](std::string& done) mutable { rp.deliver(std::move(done)); },
                  [=](caf::error& e) mutable { rp.deliver(e); });
        return rp;
      },
  };
}

}  // namespace

engine_actor spawn_engine_actor(caf::actor_system& sys, EngineContext context) {
  return sys.spawn(engine_behavior, std::move(context));
}

}  // namespace troupe
