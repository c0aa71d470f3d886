#include "actors/worker_actor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <vector>

namespace troupe {

namespace {

struct worker_state {
  std::string self;  // how this worker is named in messages
  struct Session {
    caf::actor executor;
    caf::actor anchor;  // the head's: a drain request goes to it
    caf::actor_addr head;
    std::string head_name;
    std::chrono::system_clock::time_point since;
  };
  std::optional<Session> session;
  uint64_t sessions = 0;
  // Asked to leave (drain): answered when the session ends, or with the head's refusal.
  std::vector<caf::typed_response_promise<std::string>> leaving;
  std::string refusal;
  static inline const char* name = "troupe.worker";
};

using self_ptr = worker_actor::stateful_pointer<worker_state>;

void end_session(self_ptr self, const std::string& why) {
  auto& st = self->state;
  if (!st.session) return;
  spdlog::info("worker: session {} with {} ended ({}); ready for the next head", st.sessions,
               st.session->head_name, why);
  self->demonitor(st.session->executor);
  caf::anon_send_exit(st.session->executor, caf::exit_reason::user_shutdown);
  st.session.reset();
  for (auto& rp : st.leaving) rp.deliver(st.refusal);
  st.leaving.clear();
}

}  // namespace

worker_actor spawn_worker(caf::actor_system& sys, std::string self_description,
                          ExecutorFactory make_executor) {
  return sys.spawn([description = std::move(self_description),
                    make_executor](self_ptr self) -> worker_actor::behavior_type {
    self->state.self = description;
    self->set_down_handler([=](caf::down_msg& dm) {
      auto& st = self->state;
      if (!st.session) return;
      if (dm.source == st.session->head)
        end_session(self, fmt::format("the head went away: {}", caf::to_string(dm.reason)));
      else if (dm.source == st.session->executor.address())
        end_session(self, fmt::format("its executor stopped: {}", caf::to_string(dm.reason)));
    });
    return {
        [=](join_atom, const WorkerJoin& join) -> caf::result<caf::actor> {
          auto& st = self->state;
          if (st.session) {
            const auto age = std::chrono::duration_cast<std::chrono::seconds>(
                std::chrono::system_clock::now() - st.session->since);
            return make_troupe_error(fmt::format(
                "{} is busy: it serves the engine of {} (for {} s); a worker serves one head at "
                "a time",
                st.self, st.session->head_name, age.count()));
          }
          if (!join.anchor)
            return make_troupe_error(st.self + ": a join needs the head's anchor actor");
          worker_state::Session s;
          s.executor = caf::actor_cast<caf::actor>(make_executor(self->system()));
          s.anchor = join.anchor;
          s.head = join.anchor.address();
          s.head_name = join.head;
          s.since = std::chrono::system_clock::now();
          self->monitor(join.anchor);
          self->monitor(s.executor);
          st.session = s;
          ++st.sessions;
          spdlog::info("worker: session {}: serving {}", st.sessions, join.head);
          return s.executor;
        },
        [=](leave_atom, const caf::actor& anchor) {
          auto& st = self->state;
          if (st.session && anchor && anchor.address() == st.session->head)
            end_session(self, "it left");
        },
        [=](drain_atom) -> caf::result<std::string> {
          auto& st = self->state;
          if (!st.session) return std::string();
          auto rp = self->make_response_promise<std::string>();
          st.leaving.push_back(rp);
          if (st.leaving.size() > 1) return rp;  // asked already
          spdlog::warn("worker: asked to leave; asking {} to move its rank to another worker",
                       st.session->head_name);
          const caf::actor_addr head = st.session->head;
          self->request(st.session->anchor, caf::infinite, drain_atom::value,
                        caf::actor_cast<caf::actor>(self))
              .then(
                  [=](std::string& done) {
                    spdlog::info("worker: {}", done);  // the head ends the session next
                  },
                  [=](caf::error& e) {
                    auto& s = self->state;
                    s.refusal = error_text(e);
                    spdlog::warn("worker: the head did not move its rank: {}", s.refusal);
                    if (s.session && s.session->head == head) {
                      for (auto& p : s.leaving) p.deliver(s.refusal);
                      s.leaving.clear();
                    }
                  });
          return rp;
        },
    };
  });
}

}  // namespace troupe
