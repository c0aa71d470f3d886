// One request to each executor of a group, waited for as a whole: the way the engine starts
// its executors (prepare, connect, init, start). CAF answers no pending request when a remote
// worker's connection drops (its process was killed, or it froze and the heartbeat timed out),
// so the requests are made by a helper actor that also monitors every executor: the first
// error or the first executor going down ends the call, naming the executor.
#pragma once

#include <caf/all.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "actors/executor_actor.hpp"
#include "actors/messages.hpp"

namespace troupe {

/// Sends make(i) (a tuple of message elements) to executor i, with at most `parallel` requests
/// outstanding, and returns the replies in executor order, or the first failure as an error
/// whose text begins with who[i] (the executor's name: "rank 1 (worker 127.0.0.1:40001)").
template <class Reply, class Make>
caf::expected<std::vector<Reply>> call_each(caf::actor_system& sys,
                                            const std::vector<executor_actor>& executors,
                                            const std::vector<std::string>& who, size_t parallel,
                                            Make make) {
  struct Call {
    std::vector<caf::actor> targets;
    std::vector<std::string> who;
    std::vector<std::optional<Reply>> replies;
    size_t next = 0, done = 0, parallel = 1;
    bool over = false;
    std::function<void()> send_next;  // captures the Call by raw pointer: no cycle
  };
  auto call = std::make_shared<Call>();
  for (const auto& e : executors) call->targets.push_back(caf::actor_cast<caf::actor>(e));
  call->who = who;
  call->replies.resize(executors.size());
  call->parallel = std::max<size_t>(1, parallel);
  if (executors.empty()) return std::vector<Reply>{};

  caf::scoped_actor waiter_self{sys};
  const caf::actor waiter = caf::actor_cast<caf::actor>(waiter_self);
  sys.spawn([call, waiter, make](caf::event_based_actor* h) -> caf::behavior {
    // Everything below refers to the Call by raw pointer; the behaviour owns it. Once the call
    // is over the executor handles are dropped at once, so that an engine that shuts down does
    // not wait for this actor to be destroyed.
    Call* c = call.get();
    auto finish = [c, h, waiter](caf::message m) {
      if (c->over) return;
      c->over = true;
      h->send(waiter, std::move(m));
      c->targets.clear();
      h->quit();
    };
    c->send_next = [c, h, make, finish] {
      while (!c->over && c->next < c->targets.size() && c->next - c->done < c->parallel) {
        const size_t i = c->next++;
        std::apply([&](auto&&... xs) { return h->request(c->targets[i], caf::infinite, xs...); },
                   make(i))
            .then(
                [c, i, finish](Reply& r) {
                  if (c->over) return;
                  c->replies[i] = std::move(r);
                  if (++c->done == c->targets.size()) {
                    std::vector<Reply> all;
                    for (auto& x : c->replies) all.push_back(std::move(*x));
                    finish(caf::make_message(std::move(all)));
                  } else {
                    c->send_next();
                  }
                },
                [c, i, finish](caf::error& e) {
                  finish(caf::make_message(
                      make_troupe_error(fmt::format("{}: {}", c->who[i], error_text(e)))));
                });
      }
    };
    for (const auto& t : c->targets) h->monitor(t);
    h->set_down_handler([c, finish](caf::down_msg& dm) {
      for (size_t i = 0; i < c->targets.size(); ++i)
        if (dm.source == c->targets[i].address())
          finish(caf::make_message(make_troupe_error(
              fmt::format("{} went down ({})", c->who[i], caf::to_string(dm.reason)))));
    });
    c->send_next();
    return {[call](caf::unit_t) {}};  // stays up until every reply, an error or a down message
  });
  caf::expected<std::vector<Reply>> out{caf::make_error(caf::sec::runtime_error)};
  waiter_self->receive([&](std::vector<Reply>& all) { out = std::move(all); },
                       [&](caf::error& e) { out = std::move(e); });
  return out;
}

}  // namespace troupe
