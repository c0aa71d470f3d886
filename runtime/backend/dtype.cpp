#include "runtime/backend/dtype.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>

namespace troupe {

std::optional<DType> parse_dtype(std::string_view s) {
  std::string l(s);
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l.starts_with("torch.")) l = l.substr(6);
  if (l == "float32" || l == "float" || l == "f32" || l == "fp32") return DType::f32;
  if (l == "float16" || l == "half" || l == "f16" || l == "fp16") return DType::f16;
  if (l == "bfloat16" || l == "bf16") return DType::bf16;
  if (l == "int32" || l == "i32") return DType::i32;
  if (l == "int64" || l == "i64") return DType::i64;
  if (l == "uint8" || l == "u8") return DType::u8;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --exp;
      }
      man &= 0x3ffu;
      u = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to inf (>= 65520)
  if (abs < 0x38800000u) {                        // result is subnormal or zero
    if (abs < 0x33000000u) return sign;           // < 2^-25 rounds to 0
    const uint32_t exp = abs >> 23;
    const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp) - 1 ... gives 13+..24
    const uint32_t half_man = man >> (shift - 0);
    // round to nearest even on the bits shifted out
    const uint32_t rem = man & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t r = half_man;
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return sign | uint16_t(r);
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // nearest even on 13 dropped bits
  r -= 0x38000000u;                                 // rebias 127 -> 15
  return sign | uint16_t(r >> 13);
}

namespace {
float load_float(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: throw std::invalid_argument("convert_floats: not a float type");
  }
}
}  // namespace

void convert_floats(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  if (src_type == dst_type) {
    std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  switch (dst_type) {
    case DType::f32: {
      auto* d = static_cast<float*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = load_float(src, src_type, i);
      return;
    }
    case DType::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(load_float(src, src_type, i));
      return;
    }
    case DType::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(load_float(src, src_type, i));
      return;
    }
    default: throw std::invalid_argument("convert_floats: not a float type");
  }
}

}  // namespace troupe
