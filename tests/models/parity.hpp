// The transformers-parity check, shared by the CPU test (tests/models/test_llama_parity.cpp)
// and the CUDA one (tests/cuda/test_cuda_model_parity.cpp): one fixture, one backend, one
// compute dtype and tolerance. See test_llama_parity.cpp for what is compared.
#pragma once

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <optional>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/model_config.hpp"
#include "tests/models/harness.hpp"

namespace troupe::testing {

struct ParityOptions {
  std::optional<DType> dtype;  // compute dtype; unset = the checkpoint's (as the backend maps it)
  double tolerance = 1e-4;     // on ||a-b|| / ||b|| of every logits row
  bool greedy_exact = true;    // 24 greedy tokens identical to transformers'
  /// Half precision: where the fixture has half_precision.json (tools/half_precision_refs.py:
  /// how far transformers itself lands from the float32 references in this dtype), a row may
  /// also be off by up to `half_factor` times transformers' own error at that row.
  double half_factor = 0.0;
};

/// The per-row error bound: the fixed tolerance, or `half_factor` × transformers' own error in
/// this dtype when that is larger.
struct RowBounds {
  double tolerance = 0;
  std::vector<double> last, full;  // transformers' own errors, empty when not known
  double last_bound(size_t i) const {
    return i < last.size() ? std::max(tolerance, last[i]) : tolerance;
  }
  double full_bound(size_t t) const {
    return t < full.size() ? std::max(tolerance, full[t]) : tolerance;
  }
};


inline std::filesystem::path fixtures_root() {
  if (const char* env = std::getenv("TROUPE_MODEL_FIXTURES"); env && *env) return env;
  return std::filesystem::path(TROUPE_FIXTURES_DIR) / "models";
}

inline std::vector<double> as_doubles(const nlohmann::json& j) {
  return j.get<std::vector<double>>();
}

inline float top_margin(const std::vector<float>& v) {
  float a = -INFINITY, b = -INFINITY;
  for (float x : v) {
    if (x > a) {
      b = a;
      a = x;
    } else if (x > b) {
      b = x;
    }
  }
  return a - b;
}

inline void run_parity(Backend& backend_ref, const std::string& name, const std::string& want_arch,
                       const ParityOptions& opt = {}) {
  const auto dir = fixtures_root() / name;
  if (!std::filesystem::exists(dir / "reference.json")) {
    WARN("fixture " << dir.string()
                    << " is absent: skipped (generate it with tools/make_fixtures.py)");
    return;
  }
  nlohmann::json ref;
  {
    std::ifstream in(dir / "reference.json");
    in >> ref;
  }
  ModelConfig config = load_model_config(dir);
  if (opt.dtype) config.dtype = *opt.dtype;
  REQUIRE(config.architecture == want_arch);
  REQUIRE(ref.at("vocab_size").get<int64_t>() == config.vocab_size);
  INFO("fixture " << name << " (transformers " << ref.value("transformers_version", "?")
                  << ", torch " << ref.value("torch_version", "?") << ", references on "
                  << ref.value("device", "?") << ")");

  RowBounds bounds{opt.tolerance, {}, {}};
  const std::string dt_name(dtype_name(backend_ref.compute_dtype(config.dtype)));
  if (opt.half_factor > 0 && std::filesystem::exists(dir / "half_precision.json")) {
    nlohmann::json half;
    std::ifstream(dir / "half_precision.json") >> half;
    if (half.contains(dt_name)) {
      for (double e : as_doubles(half[dt_name].at("last")))
        bounds.last.push_back(opt.half_factor * e);
      for (double e : as_doubles(half[dt_name].at("full")))
        bounds.full.push_back(opt.half_factor * e);
    }
  }
  double worst = 0;  // the largest logits error seen
  Backend* backend = &backend_ref;
  const auto ck = CheckpointReader::open(dir);
  auto model = make_causal_lm(config, *backend);
  model->load_weights(ck);
  model->reserve(512, 512);

  const auto& prompts = ref.at("prompts");
  std::vector<std::vector<int32_t>> ids;
  for (const auto& p : prompts) ids.push_back(p.at("token_ids").get<std::vector<int32_t>>());

  // Each prompt alone: the last position's logits.
  {
    PagedRunner runner(*backend, *model, 8, 256, 1);
    for (size_t i = 0; i < ids.size(); ++i) {
      PagedSeq seq;
      const auto rows = runner.step({&seq}, {ids[i]}, false);
      const double err = rel_error(rows[0], as_doubles(prompts[i].at("last_logits")));
      INFO("prompt " << i << " (" << ids[i].size() << " tokens): relative error " << err
                      << ", bound " << bounds.last_bound(i));
      CHECK(err < bounds.last_bound(i));
      worst = std::max(worst, err);
    }
  }

  // Every position of the 7-token prompt.
  {
    const size_t fi = ref.at("full_logits_prompt_index").get<size_t>();
    const auto& full = ref.at("full_logits");
    REQUIRE(full.size() == ids[fi].size());
    PagedRunner runner(*backend, *model, 8, 64, 2);
    PagedSeq seq;
    const auto rows = runner.step({&seq}, {ids[fi]}, true);
    for (size_t t = 0; t < rows.size(); ++t) {
      const double err = rel_error(rows[t], as_doubles(full[t]));
      INFO("position " << t << " of prompt " << fi << ": relative error " << err << ", bound "
                        << bounds.full_bound(t));
      CHECK(err < bounds.full_bound(t));
      worst = std::max(worst, err);
    }
  }

  // Greedy: all prompts batched, one token per sequence per step after the prefill.
  const size_t n_new = ref.at("greedy_new_tokens").get<size_t>();
  PagedRunner runner(*backend, *model, 8, 512, 3);
  std::vector<PagedSeq> seqs(ids.size());
  std::vector<PagedSeq*> ptrs;
  for (auto& s : seqs) ptrs.push_back(&s);
  std::vector<std::vector<int32_t>> feed = ids;
  std::vector<std::vector<int32_t>> got(ids.size());
  std::vector<bool> diverged(ids.size(), false);
  for (size_t step = 0; step < n_new; ++step) {
    const auto rows = runner.step(ptrs, feed, false);
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto tok = int32_t(argmax(rows[i]));
      got[i].push_back(tok);
      feed[i] = {tok};
      const auto& want = prompts[i].at("greedy_tokens");
      if (diverged[i] || tok == want[step].get<int32_t>()) continue;
      diverged[i] = true;
      const double ref_margin = prompts[i].at("greedy_margins")[step].get<double>();
      INFO("prompt " << i << " (" << ids[i].size() << " tokens), greedy step " << step
                     << ": transformers chose " << want[step].get<int32_t>() << ", troupe chose "
                     << tok << "; transformers' top-1/top-2 margin " << ref_margin << ", troupe's "
                     << top_margin(rows[i])
                     << (ref_margin < 1e-3 ? " -- a near tie, likely float noise rather than a bug"
                                           : " -- a clear margin: a real mismatch"));
      if (opt.greedy_exact) CHECK(tok == want[step].get<int32_t>());
    }
  }
  if (!bounds.last.empty() || !bounds.full.empty()) {
    double hf = 0;
    for (double b : bounds.last) hf = std::max(hf, b / opt.half_factor);
    for (double b : bounds.full) hf = std::max(hf, b / opt.half_factor);
    WARN(name << " in " << dt_name << ": largest logits error " << worst
              << "; transformers' own in " << dt_name << ": " << hf);
  }
  size_t agree = 0;
  for (size_t i = 0; i < ids.size(); ++i) agree += diverged[i] ? 0 : 1;
  WARN(name << " on " << backend->name() << " in " << dtype_name(backend->compute_dtype(config.dtype))
            << ": " << agree << " of " << ids.size() << " greedy paths identical to transformers'");
  if (!opt.greedy_exact) return;
  for (size_t i = 0; i < ids.size(); ++i) {
    INFO("prompt " << i << " smallest reference margin "
                   << prompts[i].value("greedy_min_margin", 0.0));
    CHECK(got[i] == prompts[i].at("greedy_tokens").get<std::vector<int32_t>>());
  }
}


}  // namespace troupe::testing
