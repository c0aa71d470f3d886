// The reference sampler (runtime/sampling/sampler.hpp) against float64 computations and
// hand-worked examples, and the CPU backend's `sample` op that wraps it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "op_harness.hpp"
#include "runtime/error.hpp"
#include "runtime/sampling/philox.hpp"
#include "runtime/sampling/sampler.hpp"

using namespace troupe;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_logits(std::mt19937_64& rng, size_t vocab, float sigma = 3.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> l(vocab);
  for (float& x : l) x = dist(rng);
  return l;
}

SamplingRow greedy_row() {
  SamplingRow row;
  row.temperature = 0.0f;
  return row;
}

// Float64 probabilities after temperature, min_p, top_k and top_p (no bias, no penalties),
// written from the definitions in sampling_row.hpp.
std::vector<double> filtered_probs(const std::vector<float>& logits, const SamplingRow& row) {
  const size_t v = logits.size();
  std::vector<double> l(v);
  for (size_t i = 0; i < v; ++i) l[i] = double(logits[i]) / double(row.temperature);
  const double lmax = *std::max_element(l.begin(), l.end());
  std::vector<double> p(v);
  for (size_t i = 0; i < v; ++i) p[i] = std::exp(l[i] - lmax);  // p / p_max
  std::vector<bool> keep(v, true);
  for (size_t i = 0; i < v; ++i) keep[i] = p[i] >= double(row.min_p);
  if (row.top_k > 0) {
    std::vector<double> kept;
    for (size_t i = 0; i < v; ++i)
      if (keep[i]) kept.push_back(l[i]);
    std::sort(kept.rbegin(), kept.rend());
    if (size_t(row.top_k) < kept.size())
      for (size_t i = 0; i < v; ++i) keep[i] = keep[i] && l[i] >= kept[size_t(row.top_k - 1)];
  }
  if (row.top_p < 1.0f) {
    std::vector<size_t> order;
    double z = 0.0;
    for (size_t i = 0; i < v; ++i)
      if (keep[i]) {
        order.push_back(i);
        z += p[i];
      }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    double mass = 0.0;
    for (size_t i : order) {
      keep[i] = mass < double(row.top_p);
      mass += p[i] / z;
    }
  }
  double z = 0.0;
  for (size_t i = 0; i < v; ++i) z += keep[i] ? p[i] : 0.0;
  for (size_t i = 0; i < v; ++i) p[i] = keep[i] ? p[i] / z : 0.0;
  return p;
}

// Upper 0.1% points of the chi-square distribution, df = 1..10.
constexpr double kChiSquare999[] = {10.83, 13.82, 16.27, 18.47, 20.52,
                                    22.46, 24.32, 26.12, 27.88, 29.59};

}  // namespace

TEST_CASE("sampler greedy is the first argmax", "[sampler]") {
  std::mt19937_64 rng(21);
  for (size_t vocab : {size_t(1), size_t(7), size_t(1000), size_t(151936)}) {
    auto logits = random_logits(rng, vocab);
    const auto best = size_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    CHECK(sample_row(logits.data(), int64_t(vocab), greedy_row()).token == int32_t(best));
  }
  std::vector<float> tie{0.5f, 2.0f, -1.0f, 2.0f};
  SamplingRow row = greedy_row();
  row.temperature = 0.9e-5f;  // below kGreedyTemperature is greedy too
  CHECK(sample_row(tie.data(), 4, row).token == 1);
}

TEST_CASE("sampler logprobs, rank and top-N match float64 log-softmax", "[sampler]") {
  std::mt19937_64 rng(22);
  const size_t vocab = 500;
  auto logits = random_logits(rng, vocab);
  const float top = *std::max_element(logits.begin(), logits.end());
  logits[20] = logits[10] = top + 1.0f;  // a tie at the top: lower id first
  logits[300] = logits[301] = 0.25f;     // a tie in the middle
  double m = -INFINITY, z = 0.0;
  for (float x : logits) m = std::max(m, double(x));
  for (float x : logits) z += std::exp(double(x) - m);
  auto ref_logprob = [&](int32_t i) { return double(logits[size_t(i)]) - m - std::log(z); };
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });

  SamplingRow row;
  row.seed = 5;
  row.num_logprobs = 8;
  for (uint64_t offset = 0; offset < 20; ++offset) {
    row.offset = offset;
    const SampledToken s = sample_row(logits.data(), int64_t(vocab), row);
    CHECK(std::abs(double(s.logprob) - ref_logprob(s.token)) < 1e-5);
    const auto pos = std::find(order.begin(), order.end(), s.token) - order.begin();
    CHECK(s.rank == int32_t(pos + 1));
    REQUIRE(s.top.size() == 8);
    for (size_t r = 0; r < 8; ++r) {
      CHECK(s.top[r].token == order[r]);
      CHECK(s.top[r].rank == int32_t(r + 1));
      CHECK(std::abs(double(s.top[r].logprob) - ref_logprob(order[r])) < 1e-5);
    }
  }
  CHECK(order[0] == 10);
  CHECK(order[1] == 20);
  SamplingRow greedy = greedy_row();
  greedy.num_logprobs = 0;  // the sampled token's logprob only
  const SampledToken g = sample_row(logits.data(), int64_t(vocab), greedy);
  CHECK(g.token == 10);
  CHECK(g.rank == 1);
  CHECK(std::abs(double(g.logprob) - ref_logprob(10)) < 1e-5);
  CHECK(g.top.empty());
  row.num_logprobs = 0;
  CHECK(sample_row(logits.data(), int64_t(vocab), row).top.empty());
  // Logprobs are of the raw logits: a bias that changes the pick does not change them.
  SamplingRow biased = greedy;
  const std::pair<int32_t, float> bias[] = {{300, 100.0f}};
  biased.logit_bias = bias;
  const SampledToken b = sample_row(logits.data(), int64_t(vocab), biased);
  CHECK(b.token == 300);
  CHECK(std::abs(double(b.logprob) - ref_logprob(300)) < 1e-5);
  CHECK(b.rank == int32_t(std::find(order.begin(), order.end(), 300) - order.begin() + 1));
}

TEST_CASE("sampler without logprobs (num_logprobs = -1) draws the same tokens, no logprob", "[sampler]") {
  std::mt19937_64 rng(23);
  const size_t vocab = 3000;
  const auto logits = random_logits(rng, vocab);
  const std::pair<int32_t, float> bias[] = {{7, 2.0f}};
  const std::vector<int32_t> output{7, 7, 100};
  std::vector<SamplingRow> rows(4);
  rows[0].temperature = 0.0f;
  rows[1].temperature = 0.7f, rows[1].top_k = 40, rows[1].top_p = 0.9f;
  rows[2].min_p = 0.05f, rows[2].logit_bias = bias;
  rows[3].frequency_penalty = 0.5f, rows[3].output_ids = output;
  for (size_t r = 0; r < rows.size(); ++r)
    for (uint64_t offset = 0; offset < 8; ++offset) {
      INFO("row " << r << ", offset " << offset);
      SamplingRow with = rows[r], without = rows[r];
      with.seed = without.seed = 99 + r;
      with.offset = without.offset = offset;
      with.num_logprobs = 0;
      without.num_logprobs = -1;
      const SampledToken a = sample_row(logits.data(), int64_t(vocab), with);
      const SampledToken b = sample_row(logits.data(), int64_t(vocab), without);
      CHECK(a.token == b.token);
      CHECK(a.rank >= 1);
      CHECK(a.logprob < 0.0f);
      CHECK(b.logprob == 0.0f);  // not computed
      CHECK(b.rank == 0);
      CHECK(b.top.empty());
    }
}

TEST_CASE("sampler bias and penalties match a hand computation", "[sampler]") {
  const std::vector<float> logits{2.0f, -1.0f, 0.5f, 0.0f, 3.0f, -2.0f};
  const std::vector<int32_t> prompt{0, 1, 0};
  const std::vector<int32_t> output{2, 2, 3, 1};
  const std::pair<int32_t, float> bias[] = {{5, 1.0f}, {4, -kInf}};
  SamplingRow row;
  row.repetition_penalty = 2.0f;
  row.frequency_penalty = 0.5f;
  row.presence_penalty = 0.25f;
  row.prompt_ids = prompt;
  row.output_ids = output;
  row.logit_bias = bias;
  std::vector<float> work = logits;
  apply_bias_and_penalties(work, row);
  // bias: [2, -1, .5, 0, -inf, -1]; repetition on {0,1,2,3}: [1, -2, .25, 0, ...];
  // frequency * count and presence on output {2: 2, 3: 1, 1: 1}.
  const std::vector<float> want{
      1.0f, -2.0f - 0.5f - 0.25f, 0.25f - 1.0f - 0.25f, 0.0f - 0.5f - 0.25f, -kInf, -1.0f};
  CHECK(work == want);

  // Greedy sees the processed logits: token 4 (raw best) is banned, 0 wins at 1.0.
  row.temperature = 0.0f;
  CHECK(sample_row(logits.data(), 6, row).token == 0);
  // Repetition alone flips 0 (2 -> 1) below 1 (-1, unseen here: only 0 was generated).
  SamplingRow rep = greedy_row();
  const std::vector<float> two{2.0f, 1.5f};
  const std::vector<int32_t> seen{0};
  rep.repetition_penalty = 2.0f;
  rep.output_ids = seen;
  CHECK(sample_row(two.data(), 2, rep).token == 1);
  rep.repetition_penalty = 1.0f;
  rep.presence_penalty = 0.4f;  // 2 - 0.4 = 1.6 > 1.5 still
  CHECK(sample_row(two.data(), 2, rep).token == 0);
  rep.presence_penalty = 0.6f;  // 1.4 < 1.5
  CHECK(sample_row(two.data(), 2, rep).token == 1);
}

TEST_CASE("sampler logit_bias -inf bans tokens, and banning all is an error", "[sampler]") {
  std::mt19937_64 rng(23);
  const size_t vocab = 50;
  const auto logits = random_logits(rng, vocab, 1.0f);
  const auto best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const std::pair<int32_t, float> ban[] = {{best, -kInf}, {3, -kInf}};
  SamplingRow row;
  row.logit_bias = ban;
  row.seed = 99;
  for (uint64_t offset = 0; offset < 2000; ++offset) {
    row.offset = offset;
    const int32_t t = sample_row(logits.data(), int64_t(vocab), row).token;
    REQUIRE(t != best);
    REQUIRE(t != 3);
  }
  SamplingRow g = greedy_row();
  g.logit_bias = ban;
  CHECK(sample_row(logits.data(), int64_t(vocab), g).token != best);

  std::vector<std::pair<int32_t, float>> all;
  for (int32_t i = 0; i < int32_t(vocab); ++i) all.emplace_back(i, -kInf);
  row.logit_bias = all;
  CHECK_THROWS_WITH(sample_row(logits.data(), int64_t(vocab), row),
                    Catch::Contains("no token left"));
  g.logit_bias = all;
  CHECK_THROWS_AS(sample_row(logits.data(), int64_t(vocab), g), Error);
}

TEST_CASE("sampler is the documented exponential race over philox draws", "[sampler]") {
  // Every filter, on vocabularies where top_p keeps a few or thousands of tokens.
  std::mt19937_64 rng(24);
  struct Case {
    size_t vocab;
    float sigma, temperature, top_p, min_p;
    int32_t top_k;
  };
  for (const Case c :
       {Case{300, 2.0f, 0.8f, 1.0f, 0.0f, 0}, Case{5000, 0.5f, 1.0f, 0.9f, 0.0f, 0},
        Case{5000, 3.0f, 1.1f, 0.95f, 0.0f, 0}, Case{3000, 1.0f, 0.7f, 0.8f, 0.01f, 1000},
        Case{3000, 1.0f, 1.5f, 1.0f, 0.2f, 40},
        // No filter: the race skips the logs of tokens that cannot beat the best so far, on
        // peaked (low temperature), flat and large vocabularies. The 50k vocabulary has a draw
        // whose 24 bits are all ones (offset 515399592720, token 18332): it was u = 1.0f.
        Case{4096, 3.0f, 0.05f, 1.0f, 0.0f, 0}, Case{4096, 0.05f, 2.0f, 1.0f, 0.0f, 0},
        Case{50000, 2.0f, 1.0f, 1.0f, 0.0f, 0}}) {
    const auto logits = random_logits(rng, c.vocab, c.sigma);
    SamplingRow row;
    row.temperature = c.temperature;
    row.top_p = c.top_p;
    row.min_p = c.min_p;
    row.top_k = c.top_k;
    row.seed = 0x1234567890abcdefull;
    const std::vector<double> p = filtered_probs(logits, row);
    const auto survivors = std::count_if(p.begin(), p.end(), [](double x) { return x > 0.0; });
    std::printf("sampler race vocab %zu top_p %.2f min_p %.2f top_k %d: %td survivors\n", c.vocab,
                double(c.top_p), double(c.min_p), c.top_k, survivors);
    for (uint64_t k = 0; k < 64; ++k) {
      const uint64_t offset = k * k * 977 + (k << 33);
      row.offset = offset;
      int32_t want = -1;
      double best = -1.0;
      for (size_t i = 0; i < c.vocab; ++i) {
        const double q = -std::log(double(philox::uniform(row.seed, offset, uint32_t(i))));
        if (p[i] / q > best) {
          best = p[i] / q;
          want = int32_t(i);
        }
      }
      INFO("vocab " << c.vocab << " top_p " << c.top_p << " offset " << offset);
      CHECK(sample_row(logits.data(), int64_t(c.vocab), row).token == want);
    }
  }
}

TEST_CASE("philox uniform draws lie in the open interval (0, 1)", "[sampler]") {
  using philox::to_open_unit;
  CHECK(to_open_unit(0u) == 0.5f / 16777216.0f);
  CHECK(to_open_unit(0xffffffffu) < 1.0f);  // (2^24 - 0.5) / 2^24 rounds to 1.0f in float
  CHECK(to_open_unit(0xffffffffu) == std::nextafter(1.0f, 0.0f));
  CHECK(to_open_unit(0xfffffeffu) < to_open_unit(0xffffffffu));
  CHECK(-std::log(to_open_unit(0xffffffffu)) > 0.0f);
}

TEST_CASE("sampler is deterministic per seed and offset whatever the batch", "[sampler]") {
  std::mt19937_64 rng(25);
  const int64_t vocab = 4000;
  std::vector<std::vector<float>> logits;
  for (int i = 0; i < 3; ++i) logits.push_back(random_logits(rng, size_t(vocab), 1.0f));
  std::vector<SamplingRow> rows(3);
  for (int i = 0; i < 3; ++i) {
    rows[size_t(i)].seed = 7 + uint64_t(i);
    rows[size_t(i)].offset = 3;
    rows[size_t(i)].top_k = 50;
  }
  auto batch = [&](const std::vector<int>& which, int threads) {
    std::vector<float> flat;
    std::vector<SamplingRow> r;
    for (int w : which) {
      flat.insert(flat.end(), logits[size_t(w)].begin(), logits[size_t(w)].end());
      r.push_back(rows[size_t(w)]);
    }
    return sample_rows(flat.data(), vocab, r, threads);
  };
  const auto abc = batch({0, 1, 2}, 1);
  const auto ca = batch({2, 0}, 2);
  const auto many = batch({1, 0, 2, 0, 1, 2, 0, 0}, 3);
  CHECK(ca[1].token == abc[0].token);
  CHECK(ca[0].token == abc[2].token);
  CHECK(many[1].token == abc[0].token);
  CHECK(many[3].token == abc[0].token);
  CHECK(many[0].token == abc[1].token);
  CHECK(sample_row(logits[0].data(), vocab, rows[0]).token == abc[0].token);

  // The backend op gives the same tokens, whatever its thread count.
  for (int threads : {1, 2}) {
    test::OpHarness h(threads);
    std::vector<float> flat;
    for (const auto& l : logits) flat.insert(flat.end(), l.begin(), l.end());
    const auto out = h.backend().sample(h.f32({3, vocab}, flat), rows);
    for (size_t i = 0; i < 3; ++i) CHECK(out[i].token == abc[i].token);
  }

  // Different offsets draw differently.
  std::set<int32_t> seen;
  SamplingRow r = rows[0];
  for (uint64_t offset = 0; offset < 32; ++offset) {
    r.offset = offset;
    seen.insert(sample_row(logits[0].data(), vocab, r).token);
  }
  CHECK(seen.size() > 5);
}

TEST_CASE("sampler draws follow the filtered distribution (chi-square)", "[sampler]") {
  const std::vector<float> logits{2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f};
  struct Case {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
  };
  for (const Case c :
       {Case{"plain", 1.0f, 0, 1.0f, 0.0f}, Case{"temperature+top_k", 0.7f, 5, 1.0f, 0.0f},
        Case{"hot+top_p", 1.3f, -1, 0.8f, 0.0f}, Case{"min_p", 1.0f, 0, 1.0f, 0.1f},
        Case{"all four", 0.9f, 6, 0.9f, 0.05f}}) {
    SamplingRow row;
    row.temperature = c.temperature;
    row.top_k = c.top_k;
    row.top_p = c.top_p;
    row.min_p = c.min_p;
    row.seed = 2024;
    const std::vector<double> p = filtered_probs(logits, row);
    const int draws = 20000;
    std::vector<int> count(logits.size(), 0);
    for (int i = 0; i < draws; ++i) {
      row.offset = uint64_t(i);
      ++count[size_t(sample_row(logits.data(), int64_t(logits.size()), row).token)];
    }
    double chi2 = 0.0;
    int df = -1;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (p[i] == 0.0) {
        CHECK(count[i] == 0);  // filtered tokens never come out
        continue;
      }
      const double expected = p[i] * draws;
      chi2 += (count[i] - expected) * (count[i] - expected) / expected;
      ++df;
    }
    REQUIRE(df >= 1);
    INFO(c.name << ": chi2 " << chi2 << " with " << df << " degrees of freedom");
    std::printf("sampler chi-square %-20s chi2 %.2f df %d (limit %.2f)\n", c.name, chi2, df,
                kChiSquare999[df - 1]);
    CHECK(chi2 < kChiSquare999[df - 1]);
  }
}

TEST_CASE("sampler top_k keeps boundary ties, top_p always keeps the top token", "[sampler]") {
  const std::vector<float> logits{1.0f, 3.0f, 2.0f, 2.0f, 0.0f};
  SamplingRow row;
  row.top_k = 2;  // the 2nd largest (2.0) is tied: both 2 and 3 survive, as in vLLM
  std::set<int32_t> seen;
  for (uint64_t offset = 0; offset < 500; ++offset) {
    row.offset = offset;
    seen.insert(sample_row(logits.data(), 5, row).token);
  }
  CHECK(seen == std::set<int32_t>{1, 2, 3});
  row.top_k = 0;
  row.top_p = 1e-6f;  // nothing reaches it: only the most likely token
  for (uint64_t offset = 0; offset < 50; ++offset) {
    row.offset = offset;
    CHECK(sample_row(logits.data(), 5, row).token == 1);
  }
}

TEST_CASE("sampler rejects bad rows with a message naming the field", "[sampler]") {
  const std::vector<float> logits{0.0f, 1.0f, 2.0f};
  auto bad = [&](auto mutate, const char* field) {
    SamplingRow row;
    mutate(row);
    CHECK_THROWS_WITH(sample_row(logits.data(), 3, row), Catch::Contains(field));
  };
  bad([](SamplingRow& r) { r.temperature = -1.0f; }, "temperature = -1");
  bad([](SamplingRow& r) { r.temperature = NAN; }, "temperature");
  bad([](SamplingRow& r) { r.top_k = -2; }, "top_k = -2");
  bad([](SamplingRow& r) { r.top_p = 0.0f; }, "top_p = 0");
  bad([](SamplingRow& r) { r.top_p = 1.5f; }, "top_p = 1.5");
  bad([](SamplingRow& r) { r.min_p = 2.0f; }, "min_p = 2");
  bad([](SamplingRow& r) { r.repetition_penalty = 0.0f; }, "repetition_penalty = 0");
  bad([](SamplingRow& r) { r.presence_penalty = INFINITY; }, "presence_penalty");
  bad([](SamplingRow& r) { r.frequency_penalty = NAN; }, "frequency_penalty");
  bad([](SamplingRow& r) { r.num_logprobs = 4; }, "num_logprobs = 4");
  bad([](SamplingRow& r) { r.num_logprobs = -2; }, "num_logprobs = -2");
  static const std::vector<int32_t> out_of_range{1, 3};
  bad([](SamplingRow& r) { r.output_ids = out_of_range; }, "output_ids[1] = 3");
  bad([](SamplingRow& r) { r.prompt_ids = out_of_range; }, "prompt_ids[1] = 3");
  static const std::pair<int32_t, float> bias_token[] = {{-1, 1.0f}};
  bad([](SamplingRow& r) { r.logit_bias = bias_token; }, "logit_bias[0] names token -1");
  static const std::pair<int32_t, float> bias_inf[] = {{1, INFINITY}};
  bad([](SamplingRow& r) { r.logit_bias = bias_inf; }, "logit_bias[0] for token 1");
  CHECK_THROWS_WITH(sample_row(logits.data(), 0, SamplingRow{}), Catch::Contains("vocabulary"));

  const std::vector<float> dead{-kInf, NAN, -kInf};
  CHECK_THROWS_WITH(sample_row(dead.data(), 3, SamplingRow{}), Catch::Contains("-inf or NaN"));

  std::vector<SamplingRow> rows(2);
  rows[1].top_p = 2.0f;
  const std::vector<float> two_rows{0, 1, 2, 0, 1, 2};
  CHECK_THROWS_WITH(sample_rows(two_rows.data(), 3, rows), Catch::Contains("sampling row 1"));

  test::OpHarness h(2);
  const Tensor l = h.f32({2, 3}, two_rows);
  CHECK_THROWS_WITH(h.backend().sample(l, std::span(rows).first(1)),
                    Catch::Contains("sample: 1 sampling rows"));
  CHECK_THROWS_WITH(h.backend().sample(l, rows), Catch::Contains("sampling row 1: top_p = 2"));
  CHECK_THROWS_AS(h.backend().sample(h.of(DType::i32, {2, 3}), std::span(rows).first(2)), Error);
}
