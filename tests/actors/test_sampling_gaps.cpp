// SamplingParams and BeamSearchParams fields that no other test would catch being ignored
// (the gaps in notes/sampling_fields_map.md), each through the public LLM API:
//   - detokenize = false on a model that has a tokenizer (the embedded troupe-fortunes);
//   - ignore_eos (and min_tokens) with the eos forced by logit_bias;
//   - spaces_between_special_tokens through OutputProcessor -> tokenizer pool -> detokenizer;
//   - BeamSearchParams.length_penalty and .ignore_eos, against transformers' generate() (the
//     fixtures' reference.json "beam" section), with the eos given by a generation_config.json;
//   - early_stopping true / false / "never" on a case where they give different results,
//     against a transcription of transformers' _beam_search (tests/actors/beam_reference.hpp).
// Every test also checks that it has teeth: the outcomes it compares really differ.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "actors/llm.hpp"
#include "runtime/error.hpp"
#include "tests/actors/beam_reference.hpp"
#include "tests/actors/engine_fixtures.hpp"
#include "tests/runtime/test_tokenizer_util.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

using engine_fixtures::default_model_args;
using engine_fixtures::kDefaultModel;
using engine_fixtures::kFixtures;

/// A fixture for beam search: the CPU backend (the engine refuses beams on CUDA for now), and
/// whole-vocabulary logprobs for the reference transcription below.
EngineArgs beam_engine_args(const std::string& name) {
  EngineArgs a = engine_fixtures::fixture_args(name);
  a.device = "cpu";
  a.max_logprobs = -1;
  return a;
}

GenerateOptions quiet() {
  GenerateOptions o;
  o.use_tqdm = false;
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// detokenize

TEST_CASE("detokenize false gives token ids without text on a model that has a tokenizer",
          "[engine][sampling]") {
  // Fails if detokenize is ignored: the detokenize = false outputs would carry text as well.
  LLM llm(default_model_args());
  const auto tok = llm.get_tokenizer();
  REQUIRE(tok);
  const Prompt prompt("Once upon a time");
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 8;
  p.ignore_eos = true;
  const auto with_text = llm.generate({prompt}, p, quiet())[0].outputs[0];
  REQUIRE(with_text.token_ids.size() == 8);
  CHECK_FALSE(with_text.text.empty());  // the teeth: the same tokens do have a text
  CHECK(with_text.text == tok->decode(with_text.token_ids));
  p.detokenize = false;
  const auto without = llm.generate({prompt}, p, quiet())[0].outputs[0];
  CHECK(without.token_ids == with_text.token_ids);
  CHECK(without.text.empty());
  CHECK(without.finish_reason == "length");

  // Every one of n seeded samples, the same with and without text.
  p.temperature = 0.8;
  p.seed = 11;
  p.n = 2;
  const auto bare = llm.generate({prompt}, p, quiet())[0];
  p.detokenize = true;
  const auto full = llm.generate({prompt}, p, quiet())[0];
  REQUIRE(bare.outputs.size() == 2);
  REQUIRE(full.outputs.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("sample " << i);
    CHECK(bare.outputs[i].token_ids == full.outputs[i].token_ids);
    CHECK(bare.outputs[i].token_ids.size() == 8);
    CHECK(bare.outputs[i].text.empty());
    CHECK(full.outputs[i].text == tok->decode(full.outputs[i].token_ids));
    CHECK_FALSE(full.outputs[i].text.empty());
  }
}

// ---------------------------------------------------------------------------------------------
// ignore_eos (and min_tokens), the eos forced by logit_bias

TEST_CASE("ignore_eos: a forced eos ends the sequence at once unless ignore_eos is set",
          "[engine][sampling]") {
  // Fails if ignore_eos is ignored: either the ignore_eos run stops at its first token (eos
  // still ends it) or the plain run goes on to max_tokens (eos never ends anything).
  LLM llm(default_model_args());
  const auto tok = llm.get_tokenizer();
  REQUIRE(tok);
  REQUIRE(tok->eos_token_id().has_value());
  REQUIRE(*tok->eos_token_id() == 1);  // "<|eos|>", config.json's eos_token_id too
  const int32_t eos = 1;
  const Prompt prompt("Once upon a time");
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 6;
  p.logit_bias = {{eos, 100.0}};  // the model's own choice never beats +100

  const auto stopped = llm.generate({prompt}, p, quiet())[0].outputs[0];
  CHECK(stopped.token_ids == std::vector<int32_t>{eos});  // the eos stays in the ids (vLLM)
  CHECK(stopped.finish_reason == "stop");
  CHECK(stopped.stop_reason_token == -1);  // vLLM: stop_reason None for eos
  CHECK(stopped.text.empty());             // <|eos|> is special: skipped in the text

  p.ignore_eos = true;
  const auto ran_on = llm.generate({prompt}, p, quiet())[0].outputs[0];
  CHECK(ran_on.token_ids == std::vector<int32_t>(6, eos));
  CHECK(ran_on.finish_reason == "length");

  // min_tokens (no C++ engine test had it): the executor bans eos for the first 3 tokens and
  // the scheduler does not stop before them; the 4th is the forced eos. Fails if either layer
  // drops it (the executor's ban: 3 eos tokens; the scheduler's: 1 token).
  p.ignore_eos = false;
  p.min_tokens = 3;
  const auto deferred = llm.generate({prompt}, p, quiet())[0].outputs[0];
  REQUIRE(deferred.token_ids.size() == 4);
  for (size_t i = 0; i < 3; ++i) CHECK(deferred.token_ids[i] != eos);
  CHECK(deferred.token_ids[3] == eos);
  CHECK(deferred.finish_reason == "stop");
}

// ---------------------------------------------------------------------------------------------
// spaces_between_special_tokens

TEST_CASE("spaces_between_special_tokens reaches the engine's detokenizers",
          "[engine][sampling]") {
  // The embedded tokenizer's added tokens (<|bos|> ... <|system|>) are their own byte-level
  // spelling, so the flag cannot change their text (runtime/tokenizer/tokenizer.hpp says why).
  // Here the model runs with a copy of its tokenizer where the added tokens 3 and 4 are spelled
  // "<Ġu>" and "<Ġa>": the ByteLevel decoder writes them "< u>" and "< a>", and with
  // spaces_between_special_tokens false an added token that follows another is written as its
  // raw content (vLLM's fast detokenizer). Fails if the flag is dropped anywhere between
  // SamplingParams and the detokenizer (OutputProcessor's DetokOpen, the tokenizer pool): both
  // runs would give the same text.
  tokenizer_test::TempDir dir;
  nlohmann::json tj = tokenizer_test::read_json(kDefaultModel / "tokenizer.json");
  const std::string g = "\xC4\xA0";  // "Ġ", the byte-level spelling of a space
  const std::map<int32_t, std::string> respelled = {{3, "<" + g + "u>"}, {4, "<" + g + "a>"}};
  size_t edited = 0;
  for (auto& t : tj["added_tokens"])
    if (auto it = respelled.find(t["id"].get<int32_t>()); it != respelled.end()) {
      t["content"] = it->second;
      ++edited;
    }
  REQUIRE(edited == 2);
  dir.write_json("tokenizer.json", tj);
  dir.write_json("tokenizer_config.json",
                 tokenizer_test::read_json(kDefaultModel / "tokenizer_config.json"));
  EngineArgs a = default_model_args();
  a.tokenizer = dir.path().string();
  LLM llm(a);
  const auto tok = llm.get_tokenizer();
  REQUIRE(tok);
  REQUIRE(tok->id_to_token(3) == respelled.at(3));
  REQUIRE(tok->decode(std::vector<int32_t>{3, 4}, false) == "< u>< a>");

  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 4;
  p.allowed_token_ids = {3, 4};  // every output token is one of the two added tokens
  p.skip_special_tokens = false;
  const Prompt prompt("Once upon a time");
  const auto spaced = llm.generate({prompt}, p, quiet())[0].outputs[0];
  p.spaces_between_special_tokens = false;
  const auto raw = llm.generate({prompt}, p, quiet())[0].outputs[0];
  const auto& ids = spaced.token_ids;
  REQUIRE(ids.size() == 4);
  CHECK(raw.token_ids == ids);
  for (int32_t t : ids) CHECK((t == 3 || t == 4));
  // true: the decoder's text. false: the first added token decoded (the prompt does not
  // count), each one after it as written.
  CHECK(spaced.text == tok->decode(ids, false));
  std::string want = tok->decode(std::vector<int32_t>{ids[0]}, false);
  for (size_t i = 1; i < ids.size(); ++i) want += tok->id_to_token(ids[i]);
  CHECK(raw.text == want);
  CHECK(raw.text != spaced.text);
}

// ---------------------------------------------------------------------------------------------
// Beam search against references

namespace {

using beam_reference::Case;
using beam_reference::Hyp;

nlohmann::json fixture_reference(const std::string& name) {
  std::ifstream in(kFixtures / name / "reference.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

std::vector<std::vector<int32_t>> tokens_of(const std::vector<Hyp>& hs) {
  std::vector<std::vector<int32_t>> out;
  for (const Hyp& h : hs) out.push_back(h.tokens);
  return out;
}

/// Whether ranking `c`'s hypotheses by cumulative logprob / length (length_penalty 1) orders
/// them otherwise than `c`'s length_penalty does.
bool order_depends_on_length_penalty(const Case& c) {
  std::vector<double> lp1;
  for (const Hyp& h : c.want) {
    const double len = double(h.tokens.size());
    lp1.push_back(h.score * std::pow(len, c.length_penalty) / len);
  }
  return !std::is_sorted(lp1.begin(), lp1.end(), std::greater<>());
}

/// LLM::beam_search's result for `prompt` is `want`, best first (its tokens include the prompt).
void check_beam_search(const std::vector<BeamSearchOutput>& got, const std::vector<int32_t>& prompt,
                       const std::vector<Hyp>& want, double length_penalty,
                       std::optional<int32_t> eos) {
  REQUIRE(got.size() == 1);
  REQUIRE(got[0].sequences.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("result " << i);
    const BeamSearchSequence& s = got[0].sequences[i];
    std::vector<int32_t> full = prompt;
    full.insert(full.end(), want[i].tokens.begin(), want[i].tokens.end());
    CHECK(s.tokens == full);
    CHECK(s.logprobs.size() == want[i].tokens.size());
    const double len = double(want[i].tokens.size());
    CHECK(s.cum_logprob / std::pow(len, length_penalty) ==
          Approx(want[i].score).epsilon(1e-4).margin(1e-4));
    const bool by_eos = eos && !want[i].tokens.empty() && want[i].tokens.back() == *eos;
    CHECK(s.finish_reason == (by_eos ? "stop" : "length"));
  }
}

}  // namespace

TEST_CASE("BeamSearchParams length_penalty and ignore_eos reach LLM::beam_search",
          "[engine][sampling]") {
  // The fixtures have no eos; a generation_config.json holding only eos_token_id gives them
  // one, so that LLM::beam_search (which takes no stop tokens) ends hypotheses at it. Each
  // case is a reference.json case of LLM::beam_search's shape (beam_width beams, all returned,
  // early_stopping "never") with an eos and length_penalty 0.5.
  //   length_penalty: fails if to_sampling_params drops it (1.0 ranks these hypotheses, of
  //     lengths 1 to 12, in another order; counted below).
  //   ignore_eos: with it the result must be the same search without an eos (the case's
  //     eos-free twin); fails if it is dropped, as the eos result differs (checked below).
  size_t ran = 0, lp_changes_order = 0;
  for (const std::string name : {"llama3_tied", "qwen2"}) {
    if (!fs::exists(kFixtures / name / "reference.json")) {
      WARN("fixture " << name << " missing: run tools/make_fixtures.py");
      continue;
    }
    const std::vector<Case> cases = beam_reference::json_cases(fixture_reference(name));
    for (const Case& c : cases) {
      if (!c.eos || c.early_stopping != "never" || c.num_beams != c.num_return) continue;
      INFO("fixture " << name << ", prompt of " << c.prompt.size() << ", " << c.num_beams
                      << " beams, length_penalty " << c.length_penalty << ", eos " << *c.eos);
      const Case* twin = nullptr;
      for (const Case& t : cases)
        if (!t.eos && t.prompt == c.prompt && t.early_stopping == "never" &&
            t.num_beams == c.num_beams && t.num_return == c.num_return && t.max_new == c.max_new)
          twin = &t;
      REQUIRE(twin != nullptr);
      REQUIRE(tokens_of(twin->want) != tokens_of(c.want));  // ignore_eos has teeth here
      if (order_depends_on_length_penalty(c)) ++lp_changes_order;

      tokenizer_test::TempDir dir;
      dir.write_json("generation_config.json", nlohmann::json{{"eos_token_id", *c.eos}});
      EngineArgs a = beam_engine_args(name);
      a.generation_config = dir.path().string();
      LLM llm(a);
      BeamSearchParams bp;
      bp.beam_width = c.num_beams;
      bp.max_tokens = c.max_new;
      bp.length_penalty = c.length_penalty;
      bp.ignore_eos = false;
      {
        INFO("ignore_eos false");
        check_beam_search(llm.beam_search({Prompt(c.prompt)}, bp), c.prompt, c.want,
                          c.length_penalty, c.eos);
      }
      // Without an eos every hypothesis has max_tokens tokens, so the length penalty divides
      // them all alike: the twin's tokens, scored with the twin's length_penalty.
      bp.ignore_eos = true;
      {
        INFO("ignore_eos true");
        check_beam_search(llm.beam_search({Prompt(c.prompt)}, bp), c.prompt, twin->want,
                          twin->length_penalty, std::nullopt);
      }
      ++ran;
    }
  }
  REQUIRE(ran > 0);
  CHECK(lp_changes_order > 0);  // length_penalty has teeth in at least one case
}

TEST_CASE("early_stopping true, false and never each give transformers' result, which differ",
          "[engine][sampling]") {
  // reference.json has no two cases that differ in early_stopping alone, so the references
  // here come from the transcription of transformers' _beam_search on the model's own
  // logprobs. The case is the first of the fixture's eos cases where true and "never" give
  // different hypotheses; fails if early_stopping is ignored (one mode's run would not match
  // its reference).
  const std::string name = "llama3_tied";
  if (!fs::exists(kFixtures / name / "reference.json")) {
    WARN("fixture " << name << " missing: run tools/make_fixtures.py");
    return;
  }
  const nlohmann::json j = fixture_reference(name);
  const auto vocab = j["vocab_size"].get<int32_t>();
  LLM llm(beam_engine_args(name));
  std::vector<Case> cases;
  for (const Case& c : beam_reference::json_cases(j))
    if (c.eos) cases.push_back(c);
  // Those transformers ran with early_stopping true first: they are the likeliest to differ.
  std::stable_partition(cases.begin(), cases.end(),
                        [](const Case& c) { return c.early_stopping == "true"; });
  std::optional<Case> chosen;
  std::vector<Hyp> want_true, want_never;
  for (Case c : cases) {
    c.early_stopping = "true";
    auto t = beam_reference::reference_beam_search(llm, c, vocab);
    c.early_stopping = "never";
    auto n = beam_reference::reference_beam_search(llm, c, vocab);
    if (tokens_of(t) != tokens_of(n)) {
      chosen = c;
      want_true = std::move(t);
      want_never = std::move(n);
      break;
    }
  }
  REQUIRE(chosen.has_value());  // the modes do change a result: the test has teeth
  Case c_true = *chosen, c_never = *chosen, c_false = *chosen;
  c_true.early_stopping = "true";
  c_never.early_stopping = "never";
  c_false.early_stopping = "false";
  const std::vector<Hyp> want_false =
      beam_reference::reference_beam_search(llm, c_false, vocab);
  INFO("prompt of " << chosen->prompt.size() << ", " << chosen->num_beams << " beams, n "
                    << chosen->num_return << ", length_penalty " << chosen->length_penalty
                    << ", eos " << *chosen->eos << "; false agrees with true: "
                    << (tokens_of(want_false) == tokens_of(want_true))
                    << ", with never: " << (tokens_of(want_false) == tokens_of(want_never)));
  // "never" searches on from where true stops, so every result is at least as good.
  for (size_t i = 0; i < want_true.size(); ++i)
    CHECK(want_never[i].score >= want_true[i].score - 1e-9);

  // All three together, and each alone.
  const std::vector<Case> cs = {c_true, c_never, c_false};
  const std::vector<std::vector<Hyp>> wants = {want_true, want_never, want_false};
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  for (const Case& c : cs) {
    prompts.emplace_back(c.prompt);
    params.push_back(beam_reference::beam_params(c));
  }
  const auto together = llm.generate(prompts, params, quiet());
  REQUIRE(together.size() == 3);
  for (size_t i = 0; i < 3; ++i) beam_reference::check_same(together[i], cs[i], wants[i]);
  for (size_t i = 0; i < 3; ++i)
    beam_reference::check_same(llm.generate({Prompt(cs[i].prompt)}, params[i], quiet())[0],
                               cs[i], wants[i]);
}

// ---------------------------------------------------------------------------------------------
// repetition_penalty against transformers' logits

TEST_CASE("repetition_penalty picks the token transformers' RepetitionPenaltyLogitsProcessor "
          "picks from the same logits",
          "[engine][sampling]") {
  // The reference applies transformers' rule (generation/logits_process.py: every token of the
  // input, prompt included, has its logit multiplied by the penalty where negative and divided
  // by it where positive) in float64 to the logits transformers computed for the prompt's last
  // position (reference.json's last_logits), and takes the argmax. The engine's first greedy
  // token under the same penalty must be it. Fails if the penalty is ignored (some prompts'
  // tokens change: counted below) or applied to the wrong tokens or the wrong way round.
  size_t checked = 0, changed = 0;
  for (const std::string name : {"llama_gqa", "qwen2", "llama3_tied"}) {
    if (!fs::exists(kFixtures / name / "reference.json")) {
      WARN("fixture " << name << " missing: run tools/make_fixtures.py");
      continue;
    }
    std::ifstream in(kFixtures / name / "reference.json");
    const auto j = nlohmann::json::parse(in);
    EngineArgs a = engine_fixtures::fixture_args(name);
    a.device = "cpu";
    LLM llm(a);
    // Below 1 the penalty favours tokens already seen (allowed by both), which changes the
    // argmax of these prompts; above 1 it lowers them.
    for (const double penalty : {0.2, 0.5, 1.3, 2.0}) {
      for (const auto& pr : j["prompts"]) {
        const auto prompt = pr["token_ids"].get<std::vector<int32_t>>();
        const auto logits = pr["last_logits"].get<std::vector<double>>();
        const std::set<int32_t> seen(prompt.begin(), prompt.end());
        std::vector<double> penalised = logits;
        for (int32_t t : seen) {
          double& x = penalised[size_t(t)];
          x = x < 0 ? x * penalty : x / penalty;
        }
        const auto argmax = [](const std::vector<double>& v) {
          return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
        };
        // A near-tie between float32 and float64 logits could flip the argmax: skip those.
        std::vector<double> sorted = penalised;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        if (sorted[0] - sorted[1] < 1e-3) continue;
        const int32_t want = argmax(penalised);
        SamplingParams p = engine_fixtures::greedy_params(1);
        p.repetition_penalty = penalty;
        INFO("fixture " << name << ", prompt of " << prompt.size() << ", penalty " << penalty);
        const auto out = llm.generate({Prompt(prompt)}, p, quiet());
        REQUIRE(out[0].outputs.at(0).token_ids.size() == 1);
        CHECK(out[0].outputs[0].token_ids[0] == want);
        ++checked;
        if (want != argmax(logits)) ++changed;
      }
    }
  }
  REQUIRE(checked > 0);
  CHECK(changed > 0);  // the penalty changes some first tokens: the test has teeth
}

// ---------------------------------------------------------------------------------------------
// The fields that travel to `troupe worker` processes

TEST_CASE("logit_bias and allowed_token_ids and min_tokens and prompt_logprobs reach "
          "remote executors",
          "[engine][sampling][parallel]") {
  // The same requests on one in-process executor and on worker processes (TP 2, PP 2): the
  // remote ranks learn each field only from the serialised SeqSampling (actors/messages.hpp),
  // so a field left out there would make their tokens differ from the in-process ones. Each
  // request's tokens also differ from plain greedy ones (the field matters).
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) {
    WARN("fixture llama_gqa missing: run tools/make_fixtures.py");
    return;
  }
  const auto ref = engine_fixtures::load_reference("llama_gqa");
  const std::vector<int32_t> prompt = ref.prompts[3];
  const auto& greedy = ref.greedy[3];
  std::vector<SamplingParams> ps(4, engine_fixtures::greedy_params(8));
  ps[0].logit_bias = {{17, 12.0f}};
  ps[1].allowed_token_ids = {3, 5, 7, 11};
  ps[2].ignore_eos = true;
  ps[2].stop_token_ids = {greedy[1]};  // plain greedy stops after 2 tokens
  ps[2].min_tokens = 5;
  ps[3].prompt_logprobs = 2;
  const std::vector<Prompt> prompts(ps.size(), Prompt(prompt));
  const auto run = [&](int64_t tp, int64_t pp) {
    EngineArgs a = engine_fixtures::fixture_args("llama_gqa");
    a.device = "cpu";
    a.tensor_parallel_size = tp;
    a.pipeline_parallel_size = pp;
    LLM llm(a);
    return llm.generate(prompts, ps, quiet());
  };
  const auto local = run(1, 1);
  const std::vector<int32_t> plain(greedy.begin(), greedy.begin() + 8);
  CHECK(local[0].outputs[0].token_ids != plain);
  for (int32_t t : local[1].outputs[0].token_ids)
    CHECK((t == 3 || t == 5 || t == 7 || t == 11));
  CHECK(local[2].outputs[0].token_ids.size() >= 5);
  REQUIRE(local[3].prompt_logprobs);
  for (const auto& [tp, pp] : {std::pair<int64_t, int64_t>{2, 1}, {1, 2}}) {
    INFO("tp " << tp << " x pp " << pp);
    const auto remote = run(tp, pp);
    REQUIRE(remote.size() == local.size());
    for (size_t i = 0; i < local.size(); ++i) {
      INFO("request " << i);
      CHECK(remote[i].outputs.at(0).token_ids == local[i].outputs.at(0).token_ids);
      CHECK(remote[i].outputs[0].finish_reason == local[i].outputs[0].finish_reason);
    }
    REQUIRE(remote[3].prompt_logprobs);
    const auto& got = *remote[3].prompt_logprobs;
    const auto& want = *local[3].prompt_logprobs;
    REQUIRE(got.size() == want.size());
    for (size_t k = 1; k < want.size(); ++k) {
      CHECK(got[k].size() == want[k].size());
      const int32_t tok = prompt[k];
      CHECK(got[k].at(tok).logprob == Approx(want[k].at(tok).logprob).margin(1e-5));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// presence and frequency penalties, top_k, top_p, min_p, max_tokens = None: end to end

namespace {
bool have_llama_gqa() {
  if (fs::exists(kFixtures / "llama_gqa" / "reference.json")) return true;
  WARN("fixture llama_gqa missing: run tools/make_fixtures.py");
  return false;
}
}  // namespace

TEST_CASE("presence and frequency penalties: greedy tokens are the argmax of the model's "
          "logprobs less vLLM's penalties on the output so far",
          "[engine][sampling]") {
  // The reference (vLLM's rule: logits -= presence * [count > 0] + frequency * count over the
  // tokens generated so far, the prompt not counted) is applied in float64 to the model's raw
  // logprobs for each sequence so far, which differ from its logits by a constant per row, so
  // the argmax is the same. Fails if either penalty is ignored (the tokens differ from plain
  // greedy ones in some cases: counted below), counts the prompt, or has its sign wrong.
  if (!have_llama_gqa()) return;
  const auto ref = engine_fixtures::load_reference("llama_gqa");
  LLM llm(beam_engine_args("llama_gqa"));  // the CPU, whole-vocabulary logprobs
  constexpr int32_t kVocab = 256;
  constexpr int64_t kSteps = 10;
  size_t compared = 0, changed = 0;
  for (const auto& [presence, frequency] :
       {std::pair<double, double>{1.5, 0.0}, {0.0, 0.7}, {0.8, 0.4}, {-1.0, 0.0}}) {
    for (size_t pi = 0; pi < 3; ++pi) {
      const std::vector<int32_t>& prompt = ref.prompts[pi];
      std::vector<int32_t> seq = prompt, want;
      std::map<int32_t, int> counts;
      for (int64_t step = 0; step < kSteps; ++step) {
        const auto row = beam_reference::next_logprobs(llm, {seq}, kVocab)[0];
        std::vector<double> pen = row;
        for (const auto& [t, c] : counts) pen[size_t(t)] -= presence + frequency * c;
        std::vector<double> sorted = pen;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        if (sorted[0] - sorted[1] < 1e-4) break;  // a near-tie: compare up to here
        const auto tok = int32_t(std::max_element(pen.begin(), pen.end()) - pen.begin());
        want.push_back(tok);
        seq.push_back(tok);
        ++counts[tok];
      }
      SamplingParams p = engine_fixtures::greedy_params(kSteps);
      p.presence_penalty = presence;
      p.frequency_penalty = frequency;
      INFO("prompt " << pi << ", presence " << presence << ", frequency " << frequency);
      const auto got = llm.generate({Prompt(prompt)}, p, quiet())[0].outputs.at(0).token_ids;
      REQUIRE(got.size() == size_t(kSteps));
      CHECK(std::vector<int32_t>(got.begin(), got.begin() + std::ptrdiff_t(want.size())) == want);
      ++compared;
      const std::vector<int32_t> plain(ref.greedy[pi].begin(),
                                       ref.greedy[pi].begin() + std::ptrdiff_t(want.size()));
      if (want != plain) ++changed;
    }
  }
  REQUIRE(compared > 0);
  CHECK(changed > 0);
}

TEST_CASE("top_k and top_p and min_p: every sampled token lies in the set each allows",
          "[engine][sampling]") {
  // Seeded sampling at temperature 1, whole-vocabulary raw logprobs returned with each token:
  // the set a knob allows at a position is computed from them (vLLM's rules), and every sampled
  // token must lie in it. Fails if the knob is ignored: the same requests without it sample
  // tokens outside the set (checked: the test has teeth).
  if (!have_llama_gqa()) return;
  const auto ref = engine_fixtures::load_reference("llama_gqa");
  LLM llm(beam_engine_args("llama_gqa"));  // the CPU, whole-vocabulary logprobs
  // Whether `tok` is allowed at a position whose raw logprobs are `lp` (token -> logprob).
  using Allowed = std::function<bool(const std::map<int32_t, double>&, int32_t)>;
  const auto sorted_probs = [](const std::map<int32_t, double>& lp) {
    std::vector<std::pair<double, int32_t>> v;
    for (const auto& [t, l] : lp) v.emplace_back(std::exp(l), t);
    std::sort(v.begin(), v.end(), std::greater<>());
    return v;
  };
  struct Knob {
    const char* name;
    std::function<void(SamplingParams&)> set;
    Allowed allowed;
  };
  const std::vector<Knob> knobs = {
      {"top_k = 3", [](SamplingParams& p) { p.top_k = 3; },
       [&](const std::map<int32_t, double>& lp, int32_t tok) {
         const auto v = sorted_probs(lp);
         return lp.at(tok) >= std::log(v[2].first) - 1e-6;  // ties at the 3rd may go either way
       }},
      {"top_p = 0.5", [](SamplingParams& p) { p.top_p = 0.5; },
       [&](const std::map<int32_t, double>& lp, int32_t tok) {
         // The smallest set of most likely tokens whose mass reaches 0.5 (vLLM keeps a token
         // when the mass of the tokens before it is below top_p).
         double before = 0;
         for (const auto& [prob, t] : sorted_probs(lp)) {
           if (before > 0.5 + 1e-6) return false;
           if (t == tok) return true;
           before += prob;
         }
         return false;
       }},
      {"min_p = 0.3", [](SamplingParams& p) { p.min_p = 0.3; },
       [&](const std::map<int32_t, double>& lp, int32_t tok) {
         const auto v = sorted_probs(lp);
         return std::exp(lp.at(tok)) >= 0.3 * v[0].first - 1e-6;
       }},
  };
  for (const Knob& k : knobs) {
    INFO(k.name);
    size_t outside_without = 0, draws = 0;
    for (const bool with : {true, false}) {
      std::vector<SamplingParams> ps;
      std::vector<Prompt> prompts;
      for (size_t i = 0; i < 12; ++i) {
        SamplingParams p = engine_fixtures::greedy_params(6);
        p.temperature = 1.0;
        p.seed = int64_t(1000 + i);
        p.logprobs = -1;
        if (with) k.set(p);
        ps.push_back(p);
        prompts.emplace_back(ref.prompts[i % ref.prompts.size()]);
      }
      for (const auto& out : llm.generate(prompts, ps, quiet())) {
        const auto& o = out.outputs.at(0);
        REQUIRE(o.logprobs);
        for (size_t pos = 0; pos < o.token_ids.size(); ++pos) {
          std::map<int32_t, double> lp;
          for (const auto& [t, e] : o.logprobs->at(pos)) lp[t] = double(e.logprob);
          REQUIRE(lp.size() == 256);
          const bool ok = k.allowed(lp, o.token_ids[pos]);
          if (with) {
            CHECK(ok);
            ++draws;
          } else if (!ok) {
            ++outside_without;
          }
        }
      }
    }
    CHECK(draws == 12 * 6);
    CHECK(outside_without > 0);  // without the knob some draws fall outside: it has teeth
  }
}

TEST_CASE("max_tokens unset runs to max_model_len", "[engine][sampling]") {
  // vLLM's None: the output fills the context. Fails if unset were taken as a fixed default.
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) return;
  const auto ref = engine_fixtures::load_reference("llama_gqa");
  EngineArgs a = engine_fixtures::fixture_args("llama_gqa");
  a.device = "cpu";
  a.max_model_len = 64;
  LLM llm(a);
  SamplingParams p = engine_fixtures::greedy_params(1);
  p.max_tokens = std::nullopt;
  const auto& prompt = ref.prompts[3];  // 33 tokens
  const auto out = llm.generate({Prompt(prompt)}, p, quiet())[0].outputs.at(0);
  CHECK(out.token_ids.size() == 64 - prompt.size());
  CHECK(out.finish_reason == "length");
}

TEST_CASE("bad_words reach remote executors", "[engine][sampling][parallel]") {
  // The embedded model has a tokenizer (bad_words are text): its greedy continuation of "Once
  // upon a time" says " man" three times. With bad_words [" man"] no output token is it, the
  // tokens differ from plain greedy ones, and TP 2 (worker processes, which learn the banned
  // words only from the serialised SeqSampling) gives the in-process tokens.
  EngineArgs a = default_model_args();
  SamplingParams plain;
  plain.temperature = 0.0;
  plain.max_tokens = 16;
  plain.ignore_eos = true;
  SamplingParams banned = plain;
  banned.bad_words = {" man"};
  std::vector<int32_t> man, plain_tokens, local;
  {
    LLM llm(a);
    man = llm.get_tokenizer()->encode(" man", false);
    REQUIRE(man.size() == 1);
    plain_tokens =
        llm.generate({Prompt("Once upon a time")}, plain, quiet())[0].outputs[0].token_ids;
    local = llm.generate({Prompt("Once upon a time")}, banned, quiet())[0].outputs[0].token_ids;
  }
  CHECK(std::count(plain_tokens.begin(), plain_tokens.end(), man[0]) > 0);  // it has teeth
  CHECK(std::count(local.begin(), local.end(), man[0]) == 0);
  a.tensor_parallel_size = 2;
  LLM llm(a);
  CHECK(llm.generate({Prompt("Once upon a time")}, banned, quiet())[0].outputs[0].token_ids ==
        local);
}
