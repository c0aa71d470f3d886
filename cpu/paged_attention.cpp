#include "cpu/paged_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/vector_math.hpp"
#include "runtime/backend/op_checks.hpp"

namespace troupe::cpu {
namespace {

// Query rows of one sequence handled by one task: small enough that long prefills spread
// over the pool, large enough that decode batches are not all task overhead.
constexpr int32_t kRowsPerTask = 4;

// Rows [row_begin, row_end) of one sequence, for KV heads [kv_begin, kv_end) and their
// query heads. Several KV heads per task read each cached token's K/V row (all KV heads,
// contiguous in the cache) in one sweep instead of one strided slice per head.
struct Task {
  int32_t seq;
  int32_t kv_begin;
  int32_t kv_end;
  int32_t row_begin;  // within the sequence's query rows
  int32_t row_end;
};

// The shared rules (runtime/backend/op_checks.hpp) with float32 tensors and a block size
// (any positive one: the CPU kernel divides).
void check_shapes(const OpCheck& check, const Tensor& q, const Tensor& k_cache,
                  const Tensor& v_cache, const AttentionBatch& batch, const AttentionShape& shape,
                  const Tensor& out) {
  check.positive("head_dim", shape.head_dim);
  check.positive("block_size", shape.block_size);
  check.tensor("q", q, DType::f32, 2);
  check_attention(check, q, k_cache, v_cache, batch, shape, out);
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
    if (batch.num_prefill_seqs >= 0 && (s < batch.num_prefill_seqs) != (q_len >= 2))
      check.fail(
          "num_prefill_seqs = {} says sequences [0, {}) are those with two or more query "
          "tokens, but sequence {} has {}",
          batch.num_prefill_seqs, batch.num_prefill_seqs, s, q_len);
    if (seq_lens[s] < q_len)
      check.fail("seq_lens[{}] = {} is less than its {} query tokens", s, seq_lens[s], q_len);
    if (seq_lens[s] > batch.max_seq_len)
      check.fail("seq_lens[{}] = {} is more than max_seq_len = {}", s, seq_lens[s],
                 batch.max_seq_len);
    const int64_t used = (int64_t(seq_lens[s]) + block_size - 1) / block_size;
    if (used > max_blocks)
      check.fail("seq_lens[{}] = {} needs {} blocks of {}, block_tables {} has {} per sequence", s,
                 seq_lens[s], used, block_size, describe(batch.block_tables), max_blocks);
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
  const OpCheck check("attention", Device{DeviceKind::cpu, 0});
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

  // As many KV heads per task as still leaves ~4 tasks per thread (decode batches are short).
  int64_t row_tasks = 0;
  for (int32_t s = 0; s < batch.num_seqs; ++s)
    row_tasks += (qsl[s + 1] - qsl[s] + kRowsPerTask - 1) / kRowsPerTask;
  int32_t kv_per_task = num_kv_heads;
  while (kv_per_task > 1 &&
         row_tasks * ((num_kv_heads + kv_per_task - 1) / kv_per_task) < 4 * pool.size())
    kv_per_task = (kv_per_task + 1) / 2;
  std::vector<Task> tasks;
  for (int32_t s = 0; s < batch.num_seqs; ++s) {
    const int32_t q_len = qsl[s + 1] - qsl[s];
    for (int32_t kvh = 0; kvh < num_kv_heads; kvh += kv_per_task)
      for (int32_t r = 0; r < q_len; r += kRowsPerTask)
        tasks.push_back({s, kvh, std::min(num_kv_heads, kvh + kv_per_task), r,
                         std::min(q_len, r + kRowsPerTask)});
  }

  const int64_t kv_stride = int64_t(num_kv_heads) * d;  // floats per cached token
  pool.parallel_for(int64_t(tasks.size()), 1, [&](int64_t begin, int64_t end) {
    // Per thread: scores of the task's heads over all keys, then their value sums.
    thread_local std::vector<float> scores;
    thread_local std::vector<float> acc;
    thread_local std::vector<double> inv_sum;
    for (int64_t t = begin; t < end; ++t) {
      const Task& task = tasks[size_t(t)];
      const int32_t q_len = qsl[task.seq + 1] - qsl[task.seq];
      const int64_t context = seq_lens[task.seq] - q_len;  // cached tokens before this step
      const int32_t* table = tables + task.seq * max_blocks;
      const int64_t heads = int64_t(task.kv_end - task.kv_begin) * group;
      const int64_t k_offset = int64_t(task.kv_begin) * d;  // first KV head within a token row
      // Sized once per task for its longest row; plain pointers in the loops (thread_local
      // access goes through a TLS wrapper the compiler may not hoist).
      scores.resize(size_t(heads * (context + task.row_end)));
      acc.resize(size_t(heads * d));
      inv_sum.resize(size_t(heads));
      float* const sc = scores.data();
      float* const ac = acc.data();
      double* const inv = inv_sum.data();
      for (int32_t r = task.row_begin; r < task.row_end; ++r) {
        const int64_t n = context + r + 1;  // keys visible to this row (causal)
        const int64_t row = qsl[task.seq] + r;
        // Query head h of the task is global head kv_begin * group + h.
        const float* q_row = q_data + row * q_stride + k_offset * group;
        float* out_row = out_data + row * q_stride + k_offset * group;
        std::fill(ac, ac + heads * d, 0.0f);

        // Pass 1: sc[h, j] = scale * q_h . k_j(kv head of h).
        for (int64_t j0 = 0; j0 < n; j0 += bs) {
          const int64_t block = table[j0 / bs];
          const int64_t len = std::min(bs, n - j0);
          for (int64_t o = 0; o < len; ++o) {
            const float* k = k_data + (block * bs + o) * kv_stride + k_offset;
            for (int64_t h = 0; h < heads; ++h)
              sc[h * n + j0 + o] = dot(q_row + h * d, k + (h / group) * d, d) * scale;
          }
        }
        // Softmax weights (unnormalised), max subtracted.
        for (int64_t h = 0; h < heads; ++h) {
          float* sh = sc + h * n;
          const float m = *std::max_element(sh, sh + n);
          double sum = 0.0;
          for (int64_t j = 0; j < n; ++j) {
            sh[j] = std::exp(sh[j] - m);
            sum += sh[j];
          }
          inv[h] = 1.0 / sum;
        }
        // Pass 2: ac[h, :] = sum_j w[h, j] * v_j(kv head of h).
        for (int64_t j0 = 0; j0 < n; j0 += bs) {
          const int64_t block = table[j0 / bs];
          const int64_t len = std::min(bs, n - j0);
          for (int64_t o = 0; o < len; ++o) {
            const float* v = v_data + (block * bs + o) * kv_stride + k_offset;
            for (int64_t h = 0; h < heads; ++h)
              axpy(ac + h * d, sc[h * n + j0 + o], v + (h / group) * d, d);
          }
        }
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < d; ++i) out_row[h * d + i] = float(ac[h * d + i] * inv[h]);
      }
    }
  });
}

}  // namespace troupe::cpu
