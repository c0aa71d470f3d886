#include "runtime/models/rope.hpp"

#include <cmath>
#include <numbers>

#include "runtime/error.hpp"

namespace troupe {

namespace {

float f32(double x) {
  return static_cast<float>(x);
}

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& c, int32_t rotary_dim) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0)
    fail("rotary_dim {} must be a positive even number", rotary_dim);
  const auto& s = c.rope_scaling;
  if (!s.type.empty() && s.type != "linear" && s.type != "llama3")
    fail("{}: rope type \"{}\" is not supported (supported: default, linear, llama3)",
         (c.dir / "config.json").string(), s.type);

  const size_t half = size_t(rotary_dim / 2);
  std::vector<float> inv(half);
  const float base = f32(c.rope_theta);
  for (size_t i = 0; i < half; ++i) {
    const float exponent = f32(double(2 * i) / double(rotary_dim));  // arange(...).float() / d
    const float power = f32(std::pow(double(base), double(exponent)));
    inv[i] = f32(1.0 / double(power));
  }

  if (s.type == "linear") {
    for (auto& f : inv) f = f32(double(f) / s.factor);
  } else if (s.type == "llama3") {
    // Wavelengths shorter than original/high_freq_factor keep their frequency, longer than
    // original/low_freq_factor are divided by factor, and the band between is blended.
    const double old_len = double(s.original_max_position_embeddings);
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    for (auto& f : inv) {
      const float wavelen = f32(2.0 * std::numbers::pi / double(f));
      if (double(wavelen) > low_wavelen) {
        f = f32(double(f) / s.factor);
      } else if (!(double(wavelen) < high_wavelen)) {
        const float smooth = f32((old_len / double(wavelen) - s.low_freq_factor) /
                                 (s.high_freq_factor - s.low_freq_factor));
        f = f32((1.0 - double(smooth)) * double(f) / s.factor + double(smooth) * double(f));
      }
    }
  }
  return inv;
}

int64_t rope_max_positions(const ModelConfig& c) {
  if (c.rope_scaling.type == "linear") {
    const double n = std::ceil(double(c.max_position_embeddings) * c.rope_scaling.factor);
    // Converted only below 2^62 (casting 1e300 to int64 is undefined).
    if (!(n < 0x1p62))
      fail(
          "{}: max_position_embeddings {} x rope_scaling factor {} is {} positions: beyond any "
          "position table",
          (c.dir / "config.json").string(), c.max_position_embeddings, c.rope_scaling.factor, n);
    return int64_t(n);
  }
  return c.max_position_embeddings;
}

std::vector<float> rope_cos_sin_table(const ModelConfig& c, int32_t rotary_dim,
                                      int64_t max_positions) {
  const std::vector<float> inv = rope_inv_freq(c, rotary_dim);
  const size_t half = inv.size();
  std::vector<float> table(size_t(max_positions) * size_t(rotary_dim));
  for (int64_t p = 0; p < max_positions; ++p) {
    float* row = table.data() + size_t(p) * size_t(rotary_dim);
    for (size_t i = 0; i < half; ++i) {
      const float angle = f32(double(float(p)) * double(inv[i]));  // float32 product, as HF
      row[i] = f32(std::cos(double(angle)));
      row[half + i] = f32(std::sin(double(angle)));
    }
  }
  return table;
}

}  // namespace troupe
