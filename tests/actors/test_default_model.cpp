// The embedded default model (models/troupe-fortunes) through the whole engine:
// - its held-out perplexity, computed by troupe from prompt logprobs, equals what transformers
//   computed for the same checkpoint (eval.json, written by tools/train_tiny/train.py) within
//   0.1%;
// - what it writes is mostly dictionary words (Debian's wamerican list);
// - scoring documents behind a shared prefix gives the same prompt logprobs with the prefix
//   cache as without it.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "actors/llm.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const fs::path kModel = fs::path(TROUPE_SOURCE_DIR) / "models" / "troupe-fortunes";

EngineArgs default_model_args() {
  EngineArgs a;
  a.model = kModel.string();
  a.disable_log_stats = true;
  a.dtype = "float32";  // transformers evaluated the bf16 checkpoint in float32
  return a;
}

}  // namespace

TEST_CASE("troupe-fortunes: held-out perplexity equals transformers' within 0.1%",
          "[default_model]") {
  std::ifstream in(kModel / "eval.json");
  REQUIRE(in.good());
  const auto eval = nlohmann::json::parse(in);
  LLM llm(default_model_args());

  std::vector<Prompt> prompts;
  for (const auto& d : eval["documents"]) prompts.emplace_back(d["token_ids"].get<std::vector<int32_t>>());
  SamplingParams p;
  p.prompt_logprobs = 0;  // the logprob of each prompt token only
  p.max_tokens = 1;
  p.temperature = 0.0;
  p.detokenize = false;
  const auto outs = llm.generate(prompts, p, {.use_tqdm = false});
  REQUIRE(outs.size() == prompts.size());

  double total_nll = 0.0;
  int64_t predicted = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto& ids = prompts[i].token_ids;
    REQUIRE(outs[i].prompt_logprobs);
    const auto& plp = *outs[i].prompt_logprobs;
    REQUIRE(plp.size() == ids.size());
    double nll = 0.0;
    for (size_t t = 1; t < ids.size(); ++t) {
      REQUIRE(plp[t].contains(ids[t]));
      nll -= double(plp[t].at(ids[t]).logprob);
    }
    // Per document too: a mismatch names the document.
    const double want = eval["documents"][i]["nll_sum"].get<double>();
    INFO("document " << i << " (" << ids.size() << " tokens)");
    CHECK(nll == Approx(want).epsilon(2e-4));
    total_nll += nll;
    predicted += int64_t(ids.size()) - 1;
  }
  CHECK(predicted == eval["total_predicted"].get<int64_t>());
  const double ppl = std::exp(total_nll / double(predicted));
  const double want_ppl = eval["perplexity"].get<double>();
  INFO("troupe perplexity " << ppl << ", transformers " << want_ppl);
  CHECK(std::abs(ppl - want_ppl) / want_ppl < 1e-3);
}

TEST_CASE("troupe-fortunes writes mostly dictionary words", "[default_model]") {
  std::ifstream dict("/usr/share/dict/words");
  REQUIRE(dict.good());  // Debian's wamerican (tools/install-deps.sh installs it)
  std::set<std::string> words;
  for (std::string w; std::getline(dict, w);) {
    for (auto& ch : w) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    words.insert(w);
  }
  LLM llm(default_model_args());
  SamplingParams p = llm.get_default_sampling_params();  // temperature 0.8, top_p 0.95
  p.max_tokens = 48;
  p.n = 4;
  p.seed = 1;
  const auto outs = llm.generate({"The future of AI is", "Once upon a time", "A wise man",
                                  "The best thing about computers"},
                                 p, {.use_tqdm = false});
  size_t total = 0, known = 0;
  std::string sample;
  for (const auto& r : outs) {
    for (const auto& c : r.outputs) {
      if (sample.empty()) sample = c.text;
      std::string word;
      auto flush = [&] {
        if (word.empty()) return;
        ++total;
        known += words.contains(word) ? 1 : 0;
        word.clear();
      };
      for (char ch : c.text) {
        if (std::isalpha(static_cast<unsigned char>(ch)) || ch == '\'') {
          word += char(std::tolower(static_cast<unsigned char>(ch)));
        } else {
          flush();
        }
      }
      flush();
    }
  }
  const double share = total ? double(known) / double(total) : 0.0;
  INFO(known << " of " << total << " words are in the dictionary; a sample: " << sample);
  CHECK(total > 200);
  CHECK(share > 0.75);
}

TEST_CASE("troupe-fortunes: perplexity scoring through the prefix cache equals it without",
          "[default_model][prefix][prompt_logprobs]") {
  // A scoring workload in small: the held-out documents behind one shared 100-token prefix,
  // scored once by an engine without prefix caching and once, after a warm-up request, by one
  // with it. The same ranks and top-k ids, logprobs within the CPU backend's batch variance, and
  // the warm requests were served hits.
  std::ifstream in(kModel / "eval.json");
  REQUIRE(in.good());
  const auto eval = nlohmann::json::parse(in);
  const auto docs = eval["documents"];
  REQUIRE(docs.size() >= 3);
  const auto head = docs[0]["token_ids"].get<std::vector<int32_t>>();
  REQUIRE(head.size() >= 100);
  const std::vector<int32_t> prefix(head.begin(), head.begin() + 100);
  std::vector<Prompt> prompts;
  for (const auto& d : docs) {
    auto ids = prefix;
    const auto own = d["token_ids"].get<std::vector<int32_t>>();
    ids.insert(ids.end(), own.begin(),
               own.begin() + std::min<ptrdiff_t>(40, ptrdiff_t(own.size())));
    prompts.emplace_back(ids);
    if (prompts.size() == 6) break;
  }
  SamplingParams p;
  p.prompt_logprobs = 3;
  p.max_tokens = 1;
  p.temperature = 0.0;
  p.detokenize = false;
  auto args = [](bool caching) {
    EngineArgs a = default_model_args();
    a.enable_prefix_caching = caching;
    return a;
  };
  std::vector<RequestOutput> want;
  {
    LLM ref(args(false));
    want = ref.generate(prompts, p, {.use_tqdm = false});
  }
  LLM llm(args(true));
  (void)llm.generate({prompts[0]}, p, {.use_tqdm = false});
  const auto got = llm.generate(prompts, p, {.use_tqdm = false});
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("prompt " << i);
    CHECK(got[i].num_cached_tokens > 0);
    REQUIRE(got[i].prompt_logprobs);
    REQUIRE(want[i].prompt_logprobs);
    const auto& g = *got[i].prompt_logprobs;
    const auto& w = *want[i].prompt_logprobs;
    REQUIRE(g.size() == w.size());
    for (size_t t = 1; t < g.size(); ++t) {
      INFO("position " << t);
      REQUIRE(g[t].size() == w[t].size());
      for (const auto& [id, lp] : w[t]) {
        REQUIRE(g[t].contains(id));
        // Within the CPU backend's batch variance (see test_prompt_logprobs_cache.cpp).
        CHECK(g[t].at(id).logprob == Approx(lp.logprob).margin(1e-4));
        CHECK(g[t].at(id).rank == lp.rank);
      }
    }
  }
}
