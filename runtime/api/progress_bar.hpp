// A progress bar on stderr for batches of requests, in the manner of vLLM's tqdm line:
//   Processed prompts: 100%|██████████| 64/64 [00:03<00:00, 19.6 it/s, in: 410 tok/s, out: 5200 tok/s]
// On a terminal it redraws in place (at most every 100 ms); otherwise it prints only the
// final line, so logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace troupe {

class ProgressBar {
 public:
  ProgressBar(size_t total, bool enabled, std::FILE* out = stderr);
  /// One more request done, with its prompt and output token counts.
  void advance(size_t prompt_tokens, size_t output_tokens);
  void finish();

 private:
  void draw(bool final_line);

  size_t total_, done_ = 0;
  size_t in_tokens_ = 0, out_tokens_ = 0;
  bool enabled_, tty_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace troupe
