// The Llama-family program on the CPU backend against a float64 reference forward, on small
// random checkpoints the test writes (every variant: untied/tied, biases, RoPE scalings,
// F32/F16/BF16 storage), through a paged KV cache with shuffled blocks; plus every error the
// model raises for a bad checkpoint or bad call.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/model_config.hpp"
#include "tests/models/harness.hpp"
#include "tests/models/synthetic.hpp"

using namespace troupe;
using namespace troupe::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

struct Variant {
  std::string label;
  json config;
  std::string st_dtype;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"llama f32 untied", small_config("LlamaForCausalLM"), "F32"});
  {
    json c = small_config("LlamaForCausalLM");
    c["tie_word_embeddings"] = true;
    c["attention_bias"] = true;
    c["mlp_bias"] = true;
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 16}};
    c["torch_dtype"] = "bfloat16";
    c.erase("dtype");
    v.push_back({"llama bf16 tied, all biases, llama3 rope", c, "BF16"});
  }
  {
    json c = small_config("Qwen2ForCausalLM");
    c["tie_word_embeddings"] = true;
    c["rope_theta"] = 1000000.0;
    c["dtype"] = "float16";
    v.push_back({"qwen2 f16 tied", c, "F16"});
  }
  {
    json c = small_config("MistralForCausalLM");
    c["num_key_value_heads"] = 1;
    c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    v.push_back({"mistral f32, MQA, linear rope", c, "F32"});
  }
  return v;
}

std::vector<int32_t> random_ids(size_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& x : ids) x = int32_t(rng() % uint64_t(vocab));
  return ids;
}

struct Loaded {
  ModelConfig config;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CheckpointReader> ck;
  std::unique_ptr<CausalLM> model;
};

Loaded load(const std::filesystem::path& dir, int32_t max_tokens = 64, int32_t max_logits = 64) {
  Loaded l;
  l.config = load_model_config(dir);
  l.backend = make_cpu_backend(1);
  l.ck = std::make_unique<CheckpointReader>(CheckpointReader::open(dir));
  l.model = make_causal_lm(l.config, *l.backend);
  l.model->load_weights(*l.ck);
  l.model->reserve(max_tokens, max_logits);
  return l;
}

/// The CPU backend, reporting fuses_norm_and_add_into_linear as told: the model then runs its
/// fused-op program (the ops' default sequences) instead of the add_rms_norm one.
class ProgramChoice final : public Backend {
 public:
  ProgramChoice(Backend& inner, bool fused) : in_(inner), fused_(fused) {}
  bool fused_calls = false;        // a fused op was called
  std::vector<std::string> trace;  // the ops the model called, in order (not their insides)

  [[nodiscard]] bool fuses_norm_and_add_into_linear(int64_t) const override { return fused_; }
  [[nodiscard]] std::string name() const override { return in_.name(); }
  [[nodiscard]] Device device() const override { return in_.device(); }
  [[nodiscard]] DType compute_dtype(DType r) const override { return in_.compute_dtype(r); }
  [[nodiscard]] Buffer allocate(size_t bytes) override { return in_.allocate(bytes); }
  void upload(const Tensor& d, const void* h, size_t n) override { in_.upload(d, h, n); }
  void download(void* h, const Tensor& s, size_t n) override { in_.download(h, s, n); }
  void copy(const Tensor& d, const Tensor& s) override { in_.copy(d, s); }
  void synchronize() override { in_.synchronize(); }
  [[nodiscard]] MemoryInfo memory_info() const override { return in_.memory_info(); }
  void embedding(const Tensor& i, const Tensor& t, const Tensor& o) override {
    const Note noted = note("embedding");
    in_.embedding(i, t, o);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& o) override {
    const Note noted = note("rms_norm");
    in_.rms_norm(x, w, eps, o);
  }
  void add_rms_norm(const Tensor& r, const Tensor& x, const Tensor& w, float eps,
                    const Tensor& o) override {
    const Note noted = note("add_rms_norm");
    in_.add_rms_norm(r, x, w, eps, o);
  }
  void linear(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& o) override {
    const Note noted = note("linear");
    in_.linear(x, w, b, o);
  }
  void add(const Tensor& r, const Tensor& x) override {
    const Note noted = note("add");
    in_.add(r, x);
  }
  // The fused ops run their default sequences through the ops above.
  void linear_add(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& r,
                  const Tensor& s) override {
    const Note noted = note("linear_add");
    fused_calls = true;
    Backend::linear_add(x, w, b, r, s);
  }
  void rms_norm_linear(const Tensor& x, const Tensor& nw, float eps, const Tensor& h,
                       const Tensor& w, const Tensor* b, const Tensor& o) override {
    const Note noted = note("rms_norm_linear");
    fused_calls = true;
    Backend::rms_norm_linear(x, nw, eps, h, w, b, o);
  }
  void rms_norm_linear_act_mul(const Tensor& x, const Tensor& nw, float eps, const Tensor& h,
                               const Tensor& w, const Tensor* b, GatedActivation act,
                               const Tensor& gu, const Tensor& o) override {
    const Note noted = note("rms_norm_linear_act_mul");
    fused_calls = true;
    Backend::rms_norm_linear_act_mul(x, nw, eps, h, w, b, act, gu, o);
  }
  void rope(const Tensor& q, const Tensor& k, const Tensor& p, const Tensor& cs, int32_t d,
            int32_t rd, RopeStyle st) override {
    const Note noted = note("rope");
    in_.rope(q, k, p, cs, d, rd, st);
  }
  void write_kv(const Tensor& k, const Tensor& v, const Tensor& kc, const Tensor& vc,
                const Tensor& sm) override {
    const Note noted = note("write_kv");
    in_.write_kv(k, v, kc, vc, sm);
  }
  void attention(const Tensor& q, const Tensor& kc, const Tensor& vc, const AttentionBatch& b,
                 const AttentionShape& sh, const Tensor& o) override {
    const Note noted = note("attention");
    in_.attention(q, kc, vc, b, sh, o);
  }
  void act_mul(GatedActivation a, const Tensor& gu, const Tensor& o) override {
    const Note noted = note("act_mul");
    in_.act_mul(a, gu, o);
  }
  void gather_rows(const Tensor& x, const Tensor& i, const Tensor& o) override {
    const Note noted = note("gather_rows");
    in_.gather_rows(x, i, o);
  }
  std::vector<SampledToken> sample(const Tensor& l, std::span<const SamplingRow> r) override {
    const Note noted = note("sample");
    return in_.sample(l, r);
  }
  void rope_qkv_to_cache(const Tensor& qkv, const Tensor& p, const Tensor& cs, int32_t d,
                         int32_t rd, RopeStyle st, int32_t nh, int32_t nkv, const Tensor& kc,
                         const Tensor& vc, const Tensor& sm, const Tensor& q) override {
    const Note noted = note("rope_qkv_to_cache");
    in_.rope_qkv_to_cache(qkv, p, cs, d, rd, st, nh, nkv, kc, vc, sm, q);
  }
  void rms_norm_linear_rope_qkv_to_cache(const Tensor& x, const Tensor& nw, float eps,
                                         const Tensor& h, const Tensor& w, const Tensor* b,
                                         const Tensor& qkv, const Tensor& p, const Tensor& cs,
                                         int32_t d, int32_t rd, RopeStyle st, int32_t nh,
                                         int32_t nkv, const Tensor& kc, const Tensor& vc,
                                         const Tensor& sm, const Tensor& q) override {
    const Note noted = note("rms_norm_linear_rope_qkv_to_cache");
    fused_calls = true;
    Backend::rms_norm_linear_rope_qkv_to_cache(x, nw, eps, h, w, b, qkv, p, cs, d, rd, st, nh,
                                               nkv, kc, vc, sm, q);
  }

 private:
  // Records an op called by the model (depth 0), not the ops a fused op's default runs.
  struct Note {
    int* depth;
    explicit Note(int* d) : depth(d) { ++*depth; }
    ~Note() { --*depth; }
    Note(const Note&) = delete;
    Note& operator=(const Note&) = delete;
  };
  [[nodiscard]] Note note(const char* op) {
    if (depth_ == 0) trace.emplace_back(op);
    return Note(&depth_);
  }

  Backend& in_;
  bool fused_;
  int depth_ = 0;
};

}  // namespace

TEST_CASE("llama family: the fused-op and add_rms_norm programs give the same bits", "[models]") {
  // The backend picks the program per step; on the CPU both run the same additions, so the
  // logits of a prefill, a chunk and decodes agree exactly.
  for (const auto& v : variants()) {
    INFO(v.label);
    TempDir dir("programs");
    write_synthetic(dir.path(), v.config, 13, v.st_dtype);
    std::vector<std::vector<std::vector<float>>> logits(2);
    for (int fused = 0; fused < 2; ++fused) {
      const ModelConfig config = load_model_config(dir.path());
      auto cpu = make_cpu_backend(1);
      ProgramChoice be(*cpu, fused == 1);
      const auto ck = CheckpointReader::open(dir.path());
      auto model = make_causal_lm(config, be);
      model->load_weights(ck);
      model->reserve(32, 32);
      PagedRunner runner(be, *model, 4, 16, 3);
      PagedSeq sa, sb;
      const auto a = random_ids(12, int32_t(config.vocab_size), 7);
      const auto b = random_ids(6, int32_t(config.vocab_size), 8);
      auto& out = logits[size_t(fused)];
      for (auto& row : runner.step({&sa, &sb}, {{a.begin(), a.begin() + 9}, b}, true))
        out.push_back(row);
      for (size_t i = 9; i < a.size(); ++i)
        for (auto& row : runner.step({&sa}, {{a[i]}}, false)) out.push_back(row);
      CHECK(be.fused_calls == (fused == 1));
    }
    REQUIRE(logits[0].size() == 18);
    CHECK(logits[0] == logits[1]);
  }
}

TEST_CASE("llama family at one rank calls the ops the program before the parallel rewrite did",
          "[models]") {
  // What the CUDA backend runs by default at TP = PP = 1 must not change with the model
  // program's rewrite (2026-12-05): the op sequences below are those of the program before it
  // (commit 4380067's runtime/models/llama.cpp), fused (decode steps on CUDA) and not.
  const auto all = variants();
  const auto& v = all.front();
  TempDir dir("op-sequence");
  write_synthetic(dir.path(), v.config, 13, v.st_dtype);
  const ModelConfig config = load_model_config(dir.path());
  const auto layers = size_t(config.num_hidden_layers);
  for (int fused = 0; fused < 2; ++fused) {
    INFO("fused " << fused);
    auto cpu = make_cpu_backend(1);
    ProgramChoice be(*cpu, fused == 1);
    const auto ck = CheckpointReader::open(dir.path());
    auto model = make_causal_lm(config, be);
    model->load_weights(ck);
    model->reserve(32, 32);
    PagedRunner runner(be, *model, 4, 16, 3);
    PagedSeq sa;
    const auto a = random_ids(5, int32_t(config.vocab_size), 7);
    be.trace.clear();
    (void)runner.step({&sa}, {{a.begin(), a.end()}}, false);
    std::vector<std::string> want = {"embedding"};
    for (size_t li = 0; li < layers; ++li) {
      if (fused == 1) {
        want.insert(want.end(), {"rms_norm_linear_rope_qkv_to_cache", "attention", "linear_add",
                                 "rms_norm_linear_act_mul", "linear_add"});
      } else {
        want.insert(want.end(), {li == 0 ? "rms_norm" : "add_rms_norm", "linear",
                                 "rope_qkv_to_cache", "attention", "linear", "add_rms_norm",
                                 "linear", "act_mul", "linear"});
      }
    }
    want.insert(want.end(), {fused == 1 ? "rms_norm" : "add_rms_norm", "gather_rows", "linear"});
    CHECK(be.trace == want);
  }
}

TEST_CASE("llama family: prefill logits of every position match float64", "[models]") {
  for (const auto& v : variants()) {
    INFO(v.label);
    TempDir dir("fwd");
    write_synthetic(dir.path(), v.config, 11, v.st_dtype);
    Loaded l = load(dir.path());
    const bool qwen2 = l.config.architecture == "Qwen2ForCausalLM";
    const auto ids = random_ids(23, int32_t(l.config.vocab_size), 5);
    const auto ref = reference_logits(l.config, *l.ck, ids, qwen2);

    PagedRunner runner(*l.backend, *l.model, 4, 16, 77);
    PagedSeq seq;
    const auto rows = runner.step({&seq}, {ids}, true);
    REQUIRE(rows.size() == ids.size());
    for (size_t t = 0; t < ids.size(); ++t) {
      INFO("position " << t);
      CHECK(rel_error(rows[t], ref[t]) < 1e-5);
    }
  }
}

TEST_CASE("llama family: batched chunked prefill and paged decode match float64", "[models]") {
  for (const auto& v : variants()) {
    INFO(v.label);
    TempDir dir("decode");
    write_synthetic(dir.path(), v.config, 12, v.st_dtype);
    Loaded l = load(dir.path());
    const bool qwen2 = l.config.architecture == "Qwen2ForCausalLM";
    const int32_t vocab = int32_t(l.config.vocab_size);
    // Two sequences of different lengths, run in the same steps: A prefills 9 tokens in
    // chunks of 5 and 4, B prefills 3 at once, then both decode one token per step.
    const auto a = random_ids(30, vocab, 1), b = random_ids(25, vocab, 2);
    const auto ref_a = reference_logits(l.config, *l.ck, a, qwen2);
    const auto ref_b = reference_logits(l.config, *l.ck, b, qwen2);

    PagedRunner runner(*l.backend, *l.model, 4, 32, 99);
    PagedSeq sa, sb;
    auto slice = [](const std::vector<int32_t>& x, size_t i, size_t n) {
      return std::vector<int32_t>(x.begin() + long(i), x.begin() + long(i + n));
    };
    auto r = runner.step({&sa, &sb}, {slice(a, 0, 5), slice(b, 0, 3)}, false);
    CHECK(rel_error(r[0], ref_a[4]) < 1e-5);
    CHECK(rel_error(r[1], ref_b[2]) < 1e-5);
    r = runner.step({&sb, &sa}, {slice(b, 3, 1), slice(a, 5, 4)}, false);  // order swapped
    CHECK(rel_error(r[0], ref_b[3]) < 1e-5);
    CHECK(rel_error(r[1], ref_a[8]) < 1e-5);
    size_t pa = 9, pb = 4;
    while (pb < b.size()) {
      r = runner.step({&sa, &sb}, {slice(a, pa, 1), slice(b, pb, 1)}, false);
      INFO("decode step at a[" << pa << "], b[" << pb << "]");
      CHECK(rel_error(r[0], ref_a[pa]) < 1e-5);
      CHECK(rel_error(r[1], ref_b[pb]) < 1e-5);
      ++pa;
      ++pb;
    }
    // A continues alone, with B's blocks still held.
    for (; pa < a.size(); ++pa) {
      r = runner.step({&sa}, {slice(a, pa, 1)}, false);
      CHECK(rel_error(r[0], ref_a[pa]) < 1e-5);
    }
  }
}

TEST_CASE("llama family: missing and mis-shaped weights are named", "[models]") {
  const json c = small_config("LlamaForCausalLM");
  auto expect = [&](const std::string& skip, const std::string& reshape,
                    std::vector<std::string> frags) {
    TempDir dir("badw");
    write_synthetic(dir.path(), c, 3, "F32", skip, reshape);
    const ModelConfig cfg = load_model_config(dir.path());
    auto be = make_cpu_backend(1);
    auto model = make_causal_lm(cfg, *be);
    const auto ck = CheckpointReader::open(dir.path());
    try {
      model->load_weights(ck);
      FAIL("no error; wanted one mentioning " << frags.front());
    } catch (const Error& e) {
      const std::string msg = e.what();
      INFO(msg);
      for (const auto& f : frags) CHECK_THAT(msg, Contains(f));
    }
  };
  expect("model.layers.1.mlp.up_proj.weight", "",
         {"lacks weight 'model.layers.1.mlp.up_proj.weight'", "[40, 32]"});
  expect("lm_head.weight", "", {"lacks weight 'lm_head.weight'", "tie_word_embeddings"});
  expect("", "model.layers.0.self_attn.k_proj.weight",
         {"'model.layers.0.self_attn.k_proj.weight'", "[24, 33]", "[24, 32]"});
  expect("", "model.norm.weight", {"'model.norm.weight'", "[33]", "[32]"});
}

TEST_CASE("llama family: bad configs and bad calls are clear errors", "[models]") {
  auto be = make_cpu_backend(1);
  json c = small_config("LlamaForCausalLM");
  SECTION("activation") {
    c["hidden_act"] = "relu";
    CHECK_THROWS_WITH(make_causal_lm(parse_model_config(c.dump(), "/m"), *be),
                      Contains("hidden_act \"relu\"") && Contains("gelu_pytorch_tanh"));
  }
  SECTION("unsupported rope type") {
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    CHECK_THROWS_WITH(make_causal_lm(parse_model_config(c.dump(), "/m"), *be),
                      Contains("\"yarn\"") && Contains("llama3"));
  }
  SECTION("tensor parallel size that does not divide the heads") {
    ParallelRank r;
    r.tp_size = 3;
    CHECK_THROWS_WITH(make_causal_lm(parse_model_config(c.dump(), "/m"), *be, r),
                      Contains("num_attention_heads (4)") && Contains("(3)"));
  }
  SECTION("forward before reserve, and too many tokens") {
    TempDir dir("calls");
    write_synthetic(dir.path(), c, 4, "F32");
    const ModelConfig cfg = load_model_config(dir.path());
    auto model = make_causal_lm(cfg, *be);
    model->load_weights(CheckpointReader::open(dir.path()));
    {
      PagedRunner runner(*be, *model, 4, 8, 1);
      PagedSeq s;
      CHECK_THROWS_WITH(runner.step({&s}, {{1, 2}}, false), Contains("before reserve"));
    }
    model->reserve(4, 2);
    PagedRunner runner(*be, *model, 4, 8, 1);
    PagedSeq s;
    CHECK_THROWS_WITH(runner.step({&s}, {{1, 2, 3, 4, 5}}, false), Contains("num_tokens 5"));
    PagedSeq s2;
    CHECK_THROWS_WITH(runner.step({&s2}, {{1, 2, 3}}, true), Contains("3 logits rows"));
    CHECK_THROWS_WITH(model->reserve(0, 1), Contains("max_tokens"));
    // A second reserve replaces the buffers; the model still runs.
    model->reserve(8, 8);
    PagedRunner again(*be, *model, 4, 8, 2);
    PagedSeq s3;
    CHECK(again.step({&s3}, {{1, 2, 3, 4, 5}}, true).size() == 5);
  }
}

TEST_CASE("llama family: tensor-parallel ranks load their slices", "[models]") {
  TempDir dir("tp");
  const json c = small_config("LlamaForCausalLM");
  write_synthetic(dir.path(), c, 5, "F32");
  const ModelConfig cfg = load_model_config(dir.path());
  const auto ck = CheckpointReader::open(dir.path());
  auto be = make_cpu_backend(1);
  for (int32_t tp : {2, 4}) {
    for (int32_t r = 0; r < tp; ++r) {
      ParallelRank rank;
      rank.tp_rank = r;
      rank.tp_size = tp;
      if (tp == 4) {  // 4 heads split 4 ways; 48 vocab rows and 40 intermediate rows do too
        auto model = make_causal_lm(cfg, *be, rank);
        CHECK(model->kv_cache_shape().num_kv_heads == 1);  // 2 KV heads replicated over 4 ranks
        model->load_weights(ck);
        continue;
      }
      auto model = make_causal_lm(cfg, *be, rank);
      const KVCacheShape s = model->kv_cache_shape();
      CHECK(s.num_kv_heads == 1);
      CHECK(s.num_layers == 2);
      CHECK(s.head_dim == 12);
      model->load_weights(ck);
      model->reserve(4, 4);
      PagedRunner runner(*be, *model, 4, 8, 1);
      PagedSeq seq;
      // Its forward needs the group's collectives (tests/models/test_parallel_runner.cpp runs
      // one); without them it says so.
      CHECK_THROWS_WITH(runner.step({&seq}, {{1, 2}}, false),
                        Contains("tensor_parallel_size 2") && Contains("set_collectives"));
    }
  }
}

TEST_CASE("llama family: pipeline stages hold their layers", "[models]") {
  json c = small_config("LlamaForCausalLM");
  c["num_hidden_layers"] = 5;
  c["tie_word_embeddings"] = true;
  TempDir dir("pp");
  write_synthetic(dir.path(), c, 6, "F32");
  const ModelConfig cfg = load_model_config(dir.path());
  const auto ck = CheckpointReader::open(dir.path());
  auto be = make_cpu_backend(1);
  // vLLM's split of 5 layers over 3 stages: 2, 2, 1 (the last stage also holds the head).
  const int32_t want[] = {2, 2, 1};
  for (int32_t s = 0; s < 3; ++s) {
    ParallelRank rank;
    rank.pp_rank = s;
    rank.pp_size = 3;
    auto model = make_causal_lm(cfg, *be, rank);
    CHECK(model->kv_cache_shape().num_layers == want[s]);
    model->load_weights(ck);  // the tied head on the last stage reads the embedding
  }
}

TEST_CASE("llama family: dummy weights are reproducible and usable", "[models]") {
  const ModelConfig cfg = parse_model_config(small_config("Qwen2ForCausalLM").dump(), "/dummy");
  auto be = make_cpu_backend(1);
  auto run = [&](uint64_t seed) {
    auto model = make_causal_lm(cfg, *be);
    model->init_dummy_weights(seed);
    model->reserve(8, 8);
    PagedRunner runner(*be, *model, 4, 8, 3);
    PagedSeq s;
    return runner.step({&s}, {{3, 1, 4, 1, 5}}, false)[0];
  };
  const auto a = run(7), b = run(7), c = run(8);
  CHECK(a == b);
  CHECK(a != c);
  for (float x : a) CHECK(std::isfinite(x));
}
