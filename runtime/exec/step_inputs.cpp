#include "runtime/exec/step_inputs.hpp"

#include <algorithm>

#include "runtime/error.hpp"

namespace troupe {

StepInputLayout StepInputLayout::make(int32_t num_tokens, int32_t num_seqs, int32_t num_logits,
                                      int32_t max_blocks) {
  if (num_tokens < 1 || num_seqs < 1 || num_logits < 1 || max_blocks < 1)
    fail("step inputs: T = {}, S = {}, L = {} and max_blocks = {} must all be >= 1", num_tokens,
         num_seqs, num_logits, max_blocks);
  StepInputLayout l;
  l.num_tokens = num_tokens;
  l.num_seqs = num_seqs;
  l.num_logits = num_logits;
  l.max_blocks = max_blocks;
  const auto T = size_t(num_tokens), S = size_t(num_seqs);
  l.token_ids = 0;
  l.positions = T;
  l.slot_mapping = 2 * T;
  l.logits_indices = 3 * T;
  l.query_start_loc = l.logits_indices + size_t(num_logits);
  l.seq_lens = l.query_start_loc + S + 1;
  l.block_tables = l.seq_lens + S;
  l.total = l.block_tables + S * size_t(max_blocks);
  return l;
}

void fill_step_inputs(std::span<const SeqSlice> seqs, std::span<const int32_t> logits_rows,
                      int32_t block_size, const StepInputLayout& layout, std::span<int32_t> out) {
  if (out.size() < layout.total)
    fail("step inputs: {} int32s of room for a layout of {}", out.size(), layout.total);
  if (seqs.size() > size_t(layout.num_seqs) || logits_rows.size() > size_t(layout.num_logits))
    fail("step inputs: {} sequences and {} logits rows exceed the layout's {} and {}",
         seqs.size(), logits_rows.size(), layout.num_seqs, layout.num_logits);
  if (block_size < 1) fail("step inputs: block_size = {} must be >= 1", block_size);
  int32_t* ids = out.data() + layout.token_ids;
  int32_t* pos = out.data() + layout.positions;
  int32_t* slots = out.data() + layout.slot_mapping;
  int32_t* lidx = out.data() + layout.logits_indices;
  int32_t* qsl = out.data() + layout.query_start_loc;
  int32_t* seq_lens = out.data() + layout.seq_lens;
  int32_t* tables = out.data() + layout.block_tables;
  const auto T = size_t(layout.num_tokens), S = size_t(layout.num_seqs);
  const auto max_blocks = size_t(layout.max_blocks);

  // Padding values first; the real entries overwrite their part.
  std::fill(ids, ids + T, 0);
  std::fill(pos, pos + T, 0);
  std::fill(slots, slots + T, -1);
  std::fill(seq_lens, seq_lens + S, 0);
  std::fill(tables, tables + S * max_blocks, 0);

  size_t t = 0;
  qsl[0] = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqSlice& s = seqs[i];
    const int32_t end = s.start + s.count;
    if (s.start < 0 || s.count < 0 || size_t(end) > s.tokens.size())
      fail("step inputs: sequence {} computes positions [{}, {}) of its {} tokens", i, s.start,
           end, s.tokens.size());
    if (t + size_t(s.count) > T)
      fail("step inputs: more than the layout's {} tokens", T);
    const auto blocks = size_t((end + block_size - 1) / block_size);
    if (blocks > s.block_table.size() || blocks > max_blocks)
      fail("step inputs: sequence {} needs {} blocks; its table has {}, the layout {}", i, blocks,
           s.block_table.size(), max_blocks);
    for (int32_t p = s.start; p < end; ++p, ++t) {
      ids[t] = s.tokens[size_t(p)];
      pos[t] = p;
      slots[t] = s.block_table[size_t(p / block_size)] * block_size + p % block_size;
    }
    qsl[i + 1] = int32_t(t);
    seq_lens[i] = end;
    std::copy_n(s.block_table.begin(), blocks, tables + i * max_blocks);
  }
  // Padding sequences own no query rows.
  for (size_t i = seqs.size(); i < S; ++i) qsl[i + 1] = int32_t(t);

  for (size_t r = 0; r < size_t(layout.num_logits); ++r) {
    if (r < logits_rows.size()) {
      if (logits_rows[r] < 0 || size_t(logits_rows[r]) >= t)
        fail("step inputs: logits row {} is not one of the step's {} tokens", logits_rows[r], t);
      lidx[r] = logits_rows[r];
    } else {
      lidx[r] = int32_t(std::min(r, T - 1));
    }
  }
}

ForwardInputs forward_inputs(const Tensor& inputs, const StepInputLayout& layout,
                             int32_t max_query_len, int32_t max_seq_len) {
  if (size_t(inputs.numel()) < layout.total)
    fail("step inputs: {} holds fewer than the layout's {} int32s", describe(inputs),
         layout.total);
  const Tensor all = inputs.view({inputs.numel()});
  const auto part = [&](size_t offset, int64_t n) {
    return all.rows(int64_t(offset), int64_t(offset) + n);
  };
  const int64_t T = layout.num_tokens, S = layout.num_seqs;
  ForwardInputs in;
  in.token_ids = part(layout.token_ids, T);
  in.positions = part(layout.positions, T);
  in.slot_mapping = part(layout.slot_mapping, T);
  in.logits_indices = part(layout.logits_indices, layout.num_logits);
  in.attention.query_start_loc = part(layout.query_start_loc, S + 1);
  in.attention.seq_lens = part(layout.seq_lens, S);
  in.attention.block_tables =
      part(layout.block_tables, S * layout.max_blocks).view({S, int64_t(layout.max_blocks)});
  in.attention.num_seqs = layout.num_seqs;
  in.attention.max_query_len = max_query_len;
  in.attention.max_seq_len = max_seq_len;
  in.num_tokens = layout.num_tokens;
  return in;
}

}  // namespace troupe
