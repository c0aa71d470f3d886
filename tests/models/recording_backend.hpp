// A backend that records graphs on the CPU, for testing the CUDA-graph paths without a GPU:
// it wraps another backend and, inside capture(), stores each op with its arguments (tensor
// views, host-side values) instead of running it; replay() runs the stored ops again on the
// inner backend, reading whatever the buffers hold then. That is a CUDA graph's contract
// (Backend::capture): same buffers, same shapes and host-side arguments, new values. Like
// CUDA, upload, download, synchronize, allocate, sample and swaps throw while recording.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "runtime/backend/backend.hpp"
#include "runtime/error.hpp"

namespace troupe::testing {

class RecordingBackend : public Backend {
 public:
  explicit RecordingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}

  bool fail_captures = false;  // capture() throws troupe::Error, as a failed CUDA capture does
  int captures = 0;  // capture() calls that recorded a graph
  int replays = 0;   // graph replays
  int ops_run = 0;   // ops run on the inner backend (eagerly or by replays)

  [[nodiscard]] std::string name() const override { return in_->name() + " (recording)"; }
  [[nodiscard]] Device device() const override { return in_->device(); }
  [[nodiscard]] DType compute_dtype(DType r) const override { return in_->compute_dtype(r); }
  [[nodiscard]] Buffer allocate(size_t bytes) override {
    not_recording("allocate");
    return in_->allocate(bytes);
  }
  void upload(const Tensor& d, const void* h, size_t n) override {
    not_recording("upload");
    in_->upload(d, h, n);
  }
  void download(void* h, const Tensor& s, size_t n) override {
    not_recording("download");
    in_->download(h, s, n);
  }
  void copy(const Tensor& d, const Tensor& s) override {
    op([=, this] { in_->copy(d, s); });
  }
  void synchronize() override {
    not_recording("synchronize");
    in_->synchronize();
  }
  [[nodiscard]] MemoryInfo memory_info() const override { return in_->memory_info(); }
  [[nodiscard]] Buffer allocate_host(size_t bytes) override { return in_->allocate_host(bytes); }
  void swap_blocks(const Tensor& d, const Tensor& s, std::span<const BlockCopy> p) override {
    not_recording("swap_blocks");
    in_->swap_blocks(d, s, p);
  }
  void embedding(const Tensor& i, const Tensor& t, const Tensor& o) override {
    op([=, this] { in_->embedding(i, t, o); });
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& o) override {
    op([=, this] { in_->rms_norm(x, w, eps, o); });
  }
  void add_rms_norm(const Tensor& r, const Tensor& x, const Tensor& w, float eps,
                    const Tensor& o) override {
    op([=, this] { in_->add_rms_norm(r, x, w, eps, o); });
  }
  void linear(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& o) override {
    const std::optional<Tensor> bias = b ? std::optional<Tensor>(*b) : std::nullopt;
    op([=, this] { in_->linear(x, w, bias ? &*bias : nullptr, o); });
  }
  void add(const Tensor& r, const Tensor& x) override {
    op([=, this] { in_->add(r, x); });
  }
  // The fused ops keep Backend's defaults: their sequences come through the ops above.
  [[nodiscard]] bool fuses_norm_and_add_into_linear(int64_t rows) const override {
    return in_->fuses_norm_and_add_into_linear(rows);
  }
  void rope(const Tensor& q, const Tensor& k, const Tensor& p, const Tensor& cs, int32_t d,
            int32_t rd, RopeStyle st) override {
    op([=, this] { in_->rope(q, k, p, cs, d, rd, st); });
  }
  void write_kv(const Tensor& k, const Tensor& v, const Tensor& kc, const Tensor& vc,
                const Tensor& sm) override {
    op([=, this] { in_->write_kv(k, v, kc, vc, sm); });
  }
  void attention(const Tensor& q, const Tensor& kc, const Tensor& vc, const AttentionBatch& b,
                 const AttentionShape& sh, const Tensor& o) override {
    op([=, this] { in_->attention(q, kc, vc, b, sh, o); });
  }
  void act_mul(GatedActivation a, const Tensor& gu, const Tensor& o) override {
    op([=, this] { in_->act_mul(a, gu, o); });
  }
  void gather_rows(const Tensor& x, const Tensor& i, const Tensor& o) override {
    op([=, this] { in_->gather_rows(x, i, o); });
  }
  std::vector<SampledToken> sample(const Tensor& l, std::span<const SamplingRow> r) override {
    not_recording("sample");
    return in_->sample(l, r);
  }
  void rope_qkv_to_cache(const Tensor& qkv, const Tensor& p, const Tensor& cs, int32_t d,
                         int32_t rd, RopeStyle st, int32_t nh, int32_t nkv, const Tensor& kc,
                         const Tensor& vc, const Tensor& sm, const Tensor& q) override {
    op([=, this] { in_->rope_qkv_to_cache(qkv, p, cs, d, rd, st, nh, nkv, kc, vc, sm, q); });
  }

  [[nodiscard]] bool can_capture() const override { return true; }
  [[nodiscard]] std::unique_ptr<CapturedGraph> capture(const std::function<void()>& ops) override {
    if (fail_captures) throw Error("recording backend: capture failed (as asked)");
    auto graph = std::make_unique<Graph>(*this);
    recording_ = &graph->ops;
    try {
      ops();
    } catch (...) {
      recording_ = nullptr;
      throw;
    }
    recording_ = nullptr;
    ++captures;
    return graph;
  }

 private:
  struct Graph final : CapturedGraph {
    explicit Graph(RecordingBackend& b) : owner(b) {}
    void replay() override {
      ++owner.replays;
      for (const auto& f : ops) {
        ++owner.ops_run;
        f();
      }
    }
    RecordingBackend& owner;
    std::vector<std::function<void()>> ops;
  };

  void op(std::function<void()> f) {
    if (recording_ != nullptr) {
      recording_->push_back(std::move(f));
      return;
    }
    ++ops_run;
    f();
  }
  void not_recording(const char* what) const {
    if (recording_ != nullptr)
      throw std::logic_error(std::string(what) + ": not allowed while recording a graph");
  }

  std::unique_ptr<Backend> in_;
  std::vector<std::function<void()>>* recording_ = nullptr;
};

}  // namespace troupe::testing
