#include "runtime/api/output_processor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "runtime/error.hpp"

namespace troupe {

namespace {

std::string clip(const std::string& s, int32_t max_len) {
  if (max_len <= 0 || int32_t(s.size()) <= max_len) return s;
  return s.substr(0, size_t(max_len)) + "...";
}

/// A steady-clock time as seconds since the Unix epoch. One offset for the whole process, taken
/// on first use, so the differences between times are the steady clock's own.
double epoch_seconds(std::chrono::steady_clock::time_point t) {
  using namespace std::chrono;
  static const double offset = duration<double>(system_clock::now().time_since_epoch()).count() -
                               duration<double>(steady_clock::now().time_since_epoch()).count();
  return offset + duration<double>(t.time_since_epoch()).count();
}

}  // namespace

OutputProcessor::OutputProcessor(OutputProcessorConfig config,
                                 std::shared_ptr<const Tokenizer> tokenizer)
    : config_(std::move(config)), tokenizer_(std::move(tokenizer)), rng_(config_.seed) {}

void OutputProcessor::check(const SamplingParams& p) const {
  validate(p);
  // max_logprobs = -1: no limit (vLLM), and logprobs = -1 asks for the whole vocabulary.
  const auto over = [&](int64_t n) {
    return config_.max_logprobs >= 0 && (n < 0 || n > config_.max_logprobs);
  };
  if (p.logprobs && over(*p.logprobs))
    fail("logprobs = {}: must be <= max_logprobs = {}", *p.logprobs, config_.max_logprobs);
  if (p.prompt_logprobs && over(*p.prompt_logprobs))
    fail("prompt_logprobs = {}: must be <= max_logprobs = {}", *p.prompt_logprobs,
         config_.max_logprobs);
  for (auto t : p.stop_token_ids)
    if (t < 0 || t >= config_.vocab_size)
      fail("stop_token_ids: {} is not a token id (vocabulary size {})", t, config_.vocab_size);
  for (const auto& [t, b] : p.logit_bias) {
    (void)b;
    if (t < 0 || t >= config_.vocab_size)
      fail("logit_bias: {} is not a token id (vocabulary size {})", t, config_.vocab_size);
  }
  for (auto t : p.allowed_token_ids)
    if (t < 0 || t >= config_.vocab_size)
      fail("allowed_token_ids: {} is not a token id (vocabulary size {})", t, config_.vocab_size);
  for (const auto& spec : p.logits_processors) {
    if (!config_.plugins)
      fail(
          "logits_processors: \"{}\": no such processor; allowed: none loaded (load plug-ins "
          "with --logits-processor-plugin)",
          spec);
    config_.plugins->check(spec);
  }
  if (!p.logits_processor_fns.empty() && !config_.in_process_executors)
    fail(
        "logits_processor_fns: {} C++ callables; allowed only with in-process executors "
        "(the executors are `troupe worker` processes); name plug-in processors in "
        "logits_processors instead",
        p.logits_processor_fns.size());
  for (const auto& fn : p.logits_processor_fns)
    if (!fn) fail("logits_processor_fns: an empty callable; allowed: callables");
  if (!p.bad_words.empty() && !tokenizer_)
    fail("bad_words = {}: needs the tokenizer (skip_tokenizer_init is set); not allowed without",
         nlohmann::json(p.bad_words).dump());
}

std::vector<std::vector<int32_t>> OutputProcessor::bad_words_ids(
    const std::vector<std::string>& words) const {
  // vLLM's SamplingParams.update_from_tokenizer: each word as written (less leading spaces),
  // and with one leading space when that spells it with other tokens of the same count, so the
  // word is banned at the start of the text and after a space alike.
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string word =
        words[i].substr(std::min(words[i].size(), words[i].find_first_not_of(" \t\n\r\f\v")));
    if (word.empty())
      fail("bad_words[{}] = {}: allowed: words with a character other than whitespace", i,
           nlohmann::json(words[i]).dump());
    std::vector<int32_t> plain = tokenizer_->encode(word, false);
    std::vector<int32_t> spaced = tokenizer_->encode(" " + word, false);
    for (const auto* v : {&plain, &spaced})
      for (int32_t t : *v)
        if (t < 0 || t >= config_.vocab_size)
          fail("bad_words[{}] = {}: token {} is outside the model's vocabulary (size {})", i,
               nlohmann::json(words[i]).dump(), t, config_.vocab_size);
    const bool spaced_differs =
        !plain.empty() && !spaced.empty() && spaced[0] != plain[0] && spaced.size() == plain.size();
    if (!plain.empty()) ids.push_back(std::move(plain));
    if (spaced_differs) ids.push_back(std::move(spaced));
  }
  return ids;
}

void OutputProcessor::check_prompt(const std::vector<int32_t>& ids) const {
  if (ids.empty()) fail("prompt: empty (at least one token is needed)");
  if (int32_t(ids.size()) > config_.max_model_len)
    fail("prompt: {} tokens, more than max_model_len = {}", ids.size(), config_.max_model_len);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= config_.vocab_size)
      fail("prompt_token_ids[{}] = {}: not a token id (vocabulary size {})", i, ids[i],
           config_.vocab_size);
}

OutputProcessor::Admission OutputProcessor::add(std::string request_id, std::string prompt,
                                                std::vector<int32_t> ids, const SamplingParams& p,
                                                bool stream, OutputKind kind) {
  check(p);
  if (p.truncate_prompt_tokens) {
    // vLLM: keep the last k tokens; -1 keeps the last max_model_len.
    const auto keep =
        size_t(*p.truncate_prompt_tokens == -1 ? config_.max_model_len : *p.truncate_prompt_tokens);
    if (ids.size() > keep) ids.erase(ids.begin(), ids.end() - std::ptrdiff_t(keep));
  }
  check_prompt(ids);
  if (p.use_beam_search && config_.kv_blocks > 0 && config_.kv_block_size > 0) {
    const int64_t longest =
        p.max_tokens ? int64_t(ids.size()) + *p.max_tokens : int64_t(config_.max_model_len);
    const int64_t per_beam = (longest + config_.kv_block_size - 1) / config_.kv_block_size;
    const int64_t beams = p.best_of.value_or(p.n);
    if (beams * per_beam > config_.kv_blocks)
      fail(
          "best_of = {}: {} beams of up to {} tokens need {} KV blocks at once, more than the "
          "cache's {} (allowed: fewer beams, or a shorter prompt or max_tokens)",
          beams, beams, longest, beams * per_beam, config_.kv_blocks);
  }
  std::string id = request_id.empty() ? std::to_string(next_request_++) : std::move(request_id);
  if (requests_.contains(id)) fail("request_id = '{}': already in use", id);

  const int32_t n = std::max<int32_t>(1, int32_t(p.n));
  const bool beam = p.use_beam_search;
  const int32_t best_of = p.best_of ? std::max<int32_t>(n, int32_t(*p.best_of)) : n;
  const int32_t samples = beam ? n : best_of;  // beam search: n result sequences
  const bool ranked = samples > n;
  const std::vector<int32_t> eos = p.ignore_eos ? std::vector<int32_t>{} : config_.eos_token_ids;
  // transformers' beams_to_keep: candidates per beam and step, so that num_beams survive the
  // tokens that end a hypothesis (eos and stop_token_ids, as its eos_token_id list).
  const int32_t candidates =
      std::max<int32_t>(2, 1 + int32_t(eos.size() + p.stop_token_ids.size())) * best_of;
  if (beam) {
    if (!config_.beam_search_refusal.empty())
      fail("use_beam_search = true: not supported here ({})", config_.beam_search_refusal);
    if (config_.max_num_seqs > 0 && best_of > config_.max_num_seqs)
      fail(
          "best_of = {}: allowed: <= max_num_seqs = {} with use_beam_search (a group's beams "
          "run together)",
          best_of, config_.max_num_seqs);
    if (candidates > config_.vocab_size)
      fail(
          "best_of = {}: allowed: at most {} beams with use_beam_search (each step ranks {} "
          "candidates per beam, more than the vocabulary of {})",
          best_of, config_.vocab_size / (candidates / best_of), candidates, config_.vocab_size);
  }

  Request r;
  r.id = id;
  r.arrival_time = epoch_seconds(std::chrono::steady_clock::now());
  r.stream = stream && !ranked && !beam;  // the best n are only known at the end
  r.kind = kind;
  r.num_returned = size_t(n);
  r.detokenize = p.detokenize && tokenizer_ != nullptr;
  r.prompt = std::move(prompt);
  r.prompt_ids = ids;
  r.params = p;
  for (const auto& s : p.stop) r.max_stop_len = std::max(r.max_stop_len, s.size());
  if (p.prompt_logprobs) r.prompt_logprobs.emplace(1);  // the first token has none

  const int32_t max_tokens =
      p.max_tokens ? int32_t(*p.max_tokens) : config_.max_model_len - int32_t(ids.size());
  const std::vector<int32_t> stop_ids(p.stop_token_ids.begin(), p.stop_token_ids.end());
  // vLLM's -1 (allowed when max_logprobs = -1) is the whole vocabulary; the executor's -1 means
  // none.
  const auto count = [&](int64_t k) { return k < 0 ? config_.vocab_size : int32_t(k); };
  std::vector<int32_t> allowed(p.allowed_token_ids.begin(), p.allowed_token_ids.end());
  std::sort(allowed.begin(), allowed.end());
  allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
  const std::vector<std::vector<int32_t>> bad_words = bad_words_ids(p.bad_words);

  Admission a;
  a.request_id = id;
  for (int32_t i = 0; i < samples; ++i) {
    SeqSpec s;
    s.seq_id = next_seq_++;
    s.prompt_token_ids = ids;
    SeqSampling& sp = s.sampling;
    static_cast<SamplingKnobs&>(sp) =
        sampling_knobs(p, p.seed ? uint64_t(*p.seed) + uint64_t(i) : rng_());
    // Ranking needs each sampled token's logprob (num_logprobs 0: that one, no top-N); beams
    // need their candidates.
    sp.num_logprobs = p.logprobs ? count(*p.logprobs) : (ranked ? 0 : -1);
    if (beam) sp.num_logprobs = std::max(sp.num_logprobs, candidates);
    // Prompt logprobs are the same for every sample: only the first computes them.
    sp.num_prompt_logprobs = (p.prompt_logprobs && i == 0) ? count(*p.prompt_logprobs) : -1;
    sp.min_tokens = int32_t(p.min_tokens);
    sp.stop_ids = eos;
    sp.stop_ids.insert(sp.stop_ids.end(), stop_ids.begin(), stop_ids.end());
    for (const auto& [t, b] : p.logit_bias) sp.logit_bias.emplace_back(int32_t(t), float(b));
    sp.allowed_token_ids = allowed;
    sp.bad_words_ids = bad_words;
    sp.logits_processors = p.logits_processors;
    sp.logits_processor_fns = p.logits_processor_fns;
    s.stop.max_tokens = max_tokens;
    s.stop.min_tokens = int32_t(p.min_tokens);
    s.stop.eos_token_ids = eos;
    s.stop.stop_token_ids = stop_ids;

    Sequence q;
    q.seq_id = s.seq_id;
    q.out.index = i;
    if (p.logprobs) q.out.logprobs.emplace();
    if (p.logprobs || beam) q.out.cumulative_logprob = 0.0;
    r.seqs.push_back(std::move(q));
    if (r.detokenize)
      a.detok_open.push_back(
          DetokOpen{s.seq_id, ids, p.skip_special_tokens, p.spaces_between_special_tokens});
    if (!beam || i == 0) a.seqs.push_back(std::move(s));  // one root runs every beam
  }
  if (beam) {
    BeamSpec b;
    b.num_beams = best_of;
    b.num_return = n;
    b.length_penalty = p.length_penalty;
    b.early_stopping = p.early_stopping;
    b.num_candidates = candidates;
    b.num_logprobs_shown = p.logprobs ? count(*p.logprobs) : -1;
    for (const Sequence& q : r.seqs) b.output_seq_ids.push_back(q.seq_id);
    a.seqs.front().beam = std::move(b);
  }
  r.unfinished = size_t(samples);
  for (size_t i = 0; i < r.seqs.size(); ++i)
    owner_.emplace(r.seqs[i].seq_id, std::make_pair(id, i));
  if (config_.log_requests)
    spdlog::info("Received request {}: prompt: '{}', prompt_token_ids: {}, n: {}, max_tokens: {}",
                 id, clip(r.prompt, config_.max_log_len), ids.size(), samples, max_tokens);
  requests_.emplace(id, std::move(r));
  ++submitted_;
  return a;
}

std::pair<OutputProcessor::Request*, OutputProcessor::Sequence*> OutputProcessor::find(
    uint64_t seq_id) {
  auto own = owner_.find(seq_id);
  if (own == owner_.end()) return {nullptr, nullptr};
  Request& r = requests_.at(own->second.first);
  return {&r, &r.seqs[own->second.second]};
}

PositionLogprobMap OutputProcessor::to_map(const PositionLogprobs& p) const {
  PositionLogprobMap m;
  auto decoded = [&](int32_t t) {
    return tokenizer_ ? tokenizer_->decode(std::vector<int32_t>{t}, false) : std::string();
  };
  m.emplace(p.chosen.token, Logprob{p.chosen.logprob, p.chosen.rank, decoded(p.chosen.token)});
  for (const auto& e : p.top)
    if (!m.contains(e.token)) m.emplace(e.token, Logprob{e.logprob, e.rank, decoded(e.token)});
  return m;
}

RequestMetrics OutputProcessor::request_metrics(const Request& r) {
  RequestMetrics m;
  m.arrival_time = r.arrival_time;
  // Over every sequence, the ones best_of > n leaves out too: they ran.
  const auto fold = [](std::optional<double>& into, const std::optional<double>& t, bool later) {
    if (t && (!into || (later ? *t > *into : *t < *into))) into = t;
  };
  for (const Sequence& s : r.seqs) {
    fold(m.first_scheduled_time, s.times.first_scheduled_time, false);
    fold(m.first_token_time, s.times.first_token_time, false);
    fold(m.last_token_time, s.times.last_token_time, true);
  }
  if (m.first_scheduled_time) m.time_in_queue = *m.first_scheduled_time - m.arrival_time;
  m.finished_time = r.finished_time;
  return m;
}

RequestOutput OutputProcessor::assemble(const Request& r) {
  RequestOutput o;
  o.request_id = r.id;
  o.prompt = r.prompt;
  o.prompt_token_ids = r.prompt_ids;
  o.prompt_logprobs = r.prompt_logprobs;
  o.num_cached_tokens = std::max(0, r.num_cached_tokens);
  o.metrics = request_metrics(r);
  if (r.seqs.size() <= r.num_returned) {
    for (const auto& s : r.seqs) {
      o.outputs.push_back(s.out);
      o.outputs.back().times = s.times;
    }
  } else {
    std::vector<const Sequence*> best;
    for (const auto& s : r.seqs)
      if (!s.dropped) best.push_back(&s);
    std::stable_sort(best.begin(), best.end(),
                     [](const Sequence* a, const Sequence* b) { return a->score > b->score; });
    best.resize(std::min(best.size(), r.num_returned));
    for (size_t i = 0; i < best.size(); ++i) {
      o.outputs.push_back(best[i]->out);
      o.outputs.back().index = int32_t(i);
      o.outputs.back().times = best[i]->times;
    }
  }
  o.finished = r.unfinished == 0;
  o.error = r.error;
  return o;
}

namespace {

/// The bytes of a sequence's text that no stop string can take back any more: all of it once
/// finished (or with include_stop_str_in_output, whose cut falls after the match); else all but
/// the last (longest stop - 1), moved back to the start of a UTF-8 character.
size_t final_text_length(const std::string& text, bool finished, size_t max_stop_len,
                         bool include_stop) {
  if (finished || include_stop || max_stop_len <= 1) return text.size();
  size_t n = text.size() > max_stop_len - 1 ? text.size() - (max_stop_len - 1) : 0;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return n;
}

template <class T>
std::vector<T> tail(const std::vector<T>& v, size_t from) {
  return std::vector<T>(v.begin() + std::ptrdiff_t(std::min(from, v.size())), v.end());
}

}  // namespace

RequestOutput OutputProcessor::assemble_delta(Request& r) {
  // The best n of best_of > n are only known at the end, when nothing was sent before.
  if (r.seqs.size() > r.num_returned) return assemble(r);
  RequestOutput o;
  o.request_id = r.id;
  if (!r.prompt_sent) {
    o.prompt = r.prompt;
    o.prompt_token_ids = r.prompt_ids;
    r.prompt_sent = true;
  }
  if (r.prompt_logprobs && r.prompt_logprobs->size() > r.prompt_logprobs_sent) {
    o.prompt_logprobs = tail(*r.prompt_logprobs, r.prompt_logprobs_sent);
    r.prompt_logprobs_sent = r.prompt_logprobs->size();
  }
  o.num_cached_tokens = std::max(0, r.num_cached_tokens);
  o.metrics = request_metrics(r);
  for (Sequence& s : r.seqs) {
    s.text_sent = std::min(s.text_sent, s.out.text.size());  // (held back: never cut below)
    const size_t text_end =
        std::max(s.text_sent, final_text_length(s.out.text, s.finished, r.max_stop_len,
                                                r.params.include_stop_str_in_output));
    const size_t n = s.out.token_ids.size();
    if (n == s.tokens_sent && text_end == s.text_sent && s.finished == s.finish_sent) continue;
    CompletionOutput c;
    c.index = s.out.index;
    c.text.assign(s.out.text, s.text_sent, text_end - s.text_sent);
    c.token_ids = tail(s.out.token_ids, s.tokens_sent);
    if (s.out.logprobs) c.logprobs = tail(*s.out.logprobs, s.tokens_sent);
    c.cumulative_logprob = s.out.cumulative_logprob;
    c.finish_reason = s.out.finish_reason;
    c.stop_reason_text = s.out.stop_reason_text;
    c.stop_reason_token = s.out.stop_reason_token;
    c.times = s.times;
    s.tokens_sent = n;
    s.text_sent = text_end;
    s.finish_sent = s.finished;
    o.outputs.push_back(std::move(c));
  }
  o.finished = r.unfinished == 0;
  o.error = r.error;
  return o;
}

bool OutputProcessor::drop_hopeless(Request& r, Actions& act) {
  if (r.seqs.size() <= r.num_returned) return false;
  // A score is final once the scheduler finished the sequence (its text may still be coming).
  const auto final_score = [](const Sequence& s) {
    return s.finished || s.pending_finish != FinishReason::none;
  };
  std::vector<double> done;
  for (const Sequence& s : r.seqs)
    if (!s.dropped && final_score(s)) done.push_back(s.score);
  if (done.size() < r.num_returned) return false;
  const auto nth = done.begin() + std::ptrdiff_t(r.num_returned - 1);
  std::nth_element(done.begin(), nth, done.end(), std::greater<double>());
  const double bar = *nth;  // the n-th best final score: nothing below it can be returned
  bool aborted = false;
  for (Sequence& s : r.seqs) {
    if (s.dropped || !(s.score < bar)) continue;
    if (!final_score(s)) {  // still running: its score can only fall further
      act.abort.push_back(s.seq_id);
      if (r.detokenize) act.close_detok.push_back(s.seq_id);
      finish(r, s, FinishReason::abort);
      aborted = true;
    } else if (!s.finished) {
      continue;  // its last text is on the way; dropped once it arrives
    }
    s.dropped = true;
    s.out = CompletionOutput{};
  }
  return aborted;
}

void OutputProcessor::emit(const std::string& request_id, Actions& act) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  Request& r = it->second;
  if (!r.stream && r.unfinished > 0) return;
  if (r.unfinished > 0 && !stream_due(r)) return;
  if (r.kind == OutputKind::delta) {
    RequestOutput o = assemble_delta(r);
    // Nothing new to show (text held back by stop strings only): nothing goes out.
    if (!o.outputs.empty() || o.finished || o.prompt_logprobs || !o.prompt_token_ids.empty())
      act.outputs.push_back(std::move(o));
  } else {
    for (auto& s : r.seqs) {
      s.tokens_sent = s.out.token_ids.size();
      s.finish_sent = s.finished;
    }
    act.outputs.push_back(assemble(r));
  }
  if (r.unfinished == 0) {
    for (const auto& s : r.seqs) owner_.erase(s.seq_id);
    requests_.erase(it);
    ++finished_;
  }
}

bool OutputProcessor::stream_due(const Request& r) const {
  // Interval 1: every change goes out (prompt logprobs, text held back by stop strings too).
  if (config_.stream_interval <= 1) return true;
  const auto interval = size_t(config_.stream_interval);
  for (const auto& s : r.seqs) {
    const size_t n = s.out.token_ids.size();
    if (s.finished != s.finish_sent) return true;
    if (n > s.tokens_sent && (s.tokens_sent == 0 || n - s.tokens_sent >= interval)) return true;
  }
  return false;
}

void OutputProcessor::add_tokens(Sequence& s, PendingTokens got) {
  s.out.token_ids.insert(s.out.token_ids.end(), got.ids.begin(), got.ids.end());
  if (s.out.cumulative_logprob) *s.out.cumulative_logprob += got.logprob_sum;
  if (s.out.logprobs)
    for (auto& m : got.logprobs) s.out.logprobs->push_back(std::move(m));
}

void OutputProcessor::add_awaited_tokens(Sequence& s) {
  for (auto& got : s.awaiting_text) add_tokens(s, std::move(got));
  s.awaiting_text.clear();
}

void OutputProcessor::finish(Request& r, Sequence& s, FinishReason why) {
  if (s.finished) return;
  s.finished = true;
  s.out.finish_reason = to_string(why);
  if (why == FinishReason::error && r.error.empty())
    r.error = failure_.empty() ? "the engine failed this request" : failure_;
  if (--r.unfinished == 0) r.finished_time = epoch_seconds(std::chrono::steady_clock::now());
}

void OutputProcessor::apply_text(Request& r, Sequence& s, const std::string& delta, Actions& act) {
  if (s.finished) return;
  const size_t old_len = s.out.text.size();
  s.out.text += delta;
  if (!r.params.stop.empty() && !delta.empty()) {
    // Only a match that ends in the new text is new: start where the longest stop string could
    // still end inside it.
    const size_t from = old_len >= r.max_stop_len ? old_len - r.max_stop_len + 1 : 0;
    size_t best = std::string::npos;
    const std::string* which = nullptr;
    for (const auto& stop : r.params.stop) {
      if (stop.empty()) continue;
      const size_t pos = s.out.text.find(stop, from);
      if (pos != std::string::npos && (best == std::string::npos || pos < best)) {
        best = pos;
        which = &stop;
      }
    }
    if (which) {
      s.out.text.resize(r.params.include_stop_str_in_output ? best + which->size() : best);
      s.out.stop_reason_text = *which;
      if (s.pending_finish == FinishReason::none) {  // still running in the scheduler
        act.abort.push_back(s.seq_id);
        act.close_detok.push_back(s.seq_id);
      }
      finish(r, s, FinishReason::stop);
      return;
    }
  }
  // The finish waits for the text of every push before it: the last push flushes the
  // detokenizer's held-back bytes, and its reply may come after an earlier push's.
  if (s.pending_finish != FinishReason::none && s.awaiting_text.empty()) {
    if (s.pending_stop_token) s.out.stop_reason_token = *s.pending_stop_token;
    finish(r, s, s.pending_finish);
  }
}

void OutputProcessor::fail_request(Request& r, const std::string& why, Actions& act) {
  if (r.error.empty()) r.error = why;
  for (Sequence& s : r.seqs) {
    if (s.finished) continue;
    add_awaited_tokens(s);
    act.abort.push_back(s.seq_id);
    if (r.detokenize) act.close_detok.push_back(s.seq_id);
    finish(r, s, FinishReason::error);
  }
}

OutputProcessor::Actions OutputProcessor::on_updates(std::vector<SeqUpdate> updates) {
  Actions act;
  std::set<std::string> touched;  // requests to emit now (no text to wait for)
  std::set<std::string> seen;
  for (SeqUpdate& u : updates) {
    auto [r, s] = find(u.seq_id);
    if (r == nullptr || s->finished) continue;
    seen.insert(r->id);
    if (r->num_cached_tokens < 0) r->num_cached_tokens = u.num_cached_tokens;
    SequenceTimes& times = s->times;
    if (!times.first_scheduled_time && u.first_scheduled)
      times.first_scheduled_time = epoch_seconds(*u.first_scheduled);
    if (!u.new_token_ids.empty()) {
      const double t = epoch_seconds(u.time);
      if (!times.first_token_time) times.first_token_time = t;
      times.last_token_time = t;
    }
    PendingTokens got;
    try {
      if (!u.prompt_logprobs.empty() && r->prompt_logprobs)
        for (const auto& p : u.prompt_logprobs) r->prompt_logprobs->push_back(to_map(p));
      got.ids = u.new_token_ids;
      for (size_t k = 0; k < u.new_token_ids.size() && k < u.logprobs.size(); ++k) {
        s->score += double(u.logprobs[k].chosen.logprob);
        got.logprob_sum += double(u.logprobs[k].chosen.logprob);
        if (s->out.logprobs) got.logprobs.push_back(to_map(u.logprobs[k]));
      }
    } catch (const std::exception& e) {  // a token the tokenizer cannot decode
      fail_request(*r, fmt::format("sequence {}: logprobs: {}", u.seq_id, e.what()), act);
      touched.insert(r->id);
      continue;
    }
    if (u.finish != FinishReason::none) {
      s->pending_finish = u.finish;
      s->pending_stop_token = u.stop_token;
    }
    if (r->detokenize && u.finish != FinishReason::error) {
      s->awaiting_text.push_back(std::move(got));  // joins the output with its text
      act.detokenize.push_back(
          DetokPush{u.seq_id, std::move(u.new_token_ids), u.finish != FinishReason::none});
    } else {
      add_tokens(*s, std::move(got));
      apply_text(*r, *s, "", act);
      touched.insert(r->id);
    }
  }
  for (const auto& id : seen)
    if (drop_hopeless(requests_.at(id), act)) touched.insert(id);
  for (const auto& id : touched) emit(id, act);
  return act;
}

OutputProcessor::Actions OutputProcessor::on_text(
    const std::vector<std::pair<uint64_t, std::string>>& deltas) {
  Actions act;
  std::set<std::string> touched;
  for (const auto& [seq, text] : deltas) {
    auto [r, s] = find(seq);
    if (r == nullptr) continue;
    if (!s->awaiting_text.empty()) {
      // This push's tokens (texts come back in push order); dropped after a stop string.
      if (!s->finished) add_tokens(*s, std::move(s->awaiting_text.front()));
      s->awaiting_text.pop_front();
    }
    apply_text(*r, *s, text, act);
    touched.insert(r->id);
  }
  for (const auto& id : touched) drop_hopeless(requests_.at(id), act);
  for (const auto& id : touched) emit(id, act);
  return act;
}

OutputProcessor::Actions OutputProcessor::abort(const std::string& request_id) {
  Actions act;
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return act;
  Request& r = it->second;
  for (Sequence& s : r.seqs) {
    if (s.finished) continue;
    add_awaited_tokens(s);
    act.abort.push_back(s.seq_id);
    if (r.detokenize) act.close_detok.push_back(s.seq_id);
    finish(r, s, FinishReason::abort);
  }
  emit(request_id, act);
  return act;
}

OutputProcessor::Actions OutputProcessor::fail_sequences(std::span<const uint64_t> seq_ids,
                                                         const std::string& why) {
  Actions act;
  std::set<std::string> touched;
  for (uint64_t seq : seq_ids) {
    auto [r, s] = find(seq);
    if (r == nullptr) continue;
    fail_request(*r, why, act);
    touched.insert(r->id);
  }
  for (const auto& id : touched) emit(id, act);
  return act;
}

}  // namespace troupe
