#include "runtime/models/weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "runtime/error.hpp"

namespace troupe {

namespace {

// Converts n elements; the source may be unaligned (safetensors data offsets need not be), so
// it goes through an aligned scratch buffer in chunks.
void convert_span(const unsigned char* src, DType src_type, unsigned char* dst, DType dst_type,
                  size_t n) {
  const size_t ss = dtype_size(src_type), ds = dtype_size(dst_type);
  if (reinterpret_cast<uintptr_t>(src) % ss == 0) {
    convert_floats(src, src_type, dst, dst_type, n);
    return;
  }
  constexpr size_t chunk = 4096;
  alignas(8) unsigned char scratch[chunk * 8];
  for (size_t i = 0; i < n; i += chunk) {
    const size_t m = std::min(chunk, n - i);
    std::memcpy(scratch, src + i * ss, m * ss);
    convert_floats(scratch, src_type, dst + i * ds, dst_type, m);
  }
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Sum of four 16-bit uniforms (Irwin-Hall), centred and scaled to unit variance: one hash per
// value, close enough to a normal for dummy weights and much cheaper than Box-Muller.
float pseudo_normal(uint64_t key, uint64_t i) {
  const uint64_t h = splitmix64(key ^ (i * 0xD1B54A32D192ED03ull));
  const double sum = double(h & 0xffff) + double((h >> 16) & 0xffff) + double((h >> 32) & 0xffff) +
                     double(h >> 48) + 2.0;  // + 4 * 0.5
  return float((sum / 65536.0 - 2.0) * 1.7320508075688772);
}

}  // namespace

SliceRange shard_range(const WeightSpec& spec, const ParallelRank& rank) {
  if (spec.shape.empty()) fail("weight '{}' has no dimensions", spec.name);
  if (rank.tp_size < 1 || rank.tp_rank < 0 || rank.tp_rank >= rank.tp_size)
    fail("tp_rank {} is outside [0, tp_size {})", rank.tp_rank, rank.tp_size);
  SliceRange r;
  if (spec.shard == Shard::replicated || rank.tp_size == 1) {
    r.dim = spec.shard == Shard::cols ? 1 : 0;
    r.end = spec.shape[size_t(r.dim)];
    return r;
  }
  r.dim = spec.shard == Shard::rows ? 0 : 1;
  if (size_t(r.dim) >= spec.shape.size())
    fail("weight '{}' {} has no dimension {} to split by {}", spec.name, shape_string(spec.shape),
         r.dim, r.dim == 0 ? "rows" : "columns");
  const int64_t n = spec.shape[size_t(r.dim)];
  const int64_t parts = spec.parts > 0 ? std::min<int64_t>(spec.parts, rank.tp_size) : rank.tp_size;
  if (rank.tp_size % parts != 0 || n % parts != 0)
    fail("weight '{}' {}: dimension {} ({}) cannot be split into {} parts for tp_size {}",
         spec.name, shape_string(spec.shape), r.dim, n, parts, rank.tp_size);
  const int64_t part = rank.tp_rank / (rank.tp_size / parts);
  r.begin = part * (n / parts);
  r.end = r.begin + n / parts;
  return r;
}

std::vector<int64_t> local_shape(const WeightSpec& spec, const ParallelRank& rank) {
  const SliceRange r = shard_range(spec, rank);
  std::vector<int64_t> s = spec.shape;
  s[size_t(r.dim)] = r.end - r.begin;
  return s;
}

void check_weight(const TensorInfo& t, const WeightSpec& spec) {
  if (t.shape != spec.shape)
    fail("weight '{}' has shape {} in the checkpoint; the config implies {}", spec.name,
         shape_string(t.shape), shape_string(spec.shape));
  if (!is_float(t.dtype))
    fail("weight '{}' is stored as {}; a float type (float32, float16, bfloat16) is required",
         spec.name, dtype_name(t.dtype));
}

void copy_shard(const TensorInfo& t, const WeightSpec& spec, const ParallelRank& rank, void* dst,
                DType dst_type) {
  check_weight(t, spec);
  const SliceRange r = shard_range(spec, rank);
  const size_t ss = dtype_size(t.dtype), ds = dtype_size(dst_type);
  const auto* src = static_cast<const unsigned char*>(t.data);
  auto* out = static_cast<unsigned char*>(dst);
  const int64_t rows = spec.shape[0];
  const int64_t row_elems = t.numel() / std::max<int64_t>(rows, 1);
  if (r.dim == 0) {
    const size_t n = size_t((r.end - r.begin) * row_elems);
    convert_span(src + size_t(r.begin * row_elems) * ss, t.dtype, out, dst_type, n);
    return;
  }
  // Column slice: a strided copy, one row at a time.
  const int64_t w = r.end - r.begin;
  for (int64_t i = 0; i < rows; ++i)
    convert_span(src + size_t(i * row_elems + r.begin) * ss, t.dtype, out + size_t(i * w) * ds,
                 dst_type, size_t(w));
}

void fill_dummy_shard(uint64_t seed, const WeightSpec& spec, const ParallelRank& rank, double mean,
                      double std, void* dst, DType dst_type) {
  if (!is_float(dst_type))
    fail("dummy weight '{}': {} is not a float type", spec.name, dtype_name(dst_type));
  const SliceRange r = shard_range(spec, rank);
  const uint64_t key = splitmix64(seed ^ fnv1a(spec.name));
  int64_t full_numel = 1;
  for (int64_t d : spec.shape) full_numel *= d;
  const int64_t rows = spec.shape[0];
  const int64_t row_elems = full_numel / std::max<int64_t>(rows, 1);
  // Local element (i, j) of the slice is full element (i, begin + j) or (begin + i, j).
  const int64_t local_rows = r.dim == 0 ? r.end - r.begin : rows;
  const int64_t local_cols = r.dim == 0 ? row_elems : r.end - r.begin;
  auto* out = static_cast<unsigned char*>(dst);
  const size_t ds = dtype_size(dst_type);

  auto work = [&](int64_t row0, int64_t row1) {
    std::vector<float> tmp(static_cast<size_t>(local_cols));
    for (int64_t i = row0; i < row1; ++i) {
      const int64_t full_row = r.dim == 0 ? r.begin + i : i;
      const int64_t col0 = r.dim == 0 ? 0 : r.begin;
      const uint64_t base = uint64_t(full_row * row_elems + col0);
      for (int64_t j = 0; j < local_cols; ++j)
        tmp[size_t(j)] = float(mean + std * double(pseudo_normal(key, base + uint64_t(j))));
      convert_floats(tmp.data(), DType::f32, out + size_t(i * local_cols) * ds, dst_type,
                     size_t(local_cols));
    }
  };
  // Big weights (an 8B model's embedding is half a billion values) are split over threads.
  const int64_t total = local_rows * local_cols;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int64_t nthreads = std::min<int64_t>(int64_t(hw), std::max<int64_t>(1, total / (1 << 20)));
  if (nthreads <= 1 || local_rows < nthreads) {
    work(0, local_rows);
    return;
  }
  std::vector<std::thread> threads;
  const int64_t per = (local_rows + nthreads - 1) / nthreads;
  for (int64_t t = 0; t < nthreads; ++t) {
    const int64_t a = t * per, b = std::min(local_rows, a + per);
    if (a < b) threads.emplace_back(work, a, b);
  }
  for (auto& th : threads) th.join();
}

}  // namespace troupe
