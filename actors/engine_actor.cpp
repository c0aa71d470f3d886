#include "actors/engine_actor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

#include "actors/scheduler_actor.hpp"
#include "runtime/error.hpp"

namespace troupe {

namespace {

struct Child {
  uint64_t seq_id = 0;
  CompletionOutput out;
  bool finished = false;
  FinishReason pending_finish = FinishReason::none;  // applied once the text caught up
  std::optional<int32_t> pending_stop_token;
};

struct Request {
  std::string id;
  caf::actor sink;
  bool stream = false;
  bool detokenize = true;
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  std::vector<Child> children;
  std::optional<std::vector<PositionLogprobMap>> prompt_logprobs;
  size_t unfinished = 0;
  size_t max_stop_len = 0;
  std::string error;
};

struct engine_state {
  EngineContext ctx;
  scheduler_actor scheduler;
  std::unordered_map<std::string, Request> requests;
  std::unordered_map<uint64_t, std::pair<std::string, size_t>> owner;  // seq -> (request, child)
  uint64_t next_request = 0;
  uint64_t next_seq = 1;
  std::mt19937_64 rng;
  std::string failure;  // why the last failed sequences failed
  bool executors_lost = false;
  std::vector<caf::actor> watchers;  // told when the engine can no longer serve
  uint64_t submitted = 0, finished = 0;
  static inline const char* name = "troupe.engine";
};

using self_ptr = engine_actor::stateful_pointer<engine_state>;

std::string clip(const std::string& s, int32_t max_len) {
  if (max_len <= 0 || int32_t(s.size()) <= max_len) return s;
  return s.substr(0, size_t(max_len)) + "...";
}

/// Checks that need the model (SamplingParams' own ranges were checked by validate()).
void check_against_model(const EngineContext& ctx, const SamplingParams& p) {
  // max_logprobs = -1: no limit (vLLM), and logprobs = -1 asks for the whole vocabulary.
  const auto over = [&](int64_t n) {
    return ctx.max_logprobs >= 0 && (n < 0 || n > ctx.max_logprobs);
  };
  if (p.logprobs && over(*p.logprobs))
    fail("logprobs = {}: must be <= max_logprobs = {}", *p.logprobs, ctx.max_logprobs);
  if (p.prompt_logprobs && over(*p.prompt_logprobs))
    fail("prompt_logprobs = {}: must be <= max_logprobs = {}", *p.prompt_logprobs,
         ctx.max_logprobs);
  for (auto t : p.stop_token_ids)
    if (t < 0 || t >= ctx.vocab_size)
      fail("stop_token_ids: {} is not a token id (vocabulary size {})", t, ctx.vocab_size);
  for (const auto& [t, b] : p.logit_bias) {
    (void)b;
    if (t < 0 || t >= ctx.vocab_size)
      fail("logit_bias: {} is not a token id (vocabulary size {})", t, ctx.vocab_size);
  }
  if (!p.stop.empty() && !p.detokenize)
    fail("stop = {}: stop strings need detokenize = true", fmt::join(p.stop, ", "));
}

void check_prompt(const EngineContext& ctx, const std::vector<int32_t>& ids) {
  if (ids.empty()) fail("prompt: empty (at least one token is needed)");
  if (int32_t(ids.size()) > ctx.max_model_len)
    fail("prompt: {} tokens, more than max_model_len = {}", ids.size(), ctx.max_model_len);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= ctx.vocab_size)
      fail("prompt_token_ids[{}] = {}: not a token id (vocabulary size {})", i, ids[i],
           ctx.vocab_size);
}

PositionLogprobMap to_map(const EngineContext& ctx, const PositionLogprobs& p) {
  PositionLogprobMap m;
  auto decoded = [&](int32_t t) {
    return ctx.tokenizer ? ctx.tokenizer->decode(std::vector<int32_t>{t}, false) : std::string();
  };
  m.emplace(p.chosen.token, Logprob{p.chosen.logprob, p.chosen.rank, decoded(p.chosen.token)});
  for (const auto& e : p.top)
    if (!m.contains(e.token)) m.emplace(e.token, Logprob{e.logprob, e.rank, decoded(e.token)});
  return m;
}

RequestOutput snapshot(const Request& r) {
  RequestOutput o;
  o.request_id = r.id;
  o.prompt = r.prompt;
  o.prompt_token_ids = r.prompt_ids;
  o.prompt_logprobs = r.prompt_logprobs;
  for (const auto& c : r.children) o.outputs.push_back(c.out);
  o.finished = r.unfinished == 0;
  o.error = r.error;
  return o;
}

void emit(self_ptr self, const std::string& request_id) {
  auto& st = self->state;
  auto it = st.requests.find(request_id);
  if (it == st.requests.end()) return;
  Request& r = it->second;
  if (!r.stream && r.unfinished > 0) return;
  caf::anon_send(r.sink, output_atom::value, snapshot(r));  // the sink is dynamically typed
  if (r.unfinished == 0) {
    for (const auto& c : r.children) st.owner.erase(c.seq_id);
    st.requests.erase(it);
    ++st.finished;
  }
}

void close_detok(self_ptr self, uint64_t seq_id) {
  DetokBatch b;
  b.push.push_back(DetokPush{seq_id, {}, true});
  self->request(self->state.ctx.tokenizers.for_sequence(seq_id), caf::infinite, detok_atom::value,
                std::move(b))
      .then([](const DetokDeltas&) {}, [](caf::error&) {});
}

void finish_child(engine_state& st, Request& r, Child& c, FinishReason why) {
  if (c.finished) return;
  c.finished = true;
  c.out.finish_reason = to_string(why);
  if (why == FinishReason::error && r.error.empty())
    r.error = st.failure.empty() ? "the engine failed this request" : st.failure;
  --r.unfinished;
}

/// Appends detokenized text and applies stop strings; then applies a pending finish.
void apply_text(self_ptr self, Request& r, Child& c, const std::string& delta) {
  auto& st = self->state;
  if (c.finished) return;
  const size_t old_len = c.out.text.size();
  c.out.text += delta;
  if (!r.params.stop.empty() && !delta.empty()) {
    const size_t from = old_len >= r.max_stop_len ? old_len - r.max_stop_len + 1 : 0;
    size_t best = std::string::npos;
    const std::string* which = nullptr;
    for (const auto& s : r.params.stop) {
      if (s.empty()) continue;
      const size_t p = c.out.text.find(s, from);
      if (p != std::string::npos && (best == std::string::npos || p < best)) {
        best = p;
        which = &s;
      }
    }
    if (which) {
      c.out.text.resize(r.params.include_stop_str_in_output ? best + which->size() : best);
      c.out.stop_reason_text = *which;
      if (c.pending_finish == FinishReason::none) {
        self->send(st.scheduler, abort_atom::value, std::vector<uint64_t>{c.seq_id});
        close_detok(self, c.seq_id);
      }
      finish_child(st, r, c, FinishReason::stop);
      return;
    }
  }
  if (c.pending_finish != FinishReason::none) {
    if (c.pending_stop_token) c.out.stop_reason_token = *c.pending_stop_token;
    finish_child(st, r, c, c.pending_finish);
  }
}

void on_updates(self_ptr self, SeqUpdates& ups) {
  auto& st = self->state;
  std::map<size_t, DetokBatch> batches;  // by tokenizer member
  std::set<std::string> touched_now;
  for (SeqUpdate& u : ups.items) {
    auto own = st.owner.find(u.seq_id);
    if (own == st.owner.end()) continue;
    Request& r = st.requests.at(own->second.first);
    Child& c = r.children[own->second.second];
    if (c.finished) continue;
    if (!u.prompt_logprobs.empty() && r.prompt_logprobs)
      for (const auto& p : u.prompt_logprobs) r.prompt_logprobs->push_back(to_map(st.ctx, p));
    for (size_t k = 0; k < u.new_token_ids.size(); ++k) {
      c.out.token_ids.push_back(u.new_token_ids[k]);
      if (k < u.logprobs.size()) {
        if (c.out.cumulative_logprob)
          *c.out.cumulative_logprob += double(u.logprobs[k].chosen.logprob);
        if (c.out.logprobs) c.out.logprobs->push_back(to_map(st.ctx, u.logprobs[k]));
      }
    }
    if (u.finish != FinishReason::none) {
      c.pending_finish = u.finish;
      c.pending_stop_token = u.stop_token;
    }
    if (r.detokenize && u.finish != FinishReason::error) {
      const size_t member = size_t(u.seq_id % st.ctx.tokenizers.size());
      batches[member].push.push_back(
          DetokPush{u.seq_id, u.new_token_ids, u.finish != FinishReason::none});
    } else {
      apply_text(self, r, c, "");
      touched_now.insert(r.id);
    }
  }
  for (const auto& id : touched_now) emit(self, id);
  for (auto& [member, batch] : batches) {
    self->request(st.ctx.tokenizers.members()[member], caf::infinite, detok_atom::value,
                  std::move(batch))
        .then(
            [=](DetokDeltas& deltas) {
              auto& s = self->state;
              std::set<std::string> touched;
              for (auto& [seq, text] : deltas.items) {
                auto own = s.owner.find(seq);
                if (own == s.owner.end()) continue;
                Request& r = s.requests.at(own->second.first);
                apply_text(self, r, r.children[own->second.second], text);
                touched.insert(r.id);
              }
              for (const auto& id : touched) emit(self, id);
            },
            [=](caf::error& e) {
              spdlog::error("engine: detokenization failed: {}", error_text(e));
            });
  }
}

/// Turns an accepted request into sequences and hands them to the scheduler.
std::string admit(self_ptr self, EngineRequest& req, std::vector<int32_t> ids, caf::actor sink) {
  auto& st = self->state;
  const SamplingParams& p = req.params;
  if (p.truncate_prompt_tokens && int32_t(ids.size()) > *p.truncate_prompt_tokens)
    ids.erase(ids.begin(), ids.end() - *p.truncate_prompt_tokens);
  check_prompt(st.ctx, ids);

  std::string id = req.request_id.empty() ? std::to_string(st.next_request++) : req.request_id;
  if (st.requests.contains(id)) fail("request_id = '{}': already in use", id);

  Request r;
  r.id = id;
  r.sink = std::move(sink);
  r.stream = req.stream;
  r.detokenize = p.detokenize && st.ctx.tokenizer != nullptr;
  r.prompt = std::move(req.prompt);
  r.prompt_ids = ids;
  r.params = p;
  for (const auto& s : p.stop) r.max_stop_len = std::max(r.max_stop_len, s.size());
  if (p.prompt_logprobs) r.prompt_logprobs.emplace(1);  // the first token has none

  const int32_t n = std::max<int32_t>(1, int32_t(p.n));
  const int32_t max_tokens = p.max_tokens ? int32_t(*p.max_tokens)
                                          : st.ctx.max_model_len - int32_t(ids.size());
  std::vector<int32_t> eos = p.ignore_eos ? std::vector<int32_t>{} : st.ctx.eos_token_ids;
  std::vector<int32_t> stop_ids(p.stop_token_ids.begin(), p.stop_token_ids.end());

  SeqSpecs specs;
  std::map<size_t, DetokBatch> opens;
  for (int32_t i = 0; i < n; ++i) {
    SeqSpec s;
    s.seq_id = st.next_seq++;
    s.prompt_token_ids = ids;
    SeqSampling& sp = s.sampling;
    sp.temperature = float(p.temperature);
    sp.top_k = p.top_k < 0 ? 0 : int32_t(p.top_k);
    sp.top_p = float(p.top_p);
    sp.min_p = float(p.min_p);
    sp.presence_penalty = float(p.presence_penalty);
    sp.frequency_penalty = float(p.frequency_penalty);
    sp.repetition_penalty = float(p.repetition_penalty);
    sp.seed = p.seed ? uint64_t(*p.seed) + uint64_t(i) : st.rng();
    // vLLM's -1 (allowed when max_logprobs = -1) is the whole vocabulary; the executor's -1
    // means none.
    const auto count = [&](int64_t k) { return k < 0 ? st.ctx.vocab_size : int32_t(k); };
    sp.num_logprobs = p.logprobs ? count(*p.logprobs) : -1;
    // Prompt logprobs are the same for every sample: only the first computes them.
    sp.num_prompt_logprobs = (p.prompt_logprobs && i == 0) ? count(*p.prompt_logprobs) : -1;
    sp.min_tokens = int32_t(p.min_tokens);
    sp.stop_ids = eos;
    sp.stop_ids.insert(sp.stop_ids.end(), stop_ids.begin(), stop_ids.end());
    for (const auto& [t, b] : p.logit_bias) sp.logit_bias.emplace_back(int32_t(t), float(b));
    s.stop.max_tokens = max_tokens;
    s.stop.min_tokens = int32_t(p.min_tokens);
    s.stop.eos_token_ids = eos;
    s.stop.stop_token_ids = stop_ids;

    Child c;
    c.seq_id = s.seq_id;
    c.out.index = i;
    if (p.logprobs) {
      c.out.logprobs.emplace();
      c.out.cumulative_logprob = 0.0;
    }
    r.children.push_back(std::move(c));
    st.owner.emplace(s.seq_id, std::make_pair(id, size_t(i)));
    if (r.detokenize)
      opens[size_t(s.seq_id % st.ctx.tokenizers.size())].open.push_back(
          DetokOpen{s.seq_id, ids, p.skip_special_tokens, p.spaces_between_special_tokens});
    specs.items.push_back(std::move(s));
  }
  r.unfinished = size_t(n);
  if (st.ctx.log_requests)
    spdlog::info("Received request {}: prompt: '{}', prompt_token_ids: {}, n: {}, max_tokens: {}",
                 id, clip(r.prompt, st.ctx.max_log_len), ids.size(), n, max_tokens);
  st.requests.emplace(id, std::move(r));
  ++st.submitted;
  // The detokenizers must hold the sequences' state before their first tokens arrive: both
  // messages below go out now, and each tokenizer member handles its mail in order.
  for (auto& [member, batch] : opens)
    self->request(st.ctx.tokenizers.members()[member], caf::infinite, detok_atom::value,
                  std::move(batch))
        .then([](const DetokDeltas&) {},
              [](caf::error& e) { spdlog::error("engine: detokenizer: {}", error_text(e)); });
  self->send(st.scheduler, add_atom::value, std::move(specs));
  return id;
}

engine_actor::behavior_type engine_behavior(self_ptr self, EngineContext ctx) {
  auto& st = self->state;
  st.rng.seed(ctx.seed);
  st.ctx = std::move(ctx);
  st.scheduler = spawn_scheduler(self->system(), st.ctx.scheduler, st.ctx.cache_manager,
                                 st.ctx.executors, caf::actor_cast<engine_actor>(self));
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
          validate(req.params);
          check_against_model(s.ctx, req.params);
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
        auto& s = self->state;
        auto it = s.requests.find(request_id);
        if (it == s.requests.end()) return;
        Request& r = it->second;
        std::vector<uint64_t> seqs;
        for (auto& c : r.children) {
          if (c.finished) continue;
          seqs.push_back(c.seq_id);
          if (r.detokenize) close_detok(self, c.seq_id);
          finish_child(s, r, c, FinishReason::abort);
        }
        self->send(s.scheduler, abort_atom::value, std::move(seqs));
        emit(self, request_id);
      },
      [=](updates_atom, SeqUpdates& ups) { on_updates(self, ups); },
      [=](failed_atom, const std::string& why, bool fatal) {
        auto& s = self->state;
        s.failure = why;
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
        base.requests_submitted = self->state.submitted;
        base.requests_finished = self->state.finished;
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
  };
}

}  // namespace

engine_actor spawn_engine_actor(caf::actor_system& sys, EngineContext context) {
  return sys.spawn(engine_behavior, std::move(context));
}

}  // namespace troupe
