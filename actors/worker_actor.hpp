// The worker actor: what a `troupe worker` process publishes (or, when it dials a head, hands
// to that head's registry). One per process, scheduled (not detached), so it answers while
// its executor is busy with a step.
//
// A worker serves run after run: each head that joins gets a fresh executor (detached, its
// own thread and backend) for its session, and the session ends when that head leaves, goes
// down (its process exits or its connection times out) or the executor dies; the worker
// then waits for the next head. While a session's head is alive, a second head is refused
// with a message naming the head being served, so a client arriving never kills the run
// already there.
#pragma once

#include <functional>
#include <string>

#include "actors/executor_actor.hpp"
#include "actors/messages.hpp"

namespace troupe {

/// join: a head asks for an executor; the reply is the session's executor (as a dynamically
/// typed handle: actor_cast it to executor_actor) or an error when the worker is busy.
/// leave (with the anchor the head joined with): the head is done; the executor is stopped and
/// the worker free again. A leave from any other head (one that was refused as busy) is
/// ignored: it must not end the session of the head being served.
/// drain: this worker is asked to leave (`troupe worker` on SIGTERM): with a session, its head
/// is asked to move the rank to another worker (ExecutorGroup::migrate) and the answer comes
/// when the session has ended ("" when it moved, else why not); without one, "" at once.
using worker_actor = caf::typed_actor<caf::replies_to<join_atom, WorkerJoin>::with<caf::actor>,
                                      caf::reacts_to<leave_atom, caf::actor>,
                                      caf::replies_to<drain_atom>::with<std::string>>;

/// Makes each session's executor (spawn_executor; tests inject faulty ones).
using ExecutorFactory = std::function<executor_actor(caf::actor_system&)>;

/// `self_description` names this worker in messages ("worker 10.0.0.2:40001").
worker_actor spawn_worker(caf::actor_system& sys, std::string self_description,
                          ExecutorFactory make_executor = spawn_executor);

// On the head, workers that dial in (troupe launch) register with a registry actor as
// (register_atom, WorkerHello, caf::actor worker): actors/cluster_launch.cpp.

}  // namespace troupe
