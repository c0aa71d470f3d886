#include "actors/request_sink.hpp"

#include <spdlog/spdlog.h>

#include <unordered_map>

#include "runtime/openai/api_error.hpp"

namespace troupe {

namespace {

using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// What the sink saw of one choice: for the metrics.
struct ChoiceTiming {
  std::optional<Clock::time_point> first, last;
  size_t tokens = 0;
  bool finished = false;
};

struct sink_state {
  SinkPlan plan;
  std::shared_ptr<http::Responder> out;
  std::shared_ptr<openai::ServingMetrics> metrics;
  engine_actor engine;
  std::unordered_map<std::string, size_t> index;  // engine request id -> prompt index
  // Each prompt's output so far: the engine sends what is new each step (OutputKind::delta)
  // and it is added up here, so a step costs what it added, not the length so far. Once
  // `finished`, it is the prompt's final output.
  std::vector<RequestOutput> sofar;
  std::vector<std::vector<ChoiceTiming>> timing;  // [prompt][choice]
  size_t accepted = 0, finished = 0;
  bool failed = false, started = false, client_gone = false;
  std::optional<openai::CompletionStream> completion_stream;
  std::optional<openai::ChatStream> chat_stream;
  static inline const char* name = "troupe.request_sink";
};

using self_ptr = caf::stateful_actor<sink_state>*;

std::string dump(const ojson& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void respond_error(sink_state& st, const openai::ApiError& e) {
  st.out->respond(e.status, "application/json", openai::error_body(e), st.plan.extra_headers);
}

/// Aborts every engine request of this sink that may still run.
void abort_all(self_ptr self) {
  auto& st = self->state;
  for (size_t i = 0; i < st.plan.requests.size(); ++i)
    if (!st.sofar[i].finished)
      self->send(st.engine, abort_atom::value, st.plan.requests[i].request_id);
}

void start_stream(sink_state& st) {
  if (st.started) return;
  st.started = true;
  const bool plain = st.plan.kind == SinkPlan::Kind::generate;
  st.out->start_stream(200, plain ? "application/json" : "text/event-stream; charset=utf-8",
                       st.plan.extra_headers);
}

void track(sink_state& st, size_t p, const RequestOutput& out) {
  const auto now = Clock::now();
  auto& timings = st.timing[p];
  for (const auto& c : out.outputs) {
    if (size_t(c.index) >= timings.size()) timings.resize(size_t(c.index) + 1);
    ChoiceTiming& t = timings[size_t(c.index)];
    if (t.finished) continue;
    const size_t n = c.token_ids.size();
    if (n > t.tokens) {
      const auto fresh = int64_t(n - t.tokens);
      if (!t.first) {
        st.metrics->record_first_token(seconds(st.plan.arrival, now),
                                       int64_t(out.prompt_token_ids.size()), fresh);
        t.first = now;
      } else {
        // One token per engine step (troupe has no speculative decoding): several fresh
        // tokens are several steps that stream_interval sent together.
        st.metrics->record_tokens(seconds(*t.last, now), fresh, fresh);
      }
      t.last = now;
      t.tokens = n;
    }
    if (!c.finish_reason.empty()) {
      t.finished = true;
      openai::FinishedSequence f;
      f.finish_reason = c.finish_reason;
      f.prompt_tokens = int64_t(out.prompt_token_ids.size());
      f.generation_tokens = int64_t(n);
      f.e2e_seconds = seconds(st.plan.arrival, now);
      // The phases from the engine's times (the scheduler's), not from when outputs got here.
      openai::set_phases(f, out.metrics.arrival_time, c.times.first_scheduled_time,
                         c.times.first_token_time, c.times.last_token_time);
      f.max_tokens = st.plan.max_tokens_param;
      st.metrics->record_finished(f);
    }
  }
  if (out.finished) {
    size_t longest = 0;
    for (const auto& c : out.outputs) longest = std::max(longest, c.token_ids.size());
    st.metrics->record_request(int64_t(out.outputs.size()), int64_t(longest));
  }
}

void log_output(const sink_state& st, const RequestOutput& out) {
  if (!st.plan.log_outputs) return;
  for (const auto& c : out.outputs)
    spdlog::info("Generated response {}: output: {:?}, output_token_ids: {}, finish_reason: {}",
                 out.request_id, c.text, c.token_ids.size(), c.finish_reason);
}

void on_output(self_ptr self, RequestOutput& delta) {
  auto& st = self->state;
  auto it = st.index.find(delta.request_id);
  if (it == st.index.end() || st.failed) return;
  const size_t p = it->second;
  if (st.sofar[p].finished) return;
  append_output(st.sofar[p], std::move(delta));
  RequestOutput& out = st.sofar[p];
  track(st, p, out);
  const auto& plan = st.plan;
  if (!out.error.empty()) {
    // The engine failed this request after accepting it (an executor died, a step failed).
    st.failed = true;
    abort_all(self);
    const auto err = openai::make_error(500, "the engine failed this request: " + out.error);
    if (plan.stream && st.started) {
      st.out->write(openai::sse_event(openai::error_body(err)) + openai::sse_done());
      st.out->end();
    } else {
      respond_error(st, err);
    }
    self->quit();
    return;
  }
  if (plan.stream && !st.client_gone) {
    start_stream(st);
    std::string events;
    switch (plan.kind) {
      case SinkPlan::Kind::completion:
        events = st.completion_stream->on_output(p, out);
        break;
      case SinkPlan::Kind::chat:
        events = st.chat_stream->on_output(out);
        break;
      case SinkPlan::Kind::generate:
        events = dump(openai::plain_generate_response(out)) + "\n";
        break;
    }
    if (!events.empty()) st.out->write(std::move(events));
  }
  if (!out.finished) return;
  log_output(st, out);
  if (++st.finished < st.sofar.size()) return;

  // Every prompt finished.
  if (!st.client_gone) {
    if (plan.stream) {
      if (plan.kind == SinkPlan::Kind::completion) st.out->write(st.completion_stream->finish());
      if (plan.kind == SinkPlan::Kind::chat) st.out->write(st.chat_stream->finish());
      st.out->end();
    } else {
      ojson body;
      switch (plan.kind) {
        case SinkPlan::Kind::completion: {
          body =
              openai::completion_response(*plan.completion, plan.ctx, st.sofar, plan.prompt_texts);
          break;
        }
        case SinkPlan::Kind::chat:
          body = openai::chat_response(*plan.chat, plan.ctx, st.sofar[0], plan.echo_text);
          break;
        case SinkPlan::Kind::generate:
          body = openai::plain_generate_response(st.sofar[0]);
          break;
      }
      st.out->respond(200, "application/json", dump(body), plan.extra_headers);
    }
  }
  self->quit();
}

void on_submit_error(self_ptr self, const std::string& what) {
  auto& st = self->state;
  if (st.failed) return;
  st.failed = true;
  abort_all(self);
  // A dead engine is the server's failure, not the request's.
  const bool engine_gone = what.find("no executors left") != std::string::npos;
  auto err = engine_gone ? openai::make_error(503, what) : openai::error_from_message(what);
  if (err.param == "prompt_token_ids") err.param = "prompt";  // the client's field
  if (st.started) {
    st.out->write(openai::sse_event(openai::error_body(err)) + openai::sse_done());
    st.out->end();
  } else {
    respond_error(st, err);
  }
  self->quit();
}

caf::behavior sink_behavior(self_ptr self, engine_actor engine, SinkPlan plan,
                            std::shared_ptr<http::Responder> out,
                            std::shared_ptr<openai::ServingMetrics> metrics) {
  auto& st = self->state;
  st.engine = std::move(engine);
  st.out = std::move(out);
  st.metrics = std::move(metrics);
  st.plan = std::move(plan);
  const size_t n = st.plan.requests.size();
  st.sofar.resize(n);
  st.timing.resize(n);
  for (size_t i = 0; i < n; ++i) st.index.emplace(st.plan.requests[i].request_id, i);
  if (st.plan.stream) {
    if (st.plan.kind == SinkPlan::Kind::completion)
      st.completion_stream.emplace(*st.plan.completion, st.plan.ctx, st.plan.prompt_texts);
    if (st.plan.kind == SinkPlan::Kind::chat)
      st.chat_stream.emplace(*st.plan.chat, st.plan.ctx, st.plan.echo_text);
  }
  // An engine that goes away answers nothing more: fail this request rather than wait.
  self->monitor(st.engine);
  self->set_down_handler([=](caf::down_msg&) {
    auto& s = self->state;
    if (!s.failed && !s.client_gone) {
      s.failed = true;
      const auto err = openai::make_error(503, "the engine stopped");
      if (s.started) {
        s.out->write(openai::sse_event(openai::error_body(err)) + openai::sse_done());
        s.out->end();
      } else {
        respond_error(s, err);
      }
    }
    self->quit();
  });
  const caf::actor me = caf::actor_cast<caf::actor>(self);
  for (auto& req : st.plan.requests) {
    self->request(st.engine, caf::infinite, submit_atom::value, req, me)
        .then(
            [=](const std::string&) {
              auto& s = self->state;
              // Streams answer 200 once every prompt is accepted, as vLLM's do before the
              // first token.
              if (++s.accepted == s.plan.requests.size() && s.plan.stream && !s.failed)
                start_stream(s);
            },
            [=](caf::error& e) { on_submit_error(self, error_text(e)); });
  }
  return {
      [=](output_atom, RequestOutput& o) { on_output(self, o); },
      [=](abort_atom) {
        auto& s = self->state;
        if (s.client_gone) return;
        s.client_gone = true;
        abort_all(self);
        // The aborted requests' final outputs still come, and end this actor.
        if (s.failed) self->quit();
      },
  };
}

}  // namespace

caf::actor spawn_request_sink(caf::actor_system& sys, engine_actor engine, SinkPlan plan,
                              std::shared_ptr<http::Responder> out,
                              std::shared_ptr<openai::ServingMetrics> metrics) {
  return sys.spawn(sink_behavior, std::move(engine), std::move(plan), std::move(out),
                   std::move(metrics));
}

}  // namespace troupe
