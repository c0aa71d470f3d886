#include "runtime/api/progress_bar.hpp"

#include <unistd.h>

#include <string>

namespace troupe {

namespace {
std::string clock_text(double s) {
  const auto t = int64_t(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld", static_cast<long long>(t / 60),
                static_cast<long long>(t % 60));
  return buf;
}
}  // namespace

ProgressBar::ProgressBar(size_t total, bool enabled, std::FILE* out)
    : total_(total),
      enabled_(enabled && total > 0),
      tty_(isatty(fileno(out)) != 0),
      out_(out),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  if (enabled_ && tty_) draw(false);
}

void ProgressBar::advance(size_t prompt_tokens, size_t output_tokens) {
  ++done_;
  in_tokens_ += prompt_tokens;
  out_tokens_ += output_tokens;
  if (!enabled_ || !tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done_ < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(false);
}

void ProgressBar::finish() {
  if (!enabled_) return;
  draw(true);
  enabled_ = false;
}

void ProgressBar::draw(bool final_line) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed > 0 ? double(done_) / elapsed : 0.0;
  const double remaining = rate > 0 ? double(total_ - done_) / rate : 0.0;
  constexpr int kWidth = 20;
  const int filled = total_ ? int(double(kWidth) * double(done_) / double(total_)) : kWidth;
  std::string bar;
  for (int i = 0; i < kWidth; ++i) bar += i < filled ? "\u2588" : " ";
  std::fprintf(out_,
               "%sProcessed prompts: %3d%%|%s| %zu/%zu [%s<%s, %.2f it/s, in: %.0f tok/s, out: "
               "%.0f tok/s]%s",
               tty_ ? "\r" : "", total_ ? int(100.0 * double(done_) / double(total_)) : 100,
               bar.c_str(), done_, total_, clock_text(elapsed).c_str(),
               clock_text(remaining).c_str(), rate,
               elapsed > 0 ? double(in_tokens_) / elapsed : 0.0,
               elapsed > 0 ? double(out_tokens_) / elapsed : 0.0, final_line ? "\n" : "");
  std::fflush(out_);
}

}  // namespace troupe
