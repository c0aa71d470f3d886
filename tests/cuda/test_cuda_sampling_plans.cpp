// The cluster sampler (cuda/sampling.cu) under every launch plan, on large batches and on the
// rows that drive its selection off the fast path: the CPU reference sampler decides, as in
// test_cuda_sampling.cpp (greedy rows, logprobs, ranks and top-N lists must match; a sampled
// token may differ only at a float near-tie that a float64 re-computation confirms), and every
// plan must give the same results bit for bit.
#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

#include "cuda/kernels.hpp"
#include "runtime/error.hpp"
#include "runtime/sampling/philox.hpp"
#include "runtime/sampling/sampler.hpp"
#include "tests/cuda/cuda_harness.hpp"

namespace troupe::test {
namespace {

constexpr double kTie = 1e-6;

struct RowData {
  std::vector<int32_t> prompt, output;
  std::vector<std::pair<int32_t, float>> bias;
};

/// Forces a launch plan for its lifetime (cluster 0 / cached -1: automatic).
class ForcedPlan {
 public:
  ForcedPlan(int32_t cluster, int32_t cached) { cuda::override_sample_plan(cluster, cached); }
  ~ForcedPlan() { cuda::override_sample_plan(0, -1); }
  ForcedPlan(const ForcedPlan&) = delete;
  ForcedPlan& operator=(const ForcedPlan&) = delete;
};

struct PlanCase {
  int32_t cluster, cached;
};
// Automatic first (the reference for bit-identity), then narrow and wide clusters, cached and
// read from global memory.
constexpr PlanCase kPlans[] = {{0, -1}, {1, -1}, {2, -1},  {3, 0},
                               {4, 0},  {8, -1}, {16, -1}, {16, 0}};

/// Float64 view of a row as the CPU reference processes it, to judge near-ties.
struct Judge {
  std::vector<double> y;
  double vmax = -INFINITY;
  std::vector<int32_t> order;  // survivors of min_p and top_k, most likely first
  double kth = -INFINITY;
  double z = 0.0;

  Judge(const std::vector<float>& logits, const SamplingRow& row) {
    std::vector<float> work = logits;
    apply_bias_and_penalties(work, row);
    y.resize(work.size());
    for (size_t i = 0; i < work.size(); ++i) y[i] = double(work[i] / row.temperature);
    for (double v : y) vmax = std::max(vmax, v);
    for (size_t i = 0; i < y.size(); ++i)
      if (y[i] > -INFINITY && std::exp(y[i] - vmax) >= row.min_p) order.push_back(int32_t(i));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return y[size_t(a)] > y[size_t(b)] || (y[size_t(a)] == y[size_t(b)] && a < b);
    });
    if (row.top_k > 0 && size_t(row.top_k) < order.size()) {
      kth = y[size_t(order[size_t(row.top_k - 1)])];
      while (!order.empty() && y[size_t(order.back())] < kth) order.pop_back();
    }
    for (int32_t i : order) z += std::exp(y[size_t(i)] - vmax);
  }

  [[nodiscard]] double race(const SamplingRow& row, int32_t i) const {
    const double u = philox::uniform(row.seed, row.offset, uint32_t(i));
    return (y[size_t(i)] - vmax) - std::log(-std::log(u));
  }

  [[nodiscard]] bool near_boundary(const SamplingRow& row, int32_t i) const {
    const double e = std::exp(y[size_t(i)] - vmax);
    if (row.min_p > 0.0f && std::abs(e - row.min_p) <= kTie * row.min_p) return true;
    if (row.top_k > 0 && std::isfinite(kth) &&
        std::abs(y[size_t(i)] - kth) <= kTie * std::max(1.0, std::abs(kth)))
      return true;
    if (row.top_p < 1.0f) {
      double before = 0.0;
      for (int32_t j : order) {
        if (j == i) break;
        before += std::exp(y[size_t(j)] - vmax) / z;
      }
      if (std::abs(before - row.top_p) <= kTie) return true;
    }
    return false;
  }
};

bool close_logprob(float a, float b) {
  return a == b || std::abs(a - b) <= 1e-4;  // == first: -inf entries
}

void compare_with_cpu(const std::vector<float>& logits, int64_t vocab,
                      const std::vector<SamplingRow>& rows, const std::vector<SampledToken>& gpu,
                      const std::string& label) {
  REQUIRE(gpu.size() == rows.size());
  const std::vector<SampledToken> cpu_all = sample_rows(logits.data(), vocab, rows);
  for (size_t r = 0; r < rows.size(); ++r) {
    const SampledToken& cpu = cpu_all[r];
    const SampledToken& g = gpu[r];
    INFO(label << " row " << r << ": cpu token " << cpu.token << ", gpu token " << g.token);
    if (g.token != cpu.token) {
      REQUIRE_FALSE(rows[r].greedy());
      REQUIRE(g.token >= 0);
      REQUIRE(g.token < vocab);
      const std::vector<float> row_logits(logits.begin() + int64_t(r) * vocab,
                                          logits.begin() + int64_t(r + 1) * vocab);
      const Judge judge(row_logits, rows[r]);
      const double sc = judge.race(rows[r], cpu.token), sg = judge.race(rows[r], g.token);
      const bool tie = std::abs(sc - sg) <= kTie * std::max(1.0, std::abs(sc));
      const bool boundary =
          judge.near_boundary(rows[r], cpu.token) || judge.near_boundary(rows[r], g.token);
      INFO("race scores cpu " << sc << ", gpu " << sg);
      CHECK((tie || boundary));
      std::printf("%s row %zu: near-tie mismatch accepted (cpu %d, gpu %d)\n", label.c_str(), r,
                  cpu.token, g.token);
      continue;
    }
    CHECK(close_logprob(g.logprob, cpu.logprob));
    CHECK(g.rank == cpu.rank);
    REQUIRE(g.top.size() == cpu.top.size());
    for (size_t i = 0; i < cpu.top.size(); ++i) {
      INFO("top entry " << i);
      CHECK(g.top[i].token == cpu.top[i].token);
      CHECK(close_logprob(g.top[i].logprob, cpu.top[i].logprob));
      CHECK(g.top[i].rank == cpu.top[i].rank);
    }
  }
}

void check_identical(const std::vector<SampledToken>& a, const std::vector<SampledToken>& b,
                     const std::string& label) {
  REQUIRE(a.size() == b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    INFO(label << " row " << r);
    CHECK(a[r].token == b[r].token);
    CHECK(std::bit_cast<uint32_t>(a[r].logprob) == std::bit_cast<uint32_t>(b[r].logprob));
    CHECK(a[r].rank == b[r].rank);
    REQUIRE(a[r].top.size() == b[r].top.size());
    for (size_t i = 0; i < a[r].top.size(); ++i) {
      CHECK(a[r].top[i].token == b[r].top[i].token);
      CHECK(std::bit_cast<uint32_t>(a[r].top[i].logprob) ==
            std::bit_cast<uint32_t>(b[r].top[i].logprob));
    }
  }
}

/// Samples `rows` under every plan; each result against the CPU (unless `cpu` is false) and
/// against the automatic plan's.
void check_all_plans(Pair& p, const std::vector<float>& logits, int64_t vocab,
                     const std::vector<SamplingRow>& rows, const std::string& name,
                     bool cpu = true) {
  const Tensor g = p.gpu_floats(DType::f32, {int64_t(rows.size()), vocab}, logits);
  std::vector<SampledToken> reference;
  for (const PlanCase& plan : kPlans) {
    const ForcedPlan forced(plan.cluster, plan.cached);
    cuda::SamplePlan used{};
    REQUIRE(cuda::plan_sample(vocab, int32_t(rows.size()), &used) == cudaSuccess);
    const std::string label =
        fmt::format("{} (forced cluster {} cached {}: ran cluster {}{})", name, plan.cluster,
                    plan.cached, used.cluster, used.cached ? "" : " uncached");
    const auto got = p.gpu().sample(g, rows);
    if (cpu) compare_with_cpu(logits, vocab, rows, got, label);
    if (reference.empty())
      reference = got;
    else
      check_identical(reference, got, label);
  }
}

/// Every kind of row the engine sends, cycled over `n` rows.
std::vector<SamplingRow> mixed_rows(size_t n, int64_t vocab, std::mt19937_64& rng,
                                    std::vector<RowData>& data) {
  std::uniform_int_distribution<int32_t> tok(0, int32_t(vocab - 1));
  data.assign(n, RowData{});
  std::vector<SamplingRow> rows(n);
  for (size_t r = 0; r < n; ++r) {
    SamplingRow& row = rows[r];
    row.seed = rng();
    row.offset = rng() % 100000;
    switch (r % 10) {
      case 0:
        row.temperature = 0.0f;
        break;
      case 1:
        row.temperature = 0.8f;
        break;
      case 2:
        row.temperature = 0.8f, row.top_k = 50, row.top_p = 0.95f, row.num_logprobs = 5;
        break;
      case 3:
        row.top_p = 0.9f, row.min_p = 0.02f;
        break;
      case 4:
        row.temperature = 0.7f, row.top_k = 40, row.repetition_penalty = 1.2f;
        row.frequency_penalty = 0.3f, row.presence_penalty = 0.2f;
        for (int i = 0; i < 200; ++i) data[r].prompt.push_back(tok(rng));
        for (int i = 0; i < 60; ++i) data[r].output.push_back(tok(rng) % 97);
        break;
      case 5:
        row.temperature = 0.0f, row.num_logprobs = 20;
        data[r].bias = {{tok(rng), 30.0f}, {tok(rng), -INFINITY}};
        break;
      case 6:
        row.temperature = 1.3f, row.top_p = 0.999f, row.num_logprobs = 2;
        break;
      case 7:
        row.top_k = 1500, row.temperature = 0.9f;  // more candidates than one CTA gathers
        break;
      case 8:
        row.temperature = 0.6f, row.top_k = 1, row.num_logprobs = 0;
        data[r].bias = {{tok(rng), 25.0f}};  // the biased token wins; its rank is the raw one
        break;
      default:
        row.min_p = 0.1f, row.top_k = 200, row.top_p = 0.5f, row.num_logprobs = 1;
        break;
    }
  }
  for (size_t r = 0; r < n; ++r) {
    rows[r].prompt_ids = data[r].prompt;
    rows[r].output_ids = data[r].output;
    rows[r].logit_bias = data[r].bias;
  }
  return rows;
}

std::vector<float> normal_logits(std::mt19937_64& rng, size_t n, float sd) {
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST_CASE("cuda sample: every launch plan draws the same tokens", "[cuda][sampling]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(31);
  for (int64_t vocab : {5003, 32000, 128256}) {
    std::vector<RowData> data;
    const auto rows = mixed_rows(20, vocab, rng, data);
    const auto logits = normal_logits(rng, rows.size() * size_t(vocab), 4.0f);
    check_all_plans(p, logits, vocab, rows, fmt::format("V={}", vocab));
  }
}

TEST_CASE("cuda sample: large batches match the CPU reference", "[cuda][sampling]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(32);
  const int64_t vocab = 128256;
  for (size_t n : {64, 256}) {
    std::vector<RowData> data;
    const auto rows = mixed_rows(n, vocab, rng, data);
    const auto logits = normal_logits(rng, n * size_t(vocab), 8.0f);
    const Tensor g = p.gpu_floats(DType::f32, {int64_t(n), vocab}, logits);
    const auto got = p.gpu().sample(g, rows);
    compare_with_cpu(logits, vocab, rows, got, fmt::format("{} rows", n));
    // Each row alone draws what it drew in the batch, logprob bits included.
    for (size_t r = 0; r < n; r += 37) {
      const std::vector<float> one(logits.begin() + int64_t(r) * vocab,
                                   logits.begin() + int64_t(r + 1) * vocab);
      const auto alone = p.gpu().sample(p.gpu_floats(DType::f32, {1, vocab}, one),
                                        std::span<const SamplingRow>(&rows[r], 1));
      CHECK(alone[0].token == got[r].token);
      CHECK(std::bit_cast<uint32_t>(alone[0].logprob) == std::bit_cast<uint32_t>(got[r].logprob));
    }
  }
}

TEST_CASE("cuda sample: tiny vocabularies, ties, flat rows, huge spreads and -inf logits",
          "[cuda][sampling]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(33);
  const auto seeded = [&](std::vector<SamplingRow>& rows) {
    for (SamplingRow& r : rows) r.seed = rng(), r.offset = rng() % 1000;
  };
  {  // ten tokens: under wide plans most CTAs of a cluster get an empty slice
    const int64_t vocab = 10;
    std::vector<SamplingRow> rows(5);
    seeded(rows);
    rows[0].temperature = 0.0f, rows[0].num_logprobs = 10;
    rows[1].top_k = 3, rows[1].top_p = 0.8f, rows[1].num_logprobs = 4;
    rows[2].min_p = 0.3f, rows[2].num_logprobs = 1;
    const std::vector<int32_t> outputs = {1, 1, 2, 9};
    const std::vector<std::pair<int32_t, float>> bias = {{9, 3.0f}, {0, -INFINITY}};
    rows[3].repetition_penalty = 1.5f, rows[3].frequency_penalty = 0.4f;
    rows[3].output_ids = outputs, rows[3].logit_bias = bias, rows[3].num_logprobs = 10;
    rows[4].temperature = 0.0f, rows[4].presence_penalty = 2.0f;
    rows[4].output_ids = outputs, rows[4].logit_bias = bias;
    check_all_plans(p, normal_logits(rng, rows.size() * size_t(vocab), 2.0f), vocab, rows,
                    "ten tokens");
  }
  {  // every logit equal: each threshold falls inside one tie of the whole row
    const int64_t vocab = 3000;
    std::vector<SamplingRow> rows(5);
    seeded(rows);
    rows[0].top_k = 5, rows[0].num_logprobs = 1024;
    rows[1].temperature = 0.0f, rows[1].num_logprobs = 1024;
    rows[2].min_p = 0.5f, rows[2].num_logprobs = 700;
    rows[3].temperature = 0.5f;
    rows[4].top_k = 2999;
    check_all_plans(p, std::vector<float>(rows.size() * size_t(vocab), 0.25f), vocab, rows,
                    "equal logits");
    // top_p inside a tie: the GPU keeps whole ties (the CPU walks them by id), so only the
    // plans are compared, and the token must be one of the tie.
    std::vector<SamplingRow> nucleus(2);
    seeded(nucleus);
    nucleus[0].top_p = 0.5f;
    nucleus[1].top_k = 5, nucleus[1].top_p = 0.3f;
    const std::vector<float> equal(nucleus.size() * size_t(vocab), 0.25f);
    check_all_plans(p, equal, vocab, nucleus, "equal logits, top_p", false);
    const auto got =
        p.gpu().sample(p.gpu_floats(DType::f32, {int64_t(nucleus.size()), vocab}, equal), nucleus);
    for (const SampledToken& t : got) CHECK((t.token >= 0 && t.token < vocab));
  }
  {  // integers in [-3, 3]: ties at every threshold
    const int64_t vocab = 4000;
    std::vector<SamplingRow> rows(5);
    seeded(rows);
    rows[0].top_k = 10;
    rows[1].temperature = 0.0f, rows[1].num_logprobs = 1024;
    rows[2].top_k = 2000, rows[2].temperature = 0.7f;
    rows[3].temperature = 0.0f, rows[3].num_logprobs = 33;
    rows[4].min_p = 0.3f, rows[4].num_logprobs = 9;
    const std::vector<std::pair<int32_t, float>> bias = {{17, 3.0f}, {18, 3.0f}};
    rows[3].logit_bias = bias;
    std::vector<float> logits(rows.size() * size_t(vocab));
    std::uniform_int_distribution<int> d(-3, 3);
    for (float& x : logits) x = float(d(rng));
    check_all_plans(p, logits, vocab, rows, "integer logits");
  }
  {  // -inf and NaN raw logits, with top-N lists long enough to reach them
    const int64_t vocab = 1000;
    std::vector<SamplingRow> rows(4);
    seeded(rows);
    rows[0].num_logprobs = 1000;
    rows[1].temperature = 0.0f, rows[1].num_logprobs = 1000;
    rows[2].min_p = 0.2f, rows[2].num_logprobs = 10;
    rows[3].top_k = 900, rows[3].top_p = 0.99f;
    auto logits = normal_logits(rng, rows.size() * size_t(vocab), 2.0f);
    for (size_t i = 0; i < logits.size(); i += 3) logits[i] = -INFINITY;
    for (size_t i = 1; i < logits.size(); i += 7) logits[i] = std::nanf("");
    check_all_plans(p, logits, vocab, rows, "-inf and NaN logits");
  }
  {  // flat rows: nuclei of most of the vocabulary, crowded distance buckets
    const int64_t vocab = 20000;
    std::vector<SamplingRow> rows(4);
    seeded(rows);
    rows[0].top_p = 0.95f;
    rows[1].top_p = 0.2f, rows[1].num_logprobs = 4;
    rows[2].top_k = 50;
    rows[3].min_p = 0.99f;
    check_all_plans(p, normal_logits(rng, rows.size() * size_t(vocab), 0.01f), vocab, rows,
                    "flat logits");
  }
  {  // huge spread: all but the top few tokens far below the maximum
    const int64_t vocab = 8000;
    std::vector<SamplingRow> rows(3);
    seeded(rows);
    rows[0].temperature = 0.7f, rows[0].top_k = 50, rows[0].top_p = 0.9f;
    rows[1].num_logprobs = 20, rows[1].top_p = 0.99999f;
    rows[2].temperature = 30.0f, rows[2].top_k = 40;
    check_all_plans(p, normal_logits(rng, rows.size() * size_t(vocab), 1000.0f), vocab, rows,
                    "spread logits");
  }
}

TEST_CASE("cuda sample: rows with no usable logits fail under every plan",
          "[cuda][sampling][errors]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  const int64_t vocab = 5000;
  const SamplingRow row;
  const auto one = [&](const SamplingRow& r) { return std::span<const SamplingRow>(&r, 1); };
  std::vector<std::pair<int32_t, float>> ban_all;
  for (int32_t t = 0; t < vocab; ++t) ban_all.emplace_back(t, -INFINITY);
  SamplingRow banned = row;
  banned.logit_bias = ban_all;
  SamplingRow banned_greedy = banned;
  banned_greedy.temperature = 0.0f;
  const Tensor all_neg_inf =
      p.gpu_floats(DType::f32, {1, vocab}, std::vector<float>(size_t(vocab), -INFINITY));
  std::vector<float> with_inf(size_t(vocab), 0.0f);
  with_inf[4321] = INFINITY;
  const Tensor has_inf = p.gpu_floats(DType::f32, {1, vocab}, with_inf);
  const Tensor zeros =
      p.gpu_floats(DType::f32, {1, vocab}, std::vector<float>(size_t(vocab), 0.0f));
  // Tempered logits that overflow to +inf: no probabilities at all, so both samplers refuse.
  SamplingRow cold = row;
  cold.temperature = 1e-5f;
  std::mt19937_64 rng(34);
  const auto huge = normal_logits(rng, size_t(vocab), 1e36f);
  CHECK_THROWS_AS(sample_row(huge.data(), vocab, cold), Error);
  const Tensor overflowing = p.gpu_floats(DType::f32, {1, vocab}, huge);
  for (const PlanCase& plan : kPlans) {
    const ForcedPlan forced(plan.cluster, plan.cached);
    INFO("forced cluster " << plan.cluster << " cached " << plan.cached);
    CHECK_THROWS_AS(p.gpu().sample(overflowing, one(cold)), Error);
    CHECK_THROWS_AS(p.gpu().sample(all_neg_inf, one(row)), Error);
    CHECK_THROWS_AS(p.gpu().sample(has_inf, one(row)), Error);
    CHECK_THROWS_AS(p.gpu().sample(zeros, one(banned)), Error);
    CHECK_THROWS_AS(p.gpu().sample(zeros, one(banned_greedy)), Error);
    CHECK(p.gpu().sample(zeros, one(row)).size() == 1);  // still usable
  }
}

}  // namespace
}  // namespace troupe::test
