#include "cuda/op_profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace troupe::cuda {

namespace {
constexpr size_t kResolveEvery = 4096;  // pending scopes before the host reads their times
}

OpProfiler::~OpProfiler() {
  cudaStreamSynchronize(stream_);
  const std::string table = report();
  if (!table.empty()) std::fprintf(stderr, "%s", table.c_str());
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::event() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return e;
}

OpProfiler::Scope::Scope(OpProfiler* p, std::string label)
    : p_(p), start_(std::chrono::steady_clock::now()) {
  if (p_ == nullptr) return;
  Pending pd;
  pd.top_level = p_->stack_.empty();
  pd.label = pd.top_level ? std::move(label) : p_->stack_.back() + " > " + label;
  pd.begin = p_->event();
  pd.end = p_->event();
  if (pd.begin == nullptr || pd.end == nullptr) {
    p_ = nullptr;
    return;
  }
  cudaEventRecord(pd.begin, p_->stream_);
  p_->stack_.push_back(pd.label);
  index_ = p_->pending_.size();
  p_->pending_.push_back(std::move(pd));
}

OpProfiler::Scope::~Scope() {
  if (p_ == nullptr) return;
  cudaEventRecord(p_->pending_[index_].end, p_->stream_);
  p_->pending_[index_].host_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  p_->stack_.pop_back();
  if (p_->stack_.empty() && p_->pending_.size() >= kResolveEvery) p_->resolve();
}

void OpProfiler::resolve() {
  for (Pending& pd : pending_) {
    float ms = 0;
    if (cudaEventSynchronize(pd.end) == cudaSuccess &&
        cudaEventElapsedTime(&ms, pd.begin, pd.end) == cudaSuccess) {
      Stat& s = stats_[pd.label];
      ++s.calls;
      s.ms += ms;
      s.host_ms += pd.host_ms;
      if (pd.top_level) top_level_ms_ += ms;
    } else {
      cudaGetLastError();
    }
    free_.push_back(pd.begin);
    free_.push_back(pd.end);
  }
  pending_.clear();
}

std::string OpProfiler::rows_bucket(int64_t rows) {
  if (rows <= 1) return "1";
  if (rows <= 8) return "2-8";
  if (rows <= 64) return "9-64";
  if (rows <= 512) return "65-512";
  if (rows <= 4096) return "513-4096";
  return ">4096";
}

std::string OpProfiler::report() {
  if (stack_.empty()) resolve();
  if (stats_.empty()) return {};
  std::vector<std::pair<std::string, Stat>> rows(stats_.begin(), stats_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::string out = fmt::format(
      "TROUPE_OP_PROFILE: GPU time per op outside graphs, {:.1f} ms in all (ops inside a fused "
      "op are listed as 'parent > op' and also counted in the parent; host us: time inside "
      "the op's call on the host)\n{:<64} {:>9} {:>11} {:>10} {:>7} {:>10}\n",
      top_level_ms_, "op [rows]", "calls", "total ms", "mean us", "share", "host us");
  for (const auto& [label, s] : rows)
    out += fmt::format("{:<64} {:>9} {:>11.2f} {:>10.2f} {:>6.1f}% {:>10.2f}\n", label, s.calls,
                       s.ms, 1e3 * s.ms / double(s.calls),
                       top_level_ms_ > 0 ? 100.0 * s.ms / top_level_ms_ : 0.0,
                       1e3 * s.host_ms / double(s.calls));
  return out;
}

}  // namespace troupe::cuda
