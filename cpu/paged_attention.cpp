#include "cpu/paged_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/op_checks.hpp"
#include "cpu/vector_math.hpp"

namespace troupe::cpu {
namespace {

// Query rows of one sequence handled by one task: small enough that long prefills spread
// over the pool, large enough that decode batches are not all task overhead.
constexpr int32_t kRowsPerTask = 4;

struct Task {
  int32_t seq;
  int32_t kv_head;
  int32_t row_begin;  // within the sequence's query rows
  int32_t row_end;
};

void check_shapes(const OpCheck& check, const Tensor& q, const Tensor& k_cache,
                  const Tensor& v_cache, const AttentionBatch& batch,
                  const AttentionShape& shape, const Tensor& out) {
  check.positive("num_heads", shape.num_heads);
  check.positive("num_kv_heads", shape.num_kv_heads);
  check.positive("head_dim", shape.head_dim);
  check.positive("block_size", shape.block_size);
  if (shape.num_heads % shape.num_kv_heads != 0)
    check.fail("num_heads = {} is not a multiple of num_kv_heads = {}", shape.num_heads,
               shape.num_kv_heads);
  if (!std::isfinite(shape.scale)) check.fail("scale = {} must be finite", shape.scale);

  check.tensor("q", q, DType::f32, 2);
  check.dim("q", q, 1, int64_t(shape.num_heads) * shape.head_dim, "num_heads * head_dim");
  check.same_shape("out", out, "q", q);
  check.tensor("k_cache", k_cache, DType::f32, 4);
  check.dim("k_cache", k_cache, 1, shape.block_size, "block_size");
  check.dim("k_cache", k_cache, 2, shape.num_kv_heads, "num_kv_heads");
  check.dim("k_cache", k_cache, 3, shape.head_dim, "head_dim");
  check.same_shape("v_cache", v_cache, "k_cache", k_cache);

  if (batch.num_seqs < 0) check.fail("num_seqs = {} must be >= 0", batch.num_seqs);
  const int64_t s = batch.num_seqs;
  check.tensor("query_start_loc", batch.query_start_loc, DType::i32, 1);
  check.dim("query_start_loc", batch.query_start_loc, 0, s + 1, "num_seqs + 1");
  check.tensor("seq_lens", batch.seq_lens, DType::i32, 1);
  check.dim("seq_lens", batch.seq_lens, 0, s, "num_seqs");
  check.tensor("block_tables", batch.block_tables, DType::i32, 2);
  check.dim("block_tables", batch.block_tables, 0, s, "num_seqs");
}

// Reads the metadata the kernel will follow, so a bad index is an error, not a wild read.
void check_indices(const OpCheck& check, const Tensor& q, const Tensor& k_cache,
                   const AttentionBatch& batch, int32_t block_size) {
  const auto* qsl = batch.query_start_loc.as<const int32_t>();
  const auto* seq_lens = batch.seq_lens.as<const int32_t>();
  const auto* tables = batch.block_tables.as<const int32_t>();
  const int64_t max_blocks = batch.block_tables.dim(1);
  const int64_t num_blocks = k_cache.dim(0);
  if (qsl[0] != 0) check.fail("query_start_loc[0] = {} must be 0", qsl[0]);
  for (int32_t s = 0; s < batch.num_seqs; ++s)
    if (qsl[s + 1] < qsl[s])
      check.fail("query_start_loc must not decrease: [{}] = {} > [{}] = {}", s, qsl[s], s + 1,
                 qsl[s + 1]);
  if (qsl[batch.num_seqs] > q.dim(0))
    check.fail("query_start_loc[{}] = {} is more than the {} rows of q {}", batch.num_seqs,
               qsl[batch.num_seqs], q.dim(0), describe(q));
  for (int32_t s = 0; s < batch.num_seqs; ++s) {
    const int32_t q_len = qsl[s + 1] - qsl[s];
    if (q_len > batch.max_query_len)
      check.fail("sequence {} has {} query tokens, more than max_query_len = {}", s, q_len,
                 batch.max_query_len);
    if (seq_lens[s] < q_len)
      check.fail("seq_lens[{}] = {} is less than its {} query tokens", s, seq_lens[s], q_len);
    if (seq_lens[s] > batch.max_seq_len)
      check.fail("seq_lens[{}] = {} is more than max_seq_len = {}", s, seq_lens[s],
                 batch.max_seq_len);
    const int64_t used = (int64_t(seq_lens[s]) + block_size - 1) / block_size;
    if (used > max_blocks)
      check.fail("seq_lens[{}] = {} needs {} blocks of {}, block_tables {} has {} per sequence",
                 s, seq_lens[s], used, block_size, describe(batch.block_tables), max_blocks);
    for (int64_t b = 0; b < used; ++b) {
      const int32_t block = tables[s * max_blocks + b];
      if (block < 0 || block >= num_blocks)
        check.fail("block_tables[{}, {}] = {} is outside the cache's blocks [0, {})", s, b, block,
                   num_blocks);
    }
  }
}

}  // namespace

void paged_attention(ThreadPool& pool, const Tensor& q, const Tensor& k_cache,
                     const Tensor& v_cache, const AttentionBatch& batch,
                     const AttentionShape& shape, const Tensor& out) {
  const OpCheck check("attention");
  check_shapes(check, q, k_cache, v_cache, batch, shape, out);
  check_indices(check, q, k_cache, batch, shape.block_size);

  const auto* qsl = batch.query_start_loc.as<const int32_t>();
  const auto* seq_lens = batch.seq_lens.as<const int32_t>();
  const auto* tables = batch.block_tables.as<const int32_t>();
  const int64_t max_blocks = batch.block_tables.dim(1);
  const int32_t num_kv_heads = shape.num_kv_heads;
  const int32_t group = shape.num_heads / num_kv_heads;  // query heads per KV head
  const int64_t d = shape.head_dim;
  const int64_t bs = shape.block_size;
  const int64_t q_stride = int64_t(shape.num_heads) * d;  // floats per token row
  const float scale = shape.scale;
  const float* q_data = q.as<const float>();
  const float* k_data = k_cache.as<const float>();
  const float* v_data = v_cache.as<const float>();
  float* out_data = out.as<float>();

  // Padding rows get zeros so that they hold no stale values.
  const int64_t used_rows = qsl[batch.num_seqs];
  if (used_rows < q.dim(0))
    std::memset(out_data + used_rows * q_stride, 0,
                size_t(q.dim(0) - used_rows) * size_t(q_stride) * sizeof(float));

  std::vector<Task> tasks;
  for (int32_t s = 0; s < batch.num_seqs; ++s) {
    const int32_t q_len = qsl[s + 1] - qsl[s];
    for (int32_t kvh = 0; kvh < num_kv_heads; ++kvh)
      for (int32_t r = 0; r < q_len; r += kRowsPerTask)
        tasks.push_back({s, kvh, r, std::min(q_len, r + kRowsPerTask)});
  }

  pool.parallel_for(int64_t(tasks.size()), 1, [&](int64_t begin, int64_t end) {
    // Per thread: scores of the group's heads over all keys, then their value sums.
    thread_local std::vector<float> scores;
    thread_local std::vector<float> acc;
    thread_local std::vector<double> inv_sum;
    for (int64_t t = begin; t < end; ++t) {
      const Task& task = tasks[size_t(t)];
      const int32_t q_len = qsl[task.seq + 1] - qsl[task.seq];
      const int64_t context = seq_lens[task.seq] - q_len;  // cached tokens before this step
      const int32_t* table = tables + task.seq * max_blocks;
      for (int32_t r = task.row_begin; r < task.row_end; ++r) {
        const int64_t n = context + r + 1;  // keys visible to this row (causal)
        const int64_t row = qsl[task.seq] + r;
        const float* q_row = q_data + row * q_stride + int64_t(task.kv_head) * group * d;
        float* out_row = out_data + row * q_stride + int64_t(task.kv_head) * group * d;
        scores.resize(size_t(group * n));
        acc.assign(size_t(group * d), 0.0f);

        // Pass 1: scores[g, j] = scale * q_g . k_j, one read of each key for the whole group.
        for (int64_t j0 = 0; j0 < n; j0 += bs) {
          const int64_t block = table[j0 / bs];
          const int64_t len = std::min(bs, n - j0);
          for (int64_t o = 0; o < len; ++o) {
            const float* k = k_data + ((block * bs + o) * num_kv_heads + task.kv_head) * d;
            for (int32_t g = 0; g < group; ++g)
              scores[size_t(g * n + j0 + o)] = dot(q_row + g * d, k, d) * scale;
          }
        }
        // Softmax weights (unnormalised), max subtracted.
        inv_sum.resize(size_t(group));
        for (int32_t g = 0; g < group; ++g) {
          float* sg = scores.data() + g * n;
          const float m = *std::max_element(sg, sg + n);
          double sum = 0.0;
          for (int64_t j = 0; j < n; ++j) {
            sg[j] = std::exp(sg[j] - m);
            sum += sg[j];
          }
          inv_sum[size_t(g)] = 1.0 / sum;
        }
        // Pass 2: acc[g, :] = sum_j w[g, j] * v_j, one read of each value for the group.
        for (int64_t j0 = 0; j0 < n; j0 += bs) {
          const int64_t block = table[j0 / bs];
          const int64_t len = std::min(bs, n - j0);
          for (int64_t o = 0; o < len; ++o) {
            const float* v = v_data + ((block * bs + o) * num_kv_heads + task.kv_head) * d;
            for (int32_t g = 0; g < group; ++g)
              axpy(acc.data() + g * d, scores[size_t(g * n + j0 + o)], v, d);
          }
        }
        for (int32_t g = 0; g < group; ++g)
          for (int64_t i = 0; i < d; ++i)
            out_row[g * d + i] = float(acc[size_t(g * d + i)] * inv_sum[size_t(g)]);
      }
    }
  });
}

}  // namespace troupe::cpu
