// A step's device inputs as one i32 array, so a step costs one upload: how the scheduled
// sequences become token ids, positions, KV slots, logits rows and the attention metadata.
//
// The same builder makes the exact-size inputs of an eager step and the padded inputs of a
// decode step run under a CUDA graph (a larger layout: the graph's fixed batch size and block
// table width). Padding is chosen so that every op either skips it or computes a row nobody
// reads:
// - tokens past the real ones: id 0, position 0, slot -1 (write_kv / rope_qkv_to_cache skip
//   negative slots, so no KV is written);
// - sequences past the real ones: no query rows (their query_start_loc entries stay at the
//   real token count) and seq_len 0, so attention reads no keys for them and zeroes the
//   padding rows, which belong to no sequence;
// - block table entries past a sequence's blocks: 0, a valid block that is never read;
// - logits indices past the wanted rows: row min(i, T - 1), whose logits are ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/backend/tensor.hpp"
#include "runtime/models/model.hpp"

namespace troupe {

/// One scheduled sequence, as the input builder reads it.
struct SeqSlice {
  std::span<const int32_t> tokens;       // every token of the sequence so far
  std::span<const int32_t> block_table;  // its physical blocks, in logical order
  int32_t start = 0;                     // first position computed this step
  int32_t count = 0;                     // positions computed this step
};

/// Shapes of a step's inputs and where each sits in the array (offsets in int32 elements):
/// token_ids, positions, slot_mapping [T]; logits_indices [L]; query_start_loc [S + 1];
/// seq_lens [S]; block_tables [S, max_blocks].
struct StepInputLayout {
  int32_t num_tokens = 0;  // T
  int32_t num_seqs = 0;    // S
  int32_t num_logits = 0;  // L
  int32_t max_blocks = 0;  // block table columns
  size_t token_ids = 0, positions = 0, slot_mapping = 0, logits_indices = 0;
  size_t query_start_loc = 0, seq_lens = 0, block_tables = 0;
  size_t total = 0;  // int32 elements in all

  /// Throws troupe::Error unless T, S, L and max_blocks are all >= 1.
  [[nodiscard]] static StepInputLayout make(int32_t num_tokens, int32_t num_seqs,
                                            int32_t num_logits, int32_t max_blocks);
};

/// Writes the inputs of `seqs` (in order; their tokens concatenated) with the logits rows
/// `logits_rows` (indices into the step's token rows) into out[0, layout.total), padding
/// whatever the layout has beyond them as the header says. Throws troupe::Error when they do
/// not fit the layout or a block table is shorter than its positions need.
void fill_step_inputs(std::span<const SeqSlice> seqs, std::span<const int32_t> logits_rows,
                      int32_t block_size, const StepInputLayout& layout, std::span<int32_t> out);

/// The model inputs viewing `inputs` ([>= layout.total] i32 on the device, filled by
/// fill_step_inputs). The maxima are host-side bounds for the attention kernels: at least the
/// step's real values (a graph captures them, so it passes its largest).
[[nodiscard]] ForwardInputs forward_inputs(const Tensor& inputs, const StepInputLayout& layout,
                                           int32_t max_query_len, int32_t max_seq_len);

}  // namespace troupe
