// Logits-processor plug-ins (runtime/sampling/logits_processors.hpp): the shipped example
// (examples/logits_processors/no_repeat_ngram.c) against transformers' no_repeat_ngram rule
// written out here, the errors that name the field, and the processed row turned into bias
// entries that reproduce it bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "runtime/error.hpp"
#include "runtime/sampling/logits_processors.hpp"

using namespace troupe;
using Catch::Contains;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

/// transformers' _get_ngrams / _get_generated_ngrams for one sequence: the tokens that would
/// complete an n-gram already in `ids`.
std::set<int32_t> ngram_bans(const std::vector<int32_t>& ids, size_t n) {
  if (ids.size() + 1 < n) return {};
  std::map<std::vector<int32_t>, std::set<int32_t>> grams;
  for (size_t s = 0; s + n <= ids.size(); ++s)
    grams[std::vector<int32_t>(ids.begin() + long(s), ids.begin() + long(s + n - 1))].insert(
        ids[s + n - 1]);
  const std::vector<int32_t> key(ids.end() - long(n - 1), ids.end());
  auto it = grams.find(key);
  return it == grams.end() ? std::set<int32_t>{} : it->second;
}

}  // namespace

TEST_CASE("no_repeat_ngram plug-in bans what transformers' rule bans", "[plugins]") {
  LogitsProcessorPlugins plugins({TROUPE_NO_REPEAT_NGRAM_PLUGIN});
  REQUIRE(plugins.describe().size() == 1);
  CHECK_THAT(plugins.describe()[0], Contains("no_repeat_ngram ("));
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> token(0, 5);  // a small alphabet: many repeats
  const int64_t vocab = 8;
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = size_t(1 + trial % 4);
    std::vector<int32_t> prompt(size_t(1 + trial % 5)), output(size_t(trial % 9));
    for (auto& t : prompt) t = token(rng);
    for (auto& t : output) t = token(rng);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), output.begin(), output.end());
    std::vector<float> row(vocab);
    for (int64_t i = 0; i < vocab; ++i) row[size_t(i)] = float(i) * 0.5f;
    plugins.apply("no_repeat_ngram:" + std::to_string(n), prompt, output, row);
    std::set<int32_t> got;
    for (int64_t i = 0; i < vocab; ++i) {
      if (row[size_t(i)] == -kInf)
        got.insert(int32_t(i));
      else
        CHECK(row[size_t(i)] == float(i) * 0.5f);  // untouched
    }
    INFO("trial " << trial << ", n " << n);
    CHECK(got == ngram_bans(all, n));
  }
}

TEST_CASE("plug-in errors name the field, the value and what is allowed", "[plugins]") {
  CHECK_THROWS_WITH(LogitsProcessorPlugins({"/nonexistent/libnope.so"}),
                    Contains("logits_processor_plugin = \"/nonexistent/libnope.so\": cannot load"));
  // A real shared library that is not a plug-in.
  CHECK_THROWS_WITH(LogitsProcessorPlugins({"libm.so.6"}),
                    Contains("not a troupe logits-processor plug-in"));
  CHECK_THROWS_WITH(
      LogitsProcessorPlugins({TROUPE_NO_REPEAT_NGRAM_PLUGIN, TROUPE_NO_REPEAT_NGRAM_PLUGIN}),
      Contains("\"no_repeat_ngram\" is already loaded"));
  LogitsProcessorPlugins plugins({TROUPE_NO_REPEAT_NGRAM_PLUGIN});
  CHECK_NOTHROW(plugins.check("no_repeat_ngram:3"));
  CHECK_THROWS_WITH(plugins.check("no_repeat_ngram:zero"),
                    Contains("logits_processors: \"no_repeat_ngram:zero\": the argument \"zero\" "
                             "is not an n-gram size in [1, 64]"));
  CHECK_THROWS_WITH(plugins.check("no_repeat_ngram"), Contains("the argument \"\""));
  CHECK_THROWS_WITH(plugins.check("repeat"),
                    Contains("logits_processors: \"repeat\": no such processor; allowed: "
                             "no_repeat_ngram"));
  std::vector<float> row(4, 0.0f);
  CHECK_THROWS_WITH(plugins.apply("no_repeat_ngram:0", {}, {}, row),
                    Contains("logits processor \"no_repeat_ngram:0\" failed"));
}

TEST_CASE("a processed row as bias entries: raw + bias is the processed row, bit for bit",
          "[plugins]") {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 8.0f);
  std::vector<float> raw(4096), after(4096);
  for (auto& x : raw) x = dist(rng);
  after = raw;
  for (size_t i = 0; i < after.size(); i += 3) after[i] = dist(rng) * 1e-3f + after[i] * 0.7f;
  after[5] = -kInf;
  std::vector<std::pair<int32_t, float>> bias;
  append_changes_as_bias(raw, after, bias, "test");
  std::vector<float> rebuilt = raw;
  for (const auto& [t, b] : bias) rebuilt[size_t(t)] += b;
  size_t exact = 0;
  for (size_t i = 0; i < raw.size(); ++i) exact += rebuilt[i] == after[i] ? 1 : 0;
  CHECK(exact == raw.size());
  CHECK(bias.size() <= raw.size() / 3 + 2);  // only the changed tokens
  after[7] = std::nanf("");
  CHECK_THROWS_WITH(append_changes_as_bias(raw, after, bias, "a logits processor"),
                    Contains("a logits processor set token 7's logit to NaN"));
}
