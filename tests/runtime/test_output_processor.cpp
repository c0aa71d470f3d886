// The output processor with no actors: requests fanned out into sequences, text through real
// incremental detokenizers (the tiny_bpe fixture tokenizer, as the tokenizer actor runs them),
// stop strings, finish reasons, n > 1 assembly, logprobs, aborts and failures.
#include <catch2/catch.hpp>

#include <map>

#include "runtime/api/output_processor.hpp"
#include "runtime/error.hpp"
#include "tests/runtime/test_tokenizer_util.hpp"

using namespace troupe;
using Catch::Contains;
using troupe::tokenizer_test::tiny;

namespace {

OutputProcessorConfig config() {
  OutputProcessorConfig c;
  c.max_model_len = 64;
  c.vocab_size = 276;  // tiny_bpe's
  c.max_logprobs = 5;
  c.eos_token_ids = {272};
  c.seed = 11;
  return c;
}

/// Runs the processor's detokenizer work through real IncrementalDetokenizers, as the tokenizer
/// actor does, and feeds the text back; collects what the processor asks the engine to send.
class Harness {
 public:
  explicit Harness(OutputProcessorConfig c = config()) : proc(std::move(c), tiny()) {}

  OutputProcessor::Admission add(std::vector<int32_t> prompt, const SamplingParams& p,
                                 bool stream = true, std::string id = "") {
    auto a = proc.add(std::move(id), "", std::move(prompt), p, stream);
    for (const auto& o : a.detok_open)
      detok.insert_or_assign(
          o.seq_id, IncrementalDetokenizer(tiny(), o.prompt_token_ids, o.skip_special_tokens));
    return a;
  }
  /// One step's update; returns the outputs it produced (after the text arrived).
  std::vector<RequestOutput> update(std::vector<SeqUpdate> ups) {
    return run(proc.on_updates(std::move(ups)));
  }
  std::vector<RequestOutput> run(OutputProcessor::Actions act) {
    collect(act);
    std::vector<RequestOutput> outs = std::move(act.outputs);
    std::vector<std::pair<uint64_t, std::string>> deltas;
    for (const DetokPush& p : act.detokenize) {
      auto it = detok.find(p.seq_id);
      if (it == detok.end()) continue;
      std::string text = it->second.push(p.new_token_ids);
      if (p.finish) {
        text += it->second.flush();
        detok.erase(it);
      }
      deltas.emplace_back(p.seq_id, std::move(text));
    }
    if (!deltas.empty()) {
      auto more = run(proc.on_text(deltas));
      outs.insert(outs.end(), more.begin(), more.end());
    }
    return outs;
  }

  OutputProcessor proc;
  std::map<uint64_t, IncrementalDetokenizer> detok;
  std::vector<uint64_t> aborted, closed;

 private:
  void collect(const OutputProcessor::Actions& act) {
    aborted.insert(aborted.end(), act.abort.begin(), act.abort.end());
    closed.insert(closed.end(), act.close_detok.begin(), act.close_detok.end());
    for (uint64_t s : act.close_detok) detok.erase(s);
  }
};

SeqUpdate tokens(uint64_t seq, std::vector<int32_t> ids, FinishReason finish = FinishReason::none) {
  SeqUpdate u;
  u.seq_id = seq;
  u.new_token_ids = std::move(ids);
  for (int32_t t : u.new_token_ids) u.logprobs.push_back(PositionLogprobs{{t, -0.25f, 1}, {}});
  u.finish = finish;
  return u;
}

std::vector<int32_t> ids_of(const std::string& text) {
  return tiny()->encode(text, false);
}

}  // namespace

TEST_CASE("a request fans out into n sequences carrying its sampling settings", "[output]") {
  Harness h;
  SamplingParams p;
  p.n = 3;
  p.seed = 7;
  p.temperature = 0.5;
  p.top_k = -1;
  p.max_tokens = 9;
  p.min_tokens = 2;
  p.stop_token_ids = {10};
  p.logit_bias = {{5, 1.5}};
  p.prompt_logprobs = 2;
  const auto a = h.add({1, 2, 3}, p);
  CHECK(a.request_id == "0");
  REQUIRE(a.seqs.size() == 3);
  REQUIRE(a.detok_open.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    const SeqSpec& s = a.seqs[i];
    CHECK(s.prompt_token_ids == std::vector<int32_t>{1, 2, 3});
    CHECK(a.detok_open[i].seq_id == s.seq_id);
    // The knobs are SamplingParams' own, each sequence with its own seed.
    CHECK(static_cast<const SamplingKnobs&>(s.sampling) == sampling_knobs(p, 7 + i));
    CHECK(s.sampling.top_k == 0);
    CHECK(s.sampling.num_logprobs == -1);
    CHECK(s.sampling.num_prompt_logprobs == (i == 0 ? 2 : -1));  // computed once
    CHECK(s.sampling.stop_ids == std::vector<int32_t>{272, 10});
    CHECK(s.sampling.logit_bias == std::vector<std::pair<int32_t, float>>{{5, 1.5f}});
    CHECK(s.stop.max_tokens == 9);
    CHECK(s.stop.min_tokens == 2);
    CHECK(s.stop.eos_token_ids == std::vector<int32_t>{272});
    CHECK(s.stop.stop_token_ids == std::vector<int32_t>{10});
  }
  CHECK(a.seqs[0].seq_id != a.seqs[1].seq_id);
  // Unseeded requests draw their seeds from the processor's generator (seeded by --seed): the
  // same in two processors, distinct within a request.
  p.seed.reset();
  Harness again;
  const auto b1 = h.add({1}, p), b2 = again.add({1}, p);
  for (size_t i = 0; i < 3; ++i) CHECK(b1.seqs[i].sampling.seed == b2.seqs[i].sampling.seed);
  CHECK(b1.seqs[0].sampling.seed != b1.seqs[1].sampling.seed);
  CHECK(b1.request_id == "1");
  CHECK(h.proc.num_requests() == 2);
}

TEST_CASE("checks that need the model name the field, and a refused request leaves nothing",
          "[output]") {
  Harness h;
  const auto refused = [&](std::vector<int32_t> prompt, const SamplingParams& p) {
    std::string what;
    try {
      (void)h.add(std::move(prompt), p, true, "r");
    } catch (const Error& e) {
      what = e.what();
    }
    CHECK(h.proc.num_requests() == 0);
    return what;
  };
  SamplingParams p;
  CHECK_THAT(refused({}, p), Contains("prompt: empty"));
  CHECK_THAT(refused(std::vector<int32_t>(65, 1), p), Contains("more than max_model_len = 64"));
  CHECK_THAT(refused({1, 276}, p), Contains("prompt_token_ids[1] = 276: not a token id"));
  p.logprobs = 6;
  CHECK_THAT(refused({1}, p), Contains("logprobs = 6: must be <= max_logprobs = 5"));
  p.logprobs.reset();
  p.stop_token_ids = {300};
  CHECK_THAT(refused({1}, p), Contains("stop_token_ids: 300 is not a token id"));
  p.stop_token_ids.clear();
  p.stop = {"x"};
  p.detokenize = false;
  CHECK_THAT(refused({1}, p), Contains("allowed only with detokenize = true"));
  p = SamplingParams{};
  p.temperature = -1;  // validate()'s own ranges come first
  CHECK_THAT(refused({1}, p), Contains("temperature"));
  // truncate_prompt_tokens keeps the last k tokens, before the length check.
  p = SamplingParams{};
  p.truncate_prompt_tokens = 2;
  const auto a = h.add(std::vector<int32_t>(100, 3), p, true, "t");
  CHECK(a.seqs[0].prompt_token_ids == std::vector<int32_t>{3, 3});
  CHECK_THROWS_WITH(h.add({1}, SamplingParams{}, true, "t"), Contains("'t': already in use"));
  // -1 keeps the last max_model_len (64) tokens, as in vLLM.
  p.truncate_prompt_tokens = -1;
  std::vector<int32_t> long_prompt(100, 3);
  long_prompt[36] = 7;
  const auto m = h.add(long_prompt, p, true, "u");
  REQUIRE(m.seqs[0].prompt_token_ids.size() == 64);
  CHECK(m.seqs[0].prompt_token_ids.front() == 7);
  Harness fresh;
  p = SamplingParams{};
  p.allowed_token_ids = {5, 276};
  CHECK_THROWS_WITH(fresh.add({1}, p), Contains("allowed_token_ids: 276 is not a token id"));
  p = SamplingParams{};
  p.bad_words = {"x", " \t"};
  CHECK_THROWS_WITH(fresh.add({1}, p),
                    Contains("bad_words = [\"x\",\" \\t\"]: allowed: words with a character"));
  CHECK(fresh.proc.num_requests() == 0);
  OutputProcessor no_text(config(), nullptr);
  p.bad_words = {"hi"};
  CHECK_THROWS_WITH(no_text.add("", "", {1}, p, false),
                    Contains("bad_words = [\"hi\"]: needs the tokenizer"));
}

TEST_CASE("allowed_token_ids and bad_words reach every sequence as the executors use them",
          "[output]") {
  Harness h;
  SamplingParams p;
  p.n = 2;
  p.allowed_token_ids = {9, 4, 9, 200};
  p.bad_words = {"  hello", "i"};
  const auto a = h.add({1}, p);
  // vLLM's rule: each word less its leading spaces, and with one leading space when that is
  // spelt with other tokens of the same count. The ids come from the tokenizer (HF-checked).
  std::vector<std::vector<int32_t>> want;
  for (std::string w : {"hello", "i"}) {
    const auto plain = tiny()->encode(w, false), spaced = tiny()->encode(" " + w, false);
    want.push_back(plain);
    if (spaced.size() == plain.size() && spaced[0] != plain[0]) want.push_back(spaced);
  }
  REQUIRE(want.size() >= 2);
  for (const SeqSpec& s : a.seqs) {
    CHECK(s.sampling.allowed_token_ids == std::vector<int32_t>{4, 9, 200});  // sorted, unique
    CHECK(s.sampling.bad_words_ids == want);
  }
}

TEST_CASE("text arrives incrementally, and a finish waits for its last text", "[output]") {
  Harness h;
  const auto a = h.add({1}, SamplingParams{});
  const uint64_t seq = a.seqs[0].seq_id;
  const auto hello = ids_of("Hello");
  auto outs = h.update({tokens(seq, {hello[0]})});
  REQUIRE(outs.size() == 1);  // streaming: every step
  CHECK(outs[0].outputs[0].text == tiny()->decode(std::vector<int32_t>{hello[0]}));
  CHECK_FALSE(outs[0].finished);
  // "é" is two bytes (tiny_bpe: byte b has id b); its first alone gives no text yet (never half
  // a character).
  const std::vector<int32_t> e_acute{0xc3, 0xa9};
  outs = h.update({tokens(seq, {e_acute[0]})});
  REQUIRE(outs.size() == 1);
  const std::string before = outs[0].outputs[0].text;
  outs = h.update({tokens(seq, {e_acute[1]}, FinishReason::length)});
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].finished);
  CHECK(outs[0].outputs[0].finish_reason == "length");
  CHECK(outs[0].outputs[0].text == before + "\xc3\xa9");
  CHECK(outs[0].outputs[0].token_ids == std::vector<int32_t>{hello[0], e_acute[0], e_acute[1]});
  CHECK(!outs[0].outputs[0].cumulative_logprob);  // no logprobs asked for
  CHECK(h.detok.empty());                         // the finishing push closed the detokenizer
  CHECK(h.proc.num_requests() == 0);
  CHECK(h.proc.num_finished() == 1);
  CHECK(h.update({tokens(seq, {1})}).empty());  // a late update for it is dropped
}

TEST_CASE("a finish waits for the text of every push in flight, the flush last", "[output]") {
  // Two pushes in flight (the tokenizer pool answers each on its own): the first push's text
  // coming back must not apply the finish that the second push carries, or the second's text
  // (here the flushed half of "é") is lost.
  Harness h;
  const auto a = h.add({1}, SamplingParams{});
  const uint64_t seq = a.seqs[0].seq_id;
  const auto hello = ids_of("Hello");
  auto first = h.proc.on_updates({tokens(seq, {hello[0], 0xc3})});
  auto second = h.proc.on_updates({tokens(seq, {}, FinishReason::length)});
  REQUIRE(first.detokenize.size() == 1);
  REQUIRE(second.detokenize.size() == 1);
  REQUIRE(second.detokenize[0].finish);
  IncrementalDetokenizer& d = h.detok.at(seq);
  const std::string text1 = d.push(first.detokenize[0].new_token_ids);
  const std::string text2 = d.push(second.detokenize[0].new_token_ids) + d.flush();
  CHECK_FALSE(text2.empty());  // the held-back byte, flushed
  auto outs = h.proc.on_text({{seq, text1}}).outputs;
  for (const RequestOutput& o : outs) CHECK_FALSE(o.finished);
  outs = h.proc.on_text({{seq, text2}}).outputs;
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].finished);
  CHECK(outs[0].outputs[0].finish_reason == "length");
  CHECK(outs[0].outputs[0].text == text1 + text2);
}

TEST_CASE("a stop string ends the sequence, drops it in the scheduler and cuts the text",
          "[output]") {
  const bool include = GENERATE(false, true);
  Harness h;
  SamplingParams p;
  p.stop = {"lo w", "zz"};
  p.include_stop_str_in_output = include;
  const auto a = h.add({1}, p);
  const uint64_t seq = a.seqs[0].seq_id;
  // The match spans two steps' text: "Hel" then "lo world".
  CHECK(h.update({tokens(seq, ids_of("Hel"))})[0].outputs[0].text == "Hel");
  const auto outs = h.update({tokens(seq, ids_of("lo world"))});
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].finished);
  const CompletionOutput& o = outs[0].outputs[0];
  CHECK(o.finish_reason == "stop");
  CHECK(o.stop_reason_text == "lo w");
  CHECK(o.text == (include ? "Hello w" : "Hel"));
  CHECK(h.aborted == std::vector<uint64_t>{seq});  // the scheduler would run it on
  CHECK(h.closed == std::vector<uint64_t>{seq});
}

TEST_CASE("a sequence the scheduler stops keeps its text and reason", "[output]") {
  Harness h;
  SamplingParams p;
  p.stop_token_ids = {33};
  p.stop = {"never"};
  const auto a = h.add({1}, p);
  SeqUpdate u = tokens(a.seqs[0].seq_id, {72, 33}, FinishReason::stop);  // "H!"
  u.stop_token = 33;
  const auto outs = h.update({u});
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].outputs[0].finish_reason == "stop");
  CHECK(outs[0].outputs[0].stop_reason_token == 33);
  CHECK(outs[0].outputs[0].text == "H!");  // tiny_bpe: byte b has id b
  CHECK(h.aborted.empty());                // it stopped in the scheduler already
}

TEST_CASE("n > 1: one output per request, finished when every sequence is", "[output]") {
  Harness h;
  SamplingParams p;
  p.n = 2;
  const auto a = h.add({1}, p, /*stream=*/false);
  const uint64_t s0 = a.seqs[0].seq_id, s1 = a.seqs[1].seq_id;
  CHECK(h.update({tokens(s0, ids_of("a"), FinishReason::length), tokens(s1, ids_of("b"))})
            .empty());  // not streaming, not finished
  const auto outs = h.update({tokens(s1, ids_of("c"), FinishReason::length)});
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].finished);
  REQUIRE(outs[0].outputs.size() == 2);
  CHECK(outs[0].outputs[0].index == 0);
  CHECK(outs[0].outputs[0].text == "a");
  CHECK(outs[0].outputs[1].index == 1);
  CHECK(outs[0].outputs[1].text == "bc");
}

/// One token with the given logprob for its sampled token.
SeqUpdate scored(uint64_t seq, int32_t token, float logprob,
                 FinishReason finish = FinishReason::none) {
  SeqUpdate u = tokens(seq, {token}, finish);
  u.logprobs[0].chosen.logprob = logprob;
  return u;
}

TEST_CASE("best_of > n: the n best by cumulative logprob, hopeless samples dropped early",
          "[output]") {
  Harness h;
  SamplingParams p;
  p.n = 2;
  p.best_of = 4;
  p.seed = 3;
  const auto a = h.add({1}, p, /*stream=*/true);
  REQUIRE(a.seqs.size() == 4);  // best_of samples, seeds seed + i as for n
  for (size_t i = 0; i < 4; ++i) {
    CHECK(a.seqs[i].sampling.seed == 3 + i);
    CHECK(a.seqs[i].sampling.num_logprobs == 0);  // the sampled token's logprob, for ranking
  }
  const uint64_t s0 = a.seqs[0].seq_id, s1 = a.seqs[1].seq_id, s2 = a.seqs[2].seq_id,
                 s3 = a.seqs[3].seq_id;
  // Scores after this step: s0 -1, s1 -3, s2 -0.5, s3 -2. Nothing streams: the ranking is only
  // known at the end. One finished sequence is fewer than n: nothing can be dropped yet.
  CHECK(h.update({scored(s0, 97, -1.0f, FinishReason::length), scored(s1, 98, -3.0f),
                  scored(s2, 99, -0.5f), scored(s3, 100, -2.0f)})
            .empty());
  CHECK(h.aborted.empty());
  // s2 finishes at -0.5 - 0.25: two final scores (-0.75, -1); s1 (-3) and s3 (-2.5) can only
  // fall further, so both are aborted at once (their KV freed) and the request is complete.
  const auto outs = h.update(
      {scored(s1, 97, -0.1f), scored(s2, 98, -0.25f, FinishReason::length), scored(s3, 99, -0.5f)});
  CHECK(h.aborted == std::vector<uint64_t>{s1, s3});
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].finished);
  REQUIRE(outs[0].outputs.size() == 2);
  CHECK(outs[0].outputs[0].index == 0);
  CHECK(outs[0].outputs[0].token_ids == std::vector<int32_t>{99, 98});  // s2: -0.75
  CHECK(outs[0].outputs[0].finish_reason == "length");
  CHECK(outs[0].outputs[1].index == 1);
  CHECK(outs[0].outputs[1].token_ids == std::vector<int32_t>{97});  // s0: -1
  CHECK_FALSE(outs[0].outputs[0].cumulative_logprob);  // None without logprobs, as for n
  CHECK(h.proc.num_requests() == 0);
}

TEST_CASE("best_of > n: a running sample that may still win is not dropped", "[output]") {
  Harness h;
  SamplingParams p;
  p.n = 1;
  p.best_of = 3;
  p.logprobs = 0;
  const auto a = h.add({1}, p, /*stream=*/false);
  const uint64_t s0 = a.seqs[0].seq_id, s1 = a.seqs[1].seq_id, s2 = a.seqs[2].seq_id;
  // s0 finishes at -2; s1 (-1) may still beat it, s2 (-4) cannot.
  CHECK(h.update({scored(s0, 97, -2.0f, FinishReason::stop), scored(s1, 98, -1.0f),
                  scored(s2, 99, -4.0f)})
            .empty());
  CHECK(h.aborted == std::vector<uint64_t>{s2});
  // s1 ends at -1.5 and wins.
  const auto outs = h.update({scored(s1, 100, -0.5f, FinishReason::length)});
  REQUIRE(outs.size() == 1);
  REQUIRE(outs[0].outputs.size() == 1);
  CHECK(outs[0].outputs[0].token_ids == std::vector<int32_t>{98, 100});
  REQUIRE(outs[0].outputs[0].cumulative_logprob);
  CHECK(*outs[0].outputs[0].cumulative_logprob == Approx(-1.5));
  CHECK(h.aborted == std::vector<uint64_t>{s2});
}

TEST_CASE("logprobs: cumulative sums and maps with decoded tokens, prompt logprobs once",
          "[output]") {
  Harness h;
  SamplingParams p;
  p.logprobs = 1;
  p.prompt_logprobs = 0;
  const auto a = h.add({72, 105}, p);
  SeqUpdate u = tokens(a.seqs[0].seq_id, {33});
  u.logprobs[0].top.push_back(LogprobEntry{63, -1.5f, 2});
  u.prompt_logprobs.push_back(PositionLogprobs{{105, -2.0f, 3}, {}});
  const auto outs = h.update({u});
  REQUIRE(outs.size() == 1);
  const CompletionOutput& o = outs[0].outputs[0];
  REQUIRE(o.cumulative_logprob);
  CHECK(*o.cumulative_logprob == Approx(-0.25));
  REQUIRE(o.logprobs);
  REQUIRE(o.logprobs->size() == 1);
  CHECK(o.logprobs->at(0).at(33).decoded_token == "!");
  CHECK(o.logprobs->at(0).at(63).decoded_token == "?");
  CHECK(o.logprobs->at(0).at(63).rank == 2);
  REQUIRE(outs[0].prompt_logprobs);
  REQUIRE(outs[0].prompt_logprobs->size() == 2);  // none for the first prompt token
  CHECK(outs[0].prompt_logprobs->at(0).empty());
  CHECK(outs[0].prompt_logprobs->at(1).at(105).decoded_token == "i");
}

TEST_CASE("abort ends every sequence of the request and nothing else", "[output]") {
  Harness h;
  SamplingParams p;
  p.n = 2;
  const auto a = h.add({1}, p, true, "a");
  const auto b = h.add({1}, SamplingParams{}, true, "b");
  const auto outs = h.run(h.proc.abort("a"));
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].request_id == "a");
  CHECK(outs[0].finished);
  for (const auto& o : outs[0].outputs) CHECK(o.finish_reason == "abort");
  CHECK(h.aborted == std::vector<uint64_t>{a.seqs[0].seq_id, a.seqs[1].seq_id});
  CHECK(h.proc.has_request("b"));
  CHECK(h.run(h.proc.abort("a")).empty());  // finished already
  CHECK(h.update({tokens(b.seqs[0].seq_id, ids_of("x"))}).size() == 1);
}

TEST_CASE("fail_sequences() fails exactly the requests of the given sequences, with the reason",
          "[output]") {
  Harness h;
  SamplingParams p;
  p.n = 2;
  const auto a = h.add({1}, p, false, "a");
  const auto b = h.add({1}, SamplingParams{}, false, "b");
  (void)h.update({tokens(a.seqs[0].seq_id, ids_of("x"))});
  const std::vector<uint64_t> bad{a.seqs[1].seq_id};
  const auto outs = h.run(h.proc.fail_sequences(bad, "detokenizer: token id 999 is out of range"));
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].request_id == "a");
  CHECK(outs[0].finished);
  CHECK(outs[0].error == "detokenizer: token id 999 is out of range");
  CHECK(outs[0].outputs[0].text == "x");  // what it had is kept
  for (const auto& o : outs[0].outputs) CHECK(o.finish_reason == "error");
  CHECK(h.aborted == std::vector<uint64_t>{a.seqs[0].seq_id, a.seqs[1].seq_id});
  CHECK_FALSE(h.proc.has_request("a"));
  // The other request runs on untouched.
  const auto rest = h.update({tokens(b.seqs[0].seq_id, ids_of("ok"), FinishReason::length)});
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].error.empty());
  CHECK(rest[0].outputs[0].text == "ok");
}

TEST_CASE("a sequence the scheduler fails carries the engine's reason", "[output]") {
  Harness h;
  const auto a = h.add({1}, SamplingParams{});
  h.proc.set_failure("executor 0 failed: boom");
  const auto outs = h.update({tokens(a.seqs[0].seq_id, {}, FinishReason::error)});
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].outputs[0].finish_reason == "error");
  CHECK(outs[0].error == "executor 0 failed: boom");
}

TEST_CASE("a logprob token the tokenizer cannot decode fails its request, not the engine",
          "[output]") {
  // The model's vocabulary may be larger than the tokenizer's (padded embeddings).
  OutputProcessorConfig c = config();
  c.vocab_size = 512;
  Harness h(c);
  SamplingParams p;
  p.logprobs = 1;
  const auto a = h.add({1}, p, true, "a");
  const auto b = h.add({1}, p, true, "b");
  SeqUpdate u = tokens(a.seqs[0].seq_id, {33});
  u.logprobs[0].top.push_back(LogprobEntry{400, -3.0f, 2});
  const auto outs = h.update({u, tokens(b.seqs[0].seq_id, {34})});
  REQUIRE(outs.size() == 2);
  const auto& fa = outs[0].request_id == "a" ? outs[0] : outs[1];
  const auto& fb = outs[0].request_id == "a" ? outs[1] : outs[0];
  CHECK(fa.finished);
  CHECK_THAT(fa.error, Contains("token id 400"));
  CHECK(fb.error.empty());
  CHECK(fb.outputs[0].text == "\"");
}

TEST_CASE("stream_interval: the first token, then every interval-th, then the end go out",
          "[output]") {
  // The same steps streamed at interval 1 and 3: the outputs at 3 are the ones at 1 after
  // tokens 1, 4, 7 and the finish, each the same (cumulative) output.
  const std::string text = "abcdefgh";
  auto run = [&](int32_t interval, bool detokenize) {
    OutputProcessorConfig c = config();
    c.stream_interval = interval;
    Harness h(c);
    SamplingParams p;
    p.detokenize = detokenize;
    const uint64_t seq = h.add({1}, p).seqs[0].seq_id;
    const auto ids = ids_of(text);
    REQUIRE(ids.size() == text.size());
    std::vector<std::pair<size_t, RequestOutput>> sent;  // (tokens so far, output)
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto finish = i + 1 == ids.size() ? FinishReason::length : FinishReason::none;
      for (auto& o : h.update({tokens(seq, {ids[i]}, finish)})) sent.emplace_back(i + 1, o);
    }
    return sent;
  };
  for (const bool detokenize : {true, false}) {
    const auto every = run(1, detokenize);
    REQUIRE(every.size() == text.size());
    const auto some = run(3, detokenize);
    std::vector<size_t> at;
    for (const auto& [n, o] : some) at.push_back(n);
    CHECK(at == std::vector<size_t>{1, 4, 7, 8});
    for (const auto& [n, o] : some) {
      const RequestOutput& ref = every[n - 1].second;
      CHECK(o.outputs[0].token_ids == ref.outputs[0].token_ids);
      CHECK(o.outputs[0].text == ref.outputs[0].text);
      CHECK(o.outputs[0].logprobs.has_value() == ref.outputs[0].logprobs.has_value());
      CHECK(o.finished == ref.finished);
    }
    CHECK(some.back().second.finished);
    CHECK(some.back().second.outputs[0].text == (detokenize ? text : ""));
  }
}

TEST_CASE("stream_interval: a sequence's first token and finish go out at once with n > 1",
          "[output]") {
  OutputProcessorConfig c = config();
  c.stream_interval = 4;
  Harness h(c);
  SamplingParams p;
  p.n = 2;
  const auto a = h.add({1}, p);
  const uint64_t s0 = a.seqs[0].seq_id, s1 = a.seqs[1].seq_id;
  // Both first tokens: out at once.
  CHECK(h.update({tokens(s0, ids_of("a")), tokens(s1, ids_of("b"))}).size() == 1);
  // Two more each: under the interval, nothing.
  CHECK(h.update({tokens(s0, ids_of("c")), tokens(s1, ids_of("d"))}).empty());
  CHECK(h.update({tokens(s0, ids_of("e")), tokens(s1, ids_of("f"))}).empty());
  // s1 finishes after 3 tokens: its end goes out at once, with s0's tokens so far.
  auto outs = h.update({tokens(s1, ids_of("h"), FinishReason::length)});
  REQUIRE(outs.size() == 1);
  CHECK_FALSE(outs[0].finished);
  CHECK(outs[0].outputs[0].text == "ace");
  CHECK(outs[0].outputs[1].text == "bdfh");
  CHECK(outs[0].outputs[1].finish_reason == "length");
  // s0 had 3 tokens in that output: out again at 7, then its finish.
  for (const char* t : {"g", "i", "k"}) CHECK(h.update({tokens(s0, ids_of(t))}).empty());
  outs = h.update({tokens(s0, ids_of("l"))});
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].outputs[0].text == "acegikl");
  outs = h.update({tokens(s0, ids_of("m"), FinishReason::length)});
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].finished);
  CHECK(outs[0].outputs[0].text == "acegiklm");
  CHECK(outs[0].outputs[1].text == "bdfh");
}

TEST_CASE("a step's tokens join the output with their text, not before", "[output]") {
  // The engine's next step can come back before the tokenizer pool answers the last one: the
  // output sent on the first text must not show the second step's tokens or logprobs (the
  // server's usage and token_ids would run ahead of its text).
  Harness h;
  SamplingParams p;
  p.logprobs = 0;
  const uint64_t seq = h.add({1}, p).seqs[0].seq_id;
  const auto a = ids_of("a"), b = ids_of("b");
  auto first = h.proc.on_updates({tokens(seq, a)});
  auto second = h.proc.on_updates({tokens(seq, b, FinishReason::length)});
  CHECK(first.outputs.empty());
  CHECK(second.outputs.empty());
  REQUIRE(first.detokenize.size() == 1);
  REQUIRE(second.detokenize.size() == 1);
  auto& d = h.detok.at(seq);
  const std::string ta = d.push(first.detokenize[0].new_token_ids);
  const std::string tb = d.push(second.detokenize[0].new_token_ids) + d.flush();
  auto outs = h.proc.on_text({{seq, ta}}).outputs;
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].outputs[0].text == "a");
  CHECK(outs[0].outputs[0].token_ids == a);
  REQUIRE(outs[0].outputs[0].logprobs);
  CHECK(outs[0].outputs[0].logprobs->size() == 1);
  CHECK(*outs[0].outputs[0].cumulative_logprob == Approx(-0.25));
  CHECK_FALSE(outs[0].finished);
  outs = h.proc.on_text({{seq, tb}}).outputs;
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].finished);
  CHECK(outs[0].outputs[0].text == "ab");
  std::vector<int32_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  CHECK(outs[0].outputs[0].token_ids == ab);
  CHECK(outs[0].outputs[0].logprobs->size() == 2);
  CHECK(*outs[0].outputs[0].cumulative_logprob == Approx(-0.5));
}

TEST_CASE("an abort keeps the tokens whose text was still coming", "[output]") {
  Harness h;
  const auto adm = h.add({1}, SamplingParams{}, true, "r");
  const uint64_t seq = adm.seqs[0].seq_id;
  const auto a = ids_of("a");
  const auto act = h.proc.on_updates({tokens(seq, a)});
  REQUIRE(act.detokenize.size() == 1);
  const auto outs = h.proc.abort("r").outputs;
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].finished);
  CHECK(outs[0].outputs[0].finish_reason == "abort");
  CHECK(outs[0].outputs[0].token_ids == a);
  CHECK(outs[0].outputs[0].text.empty());
  // Its text arriving late changes nothing.
  CHECK(h.proc.on_text({{seq, "a"}}).outputs.empty());
}

namespace {

void check_same_logprobs(const std::vector<PositionLogprobMap>& a,
                         const std::vector<PositionLogprobMap>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].size() == b[i].size());
    for (const auto& [token, lp] : a[i]) {
      REQUIRE(b[i].count(token) == 1);
      CHECK(b[i].at(token).logprob == lp.logprob);
      CHECK(b[i].at(token).rank == lp.rank);
      CHECK(b[i].at(token).decoded_token == lp.decoded_token);
    }
  }
}

}  // namespace

TEST_CASE("delta outputs add up to the cumulative ones, text a stop string may cut waiting",
          "[output]") {
  // The same steps through a cumulative and a delta request (n = 2, logprobs, prompt logprobs
  // in two chunks, a 4-byte stop string): after every step the deltas added up hold the
  // cumulative output's tokens, logprobs and finish, and its text but for at most the last 3
  // bytes while running; at the end, everything.
  Harness cumulative_h, delta_h;
  SamplingParams p;
  p.n = 2;
  p.logprobs = 1;
  p.prompt_logprobs = 0;
  p.stop = {"lo w"};
  const auto a = cumulative_h.add({72, 105, 33}, p);
  const auto b = delta_h.proc.add("", "", {72, 105, 33}, p, true, OutputKind::delta);
  for (const auto& o : b.detok_open)
    delta_h.detok.insert_or_assign(
        o.seq_id, IncrementalDetokenizer(tiny(), o.prompt_token_ids, o.skip_special_tokens));
  REQUIRE(a.seqs.size() == 2);
  const uint64_t s0 = a.seqs[0].seq_id, s1 = a.seqs[1].seq_id;
  CHECK(b.seqs[0].seq_id == s0);
  std::vector<std::vector<SeqUpdate>> steps;
  {
    SeqUpdate u0 = tokens(s0, ids_of("Hel"));
    u0.prompt_logprobs.push_back(PositionLogprobs{{105, -2.0f, 3}, {}});
    steps.push_back({u0, tokens(s1, ids_of("ab"))});
    SeqUpdate u1 = tokens(s0, ids_of("l"));
    u1.prompt_logprobs.push_back(PositionLogprobs{{33, -1.0f, 2}, {}});
    steps.push_back({u1, tokens(s1, ids_of("cdefg"))});
    steps.push_back({tokens(s0, ids_of("o")), tokens(s1, ids_of("h"), FinishReason::length)});
    steps.push_back({tokens(s0, ids_of(" world"))});  // completes "lo w": a stop
  }
  RequestOutput sofar;
  size_t deltas = 0;
  for (size_t step = 0; step < steps.size(); ++step) {
    INFO("step " << step);
    const auto cum = cumulative_h.update(steps[step]);
    const auto del = delta_h.update(steps[step]);
    REQUIRE(cum.size() == 1);
    REQUIRE(del.size() <= 1);
    if (del.empty()) continue;
    ++deltas;
    // A delta holds only what is new: the prompt once, and each sequence's new tokens.
    CHECK(del[0].prompt_token_ids.empty() == (step > 0));
    for (const auto& c : del[0].outputs)
      if (!sofar.request_id.empty() && size_t(c.index) < sofar.outputs.size())
        CHECK(c.token_ids.size() <= 5);
    RequestOutput d = del[0];
    append_output(sofar, std::move(d));
    const RequestOutput& want = cum[0];
    CHECK(sofar.request_id == want.request_id);
    CHECK(sofar.prompt_token_ids == want.prompt_token_ids);
    CHECK(sofar.finished == want.finished);
    REQUIRE(sofar.prompt_logprobs);
    check_same_logprobs(*want.prompt_logprobs, *sofar.prompt_logprobs);
    REQUIRE(sofar.outputs.size() == want.outputs.size());
    for (size_t i = 0; i < want.outputs.size(); ++i) {
      INFO("sequence " << i);
      const CompletionOutput &w = want.outputs[i], &g = sofar.outputs[i];
      CHECK(g.index == w.index);
      CHECK(g.token_ids == w.token_ids);
      check_same_logprobs(*w.logprobs, *g.logprobs);
      CHECK(g.cumulative_logprob == w.cumulative_logprob);
      CHECK(g.finish_reason == w.finish_reason);
      CHECK(g.stop_reason_text == w.stop_reason_text);
      if (w.finished()) {
        CHECK(g.text == w.text);
      } else {
        CHECK(w.text.starts_with(g.text));
        CHECK(w.text.size() - g.text.size() <= 3);
      }
    }
  }
  CHECK(deltas == steps.size());
  CHECK(sofar.finished);
  CHECK(sofar.outputs[0].text == "Hel");  // cut before the stop string
  CHECK(sofar.outputs[1].text == "abcdefgh");
}

TEST_CASE("delta outputs: the held-back text never splits a character, and an abort sends it",
          "[output]") {
  Harness h;
  SamplingParams p;
  p.stop = {"xy"};  // one byte held back while running
  const auto a = h.proc.add("", "", {1}, p, true, OutputKind::delta);
  for (const auto& o : a.detok_open)
    h.detok.insert_or_assign(
        o.seq_id, IncrementalDetokenizer(tiny(), o.prompt_token_ids, o.skip_special_tokens));
  const uint64_t seq = a.seqs[0].seq_id;
  // "abé": holding back its last byte would split é, so both of its bytes wait.
  auto outs = h.update({tokens(seq, {'a', 'b', 0xc3, 0xa9})});
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].outputs.at(0).text == "ab");
  CHECK(outs[0].outputs.at(0).token_ids.size() == 4);
  // A step whose text is all held back: its token still goes out.
  outs = h.update({tokens(seq, {'c'})});
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].outputs.at(0).text == "\xc3\xa9");
  CHECK(outs[0].outputs.at(0).token_ids == std::vector<int32_t>{'c'});
  // The end (here an abort) sends what was held back.
  outs = h.run(h.proc.abort(outs[0].request_id));
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].finished);
  CHECK(outs[0].outputs.at(0).text == "c");
  CHECK(outs[0].outputs.at(0).finish_reason == "abort");
  CHECK(outs[0].outputs.at(0).token_ids.empty());
}

TEST_CASE("append_output puts each sequence's delta at its index, whatever order they come in",
          "[output]") {
  // n = 3: the first delta may hold only some sequences (those with something new).
  RequestOutput sofar;
  RequestOutput d;
  d.request_id = "r";
  d.prompt_token_ids = {1, 2};
  d.outputs.resize(1);
  d.outputs[0].index = 2;
  d.outputs[0].text = "c";
  d.outputs[0].token_ids = {30};
  append_output(sofar, RequestOutput(d));
  d.prompt_token_ids.clear();
  d.outputs.resize(2);
  d.outputs[0].index = 0;
  d.outputs[0].text = "a";
  d.outputs[0].token_ids = {10};
  d.outputs[1].index = 2;
  d.outputs[1].text = "C";
  d.outputs[1].token_ids = {31};
  d.outputs[1].finish_reason = "length";
  d.finished = false;
  append_output(sofar, std::move(d));
  CHECK(sofar.request_id == "r");
  CHECK(sofar.prompt_token_ids == std::vector<int32_t>{1, 2});
  REQUIRE(sofar.outputs.size() == 3);
  for (int32_t i = 0; i < 3; ++i) CHECK(sofar.outputs[size_t(i)].index == i);
  CHECK(sofar.outputs[0].text == "a");
  CHECK(sofar.outputs[1].token_ids.empty());  // nothing of it yet
  CHECK(sofar.outputs[2].text == "cC");
  CHECK(sofar.outputs[2].token_ids == std::vector<int32_t>{30, 31});
  CHECK(sofar.outputs[2].finish_reason == "length");
}
