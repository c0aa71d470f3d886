#include "runtime/exec/model_runner.hpp"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "runtime/error.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/exec/memory_fit.hpp"
#include "runtime/sampling/logit_masks.hpp"

namespace troupe {

namespace {
using Clock = std::chrono::steady_clock;
constexpr int64_t kGiB = int64_t(1) << 30;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

std::vector<int32_t> decode_capture_sizes(int32_t max_num_seqs, int32_t max_num_batched_tokens,
                                          const std::vector<int32_t>& requested) {
  std::vector<int32_t> sizes;
  if (!requested.empty()) {
    // The user's sizes, less those no decode step can fill.
    const int32_t most = std::min(max_num_seqs, max_num_batched_tokens);
    for (int32_t s : requested)
      if (s >= 1 && s <= most) sizes.push_back(s);
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    return sizes;
  }
  // vLLM's limit too: past 512 sequences a decode step is long enough that launches do not
  // matter, and each size costs a graph. vLLM's sizes: a batch carries at most 7 padding rows
  // (15 past 256) through the GEMMs, lm_head and attention's grid.
  return capture_size_pattern(std::min({max_num_seqs, max_num_batched_tokens, int32_t(512)}));
}

ModelRunner::ModelRunner(std::unique_ptr<Backend> backend, const ExecutorInit& init,
                         const RunnerOptions& options, std::shared_ptr<StageLink> stage_link)
    : backend_(std::move(backend)),
      init_(init),
      options_(options),
      constructed_(Clock::now()),
      stage_link_(std::move(stage_link)),
      block_size_(init.block_size),
      max_num_batched_tokens_(init.max_num_batched_tokens),
      max_num_seqs_(init.max_num_seqs),
      max_model_len_(init.max_model_len) {
  if (!backend_) fail("ModelRunner: no backend");
  backend_->set_batch_invariant(init.batch_invariant);  // refused by a backend without the mode
  if (!init.logits_processor_plugins.empty())
    plugins_ = std::make_unique<LogitsProcessorPlugins>(init.logits_processor_plugins);
  backend_->synchronize();
  at_start_ = backend_->memory_info();
  config_ = load_model_config(init.model_dir);
  const DType stored = config_.dtype;
  config_.dtype = resolve_model_dtype(init.dtype, stored, backend_->device().kind);
  if (init.dtype == "auto" && config_.dtype != stored)
    spdlog::info(
        "executor: dtype auto: the {} checkpoint runs in {} on {} (vLLM's rule; "
        "--dtype {} keeps it)",
        dtype_name(stored), dtype_name(config_.dtype), backend_->name(), dtype_name(stored));
  ParallelRank rank{init.tp_rank, init.tp_size, init.pp_rank, init.pp_size};
  if (at_start_.total_bytes > 0)  // refuse what cannot fit before allocating (memory_fit.hpp)
    check_model_fits(
        model_memory(config_, backend_->compute_dtype(config_.dtype), max_model_len_, rank),
        int64_t(at_start_.free_bytes), backend_->device(), stored);
  model_ = make_causal_lm(config_, *backend_, rank);
  if (init.load_format == "dummy") {
    model_->init_dummy_weights(init.seed);
  } else if (init.load_format == "auto" || init.load_format == "safetensors") {
    const CheckpointReader checkpoint = CheckpointReader::open(init.model_dir);
    model_->load_weights(checkpoint);
  } else {
    fail("load_format = '{}': expected auto, safetensors or dummy", init.load_format);
  }
  info_.checkpoint_fingerprint = checkpoint_fingerprint(init.model_dir, init.load_format, init.seed);
  max_logits_rows_ = max_num_seqs_ + prompt_logprob_rows_per_step(max_num_batched_tokens_);
  max_logits_rows_ = std::min(max_logits_rows_, max_num_batched_tokens_ + max_num_seqs_);
  model_->reserve(max_num_batched_tokens_, max_logits_rows_);
  if (init.pp_size > 1) {
    if (!stage_link_)
      fail("pipeline stage {} of {}: no stage link to its neighbours", init.pp_rank, init.pp_size);
    stage_host_ = backend_->allocate_host(size_t(max_num_batched_tokens_) *
                                          size_t(config_.hidden_size) * dtype_size(config_.dtype));
  }
  ensure_input_capacity(size_t(max_num_batched_tokens_), size_t(max_num_seqs_),
                        size_t((max_model_len_ + block_size_ - 1) / block_size_));
  info_.backend = backend_->name();
  if (!options.defer_start) start();
}

void ModelRunner::start() {
  if (started_) fail("start: the runner has started already");
  size_kv_cache(init_, at_start_, options_.profile_on_host);
  setup_decode_graphs(init_, options_);
  capture_decode_graphs();
  started_ = true;
  info_.load_seconds = seconds_since(constructed_);
  spdlog::info("executor: {} on {}: {} KV blocks of {} tokens ({:.1f} MiB), loaded in {:.2f} s",
               config_.architecture, info_.backend, info_.num_blocks, block_size_,
               double(info_.kv_cache_bytes) / double(1 << 20), info_.load_seconds);
}

ModelRunner::~ModelRunner() {
  if (stats_.steps == 0) return;
  const double ms = 1000.0 / double(stats_.steps);
  spdlog::info(
      "executor: {} steps ({} padded, {} graph replays); per step {:.3f} ms preparing "
      "inputs, {:.3f} ms enqueueing the forward, {:.3f} ms sampling and waiting",
      stats_.steps, stats_.padded_steps, stats_.graph_replays, stats_.prepare_seconds * ms,
      stats_.forward_seconds * ms, stats_.sample_seconds * ms);
  if (stats_.blocks_swapped_out + stats_.blocks_swapped_in == 0) return;
  const double mib = double(info_.kv_block_bytes) / double(1 << 20);
  auto rate = [&](int64_t blocks, double seconds) {
    return fmt::format("{} blocks in {:.3f} ms ({:.2f} us a block, {:.0f} MiB/s)", blocks,
                       seconds * 1e3, blocks > 0 ? seconds * 1e6 / double(blocks) : 0.0,
                       seconds > 0 ? double(blocks) * mib / seconds : 0.0);
  };
  spdlog::info("executor: swap {}: out {}; in {}",
               remote_swap_ ? "to the memory node " + init_.swap_space_remote : "in host memory",
               rate(stats_.blocks_swapped_out, stats_.swap_out_seconds),
               rate(stats_.blocks_swapped_in, stats_.swap_in_seconds));
}

DType resolve_model_dtype(const std::string& requested, DType checkpoint, DeviceKind device) {
  if (requested == "auto") {
    if (!is_float(checkpoint))
      fail("dtype = auto: the checkpoint's dtype {} is not a float type", dtype_name(checkpoint));
    return checkpoint == DType::f32 && device != DeviceKind::cpu ? DType::f16 : checkpoint;
  }
  const auto dt = parse_dtype(requested);
  if (!dt || !is_float(*dt))
    fail("dtype = '{}': allowed: auto, float32 (float), bfloat16, float16 (half)", requested);
  return *dt;
}

int64_t kv_cache_budget(const MemoryInfo& at_start, const MemoryInfo& after_profile,
                        double gpu_memory_utilization) {
  const auto gib = [](double b) { return b / double(kGiB); };
  const double total = double(after_profile.total_bytes);
  const double allowed = total * gpu_memory_utilization;
  const double own = std::max(0.0, double(at_start.free_bytes) - double(after_profile.free_bytes));
  const double kv = allowed - own;
  if (kv <= 0)
    fail(
        "gpu_memory_utilization = {}: allows {:.2f} GiB of the device's {:.2f} GiB, but the "
        "weights and a maximum-size step already take {:.2f} GiB, leaving nothing for the KV "
        "cache; allowed: a larger fraction (<= 1), or lower max_num_batched_tokens / "
        "max_num_seqs",
        gpu_memory_utilization, gib(allowed), gib(total), gib(own));
  const double free_now = double(after_profile.free_bytes);
  if (kv > free_now)
    fail(
        "gpu_memory_utilization = {}: the KV cache would need {:.2f} GiB, but only {:.2f} GiB "
        "of the device's {:.2f} GiB are free ({:.2f} GiB were in use before this engine "
        "loaded, by other processes and this one's CUDA context); allowed: at most {:.3f} "
        "here",
        gpu_memory_utilization, gib(kv), gib(free_now), gib(total),
        gib(total - double(at_start.free_bytes)), (own + free_now) / total);
  return int64_t(kv);
}

void ModelRunner::size_kv_cache(const ExecutorInit& init, const MemoryInfo& at_start,
                                bool profile_on_host) {
  const KVCacheShape shape = model_->kv_cache_shape();
  const size_t per_block = shape.bytes_per_block(block_size_);
  const int64_t blocks_per_seq = (max_model_len_ + block_size_ - 1) / block_size_;
  const bool on_host = backend_->device().kind == DeviceKind::cpu;
  const bool by_fraction = init.num_gpu_blocks_override <= 0 && init.kv_cache_memory_bytes <= 0;
  if (by_fraction && (!on_host || profile_on_host)) profile_max_step();
  int64_t num_blocks = 0;
  if (init.num_gpu_blocks_override > 0) {
    num_blocks = init.num_gpu_blocks_override;
  } else if (init.kv_cache_memory_bytes > 0) {
    num_blocks = init.kv_cache_memory_bytes / int64_t(per_block);
  } else if (on_host) {
    // Host memory: a quarter of what is available, at most 4 GiB, and no more than every
    // sequence at full length (pages are only touched when used).
    const MemoryInfo mem = backend_->memory_info();
    const int64_t budget = std::min<int64_t>(4 * kGiB, int64_t(mem.free_bytes / 4));
    num_blocks =
        std::min<int64_t>(budget / int64_t(per_block), int64_t(max_num_seqs_) * blocks_per_seq);
  } else {
    backend_->synchronize();
    const int64_t kv_bytes =
        kv_cache_budget(at_start, backend_->memory_info(), init.gpu_memory_utilization);
    num_blocks = kv_bytes / int64_t(per_block);
  }
  if (num_blocks * block_size_ < max_model_len_)
    fail(
        "the KV cache holds {} tokens ({} blocks of {}), fewer than max_model_len = {}: give it "
        "more memory (--kv-cache-memory-bytes, --gpu-memory-utilization) or lower "
        "--max-model-len",
        num_blocks * block_size_, num_blocks, block_size_, max_model_len_);
  if (num_blocks > INT32_MAX) num_blocks = INT32_MAX;
  allocate_kv(num_blocks);
  info_.num_blocks = int32_t(num_blocks);
  info_.kv_cache_bytes = int64_t(kv_buffer_.bytes());
  info_.kv_block_bytes = int64_t(per_block);
  size_swap_space(init, per_block);
}

namespace {
/// Bytes of one layer's K (or V) for num_blocks blocks.
size_t kv_layer_bytes(const KVCacheShape& shape, int32_t block_size, int64_t num_blocks) {
  return size_t(num_blocks) * shape.bytes_per_block(block_size) / size_t(2 * shape.num_layers);
}

/// The per-layer K and V tensors [num_blocks, block_size, num_kv_heads, d] laid out in `buf`
/// (layer 0 K, layer 0 V, layer 1 K, ...), on the buffer's device.
KVCacheView kv_view(const Buffer& buf, const KVCacheShape& shape, int32_t block_size,
                    int64_t num_blocks) {
  KVCacheView view;
  view.block_size = block_size;
  view.num_blocks = int32_t(num_blocks);
  const size_t layer_bytes = kv_layer_bytes(shape, block_size, num_blocks);
  auto* base = static_cast<char*>(buf.data());
  for (int32_t l = 0; l < shape.num_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      Tensor t(base + size_t(2 * l + kv) * layer_bytes, shape.dtype, buf.device(),
               {num_blocks, block_size, shape.num_kv_heads, shape.head_dim});
      (kv == 0 ? view.k : view.v).push_back(t);
    }
  }
  return view;
}
}  // namespace

ModelRunner::KvMemory ModelRunner::kv_memory(bool swap_space) const {
  if (!started_) fail("executor: its KV cache is not allocated yet (start() first)");
  if (backend_->device().kind != DeviceKind::cpu)
    fail("moving a KV cache between executors on the {} backend: not supported yet (it has run "
         "on the CPU backend only); allowed: device = cpu",
         backend_->name());
  if (swap_space && remote_swap_) return {};  // on the memory node; kv_host_ only stages
  const KVCacheView& view = swap_space ? kv_host_ : kv_;
  const Buffer& buf = swap_space ? kv_host_buffer_ : kv_buffer_;
  if (view.k.empty()) {
    if (swap_space) return {};
    fail("executor: it has no KV cache");
  }
  const KVCacheShape shape = model_->kv_cache_shape();
  return KvMemory{buf.data(), shape.num_layers, view.num_blocks,
                  int64_t(kv_layer_bytes(shape, block_size_, 1))};
}

void ModelRunner::replace_wires(std::shared_ptr<Collectives> group,
                                std::shared_ptr<StageLink> link) {
  if (launched_ || pending_)
    fail("executor: its wires cannot be replaced while a step is in flight");
  backend_->set_collectives(std::move(group));
  stage_link_ = std::move(link);
}

void ModelRunner::allocate_kv(int64_t num_blocks) {
  const KVCacheShape shape = model_->kv_cache_shape();
  kv_ = KVCacheView{};
  kv_buffer_ = Buffer{};
  kv_buffer_ = backend_->allocate(kv_layer_bytes(shape, block_size_, num_blocks) *
                                  size_t(2 * shape.num_layers));
  kv_ = kv_view(kv_buffer_, shape, block_size_, num_blocks);
}

void ModelRunner::profile_max_step() {
  const auto t0 = Clock::now();
  const int32_t num_seqs = std::max(1, std::min(max_num_seqs_, max_num_batched_tokens_));
  const int64_t tokens =
      std::min<int64_t>(max_num_batched_tokens_, int64_t(num_seqs) * max_model_len_);
  StepPlan plan;
  plan.step_id = 0;
  int32_t next_block = 0;
  const auto vocab = int32_t(std::min<int64_t>(config_.vocab_size, INT32_MAX));
  for (int32_t i = 0; i < num_seqs; ++i) {
    const auto len = int32_t(tokens / num_seqs + (i < tokens % num_seqs ? 1 : 0));
    if (len == 0) break;
    NewSeq n;
    n.seq_id = uint64_t(i) + 1;
    n.token_ids.resize(size_t(len));
    for (int32_t j = 0; j < len; ++j)
      n.token_ids[size_t(j)] = int32_t((int64_t(i) * 7919 + int64_t(j) * 104729) % vocab);
    n.num_prompt_tokens = len;
    n.num_new_tokens = len;
    n.sampling.top_k = 50;
    n.sampling.top_p = 0.9f;
    n.sampling.num_logprobs = 20;
    n.sampling.seed = uint64_t(i);
    const int32_t blocks = (len + block_size_ - 1) / block_size_;
    for (int32_t b = 0; b < blocks; ++b) n.block_ids.push_back(next_block++);
    plan.new_seqs.push_back(std::move(n));
  }
  allocate_kv(next_block);
  profiling_ = true;
  try {
    (void)execute(plan);
  } catch (...) {
    profiling_ = false;
    throw;
  }
  profiling_ = false;
  backend_->synchronize();
  seqs_.clear();
  stats_ = RunnerStats{};
  last_num_sampled_ = 0;
  last_logits_ = Tensor{};
  kv_ = KVCacheView{};
  kv_buffer_ = Buffer{};
  spdlog::info("executor: profiled a step of {} tokens over {} sequences in {:.2f} s", tokens,
               plan.new_seqs.size(), seconds_since(t0));
}

void ModelRunner::size_swap_space(const ExecutorInit& init, size_t per_block) {
  if (init.swap_space_bytes <= 0) return;
  const int64_t n = std::min<int64_t>(init.swap_space_bytes / int64_t(per_block), INT32_MAX);
  info_.num_cpu_blocks = int32_t(n);
  if (n == 0) {
    spdlog::warn(
        "executor: swap_space of {} bytes holds no KV block of {} bytes: preemption "
        "will recompute",
        init.swap_space_bytes, per_block);
    return;
  }
  const bool remote = !init.swap_space_remote.empty();
  if (remote && !options_.remote_swap)
    fail("swap_space_remote = '{}': this executor was given no way to reach a memory node",
         init.swap_space_remote);
  if (remote && backend_->device().kind != DeviceKind::cpu)
    fail(
        "swap_space_remote = '{}' on the {} backend: not supported yet (it has run on the CPU "
        "backend only); allowed: device = cpu, or a local swap space",
        init.swap_space_remote, backend_->name());
  // A remote swap space keeps only a staging cache here (see the header).
  const int64_t local = remote ? std::min(n, kRemoteSwapStagingBlocks) : n;
  const KVCacheShape shape = model_->kv_cache_shape();
  kv_host_buffer_ = backend_->allocate_host(kv_layer_bytes(shape, block_size_, local) *
                                            size_t(2 * shape.num_layers));
  kv_host_ = kv_view(kv_host_buffer_, shape, block_size_, local);
  if (remote) {
    RemoteSwapRequest r;
    r.num_blocks = n;
    r.block_bytes = int64_t(per_block);
    r.staging = kv_host_buffer_.data();
    r.num_layers = shape.num_layers;
    r.staging_blocks = local;
    r.slice_bytes = int64_t(kv_layer_bytes(shape, block_size_, 1));
    remote_swap_ = options_.remote_swap(r);
    spdlog::info(
        "executor: swap space of {} KV blocks ({:.1f} MiB) on the memory node {}, staged "
        "through {} blocks here",
        n, double(n) * double(per_block) / double(1 << 20), init.swap_space_remote, local);
    return;
  }
  spdlog::info("executor: swap space of {} KV blocks ({:.1f} MiB of host memory)", n,
               double(kv_host_buffer_.bytes()) / double(1 << 20));
}

void ModelRunner::receive_stage_input(uint64_t step_id, int32_t num_tokens) {
  const Tensor dst = model_->stage_input(num_tokens);  // [T, H]
  const auto bytes = size_t(dst.nbytes());
  if (bytes > stage_host_.bytes())
    fail("step {}: {} bytes of hidden states exceed the stage buffer of {}", step_id, bytes,
         stage_host_.bytes());
  stage_link_->recv_prev(step_id, stage_host_.data(), bytes);
  backend_->upload(dst, stage_host_.data(), bytes);
}

void ModelRunner::send_stage_output(uint64_t step_id, const Tensor& hidden) {
  const auto bytes = size_t(hidden.nbytes());
  if (bytes > stage_host_.bytes())
    fail("step {}: {} bytes of hidden states exceed the stage buffer of {}", step_id, bytes,
         stage_host_.bytes());
  backend_->download(stage_host_.data(), hidden, bytes);
  stage_link_->send_next(step_id, stage_host_.data(), bytes);
}

void ModelRunner::swap(const std::vector<BlockSwap>& pairs, bool to_host) {
  if (pairs.empty()) return;
  if (kv_host_.num_blocks == 0)
    fail("step: a swap of {} blocks, but there is no swap space", pairs.size());
  const auto t0 = Clock::now();
  if (remote_swap_) {
    swap_remote(pairs, to_host);
  } else {
    swap_pairs_.clear();
    for (const BlockSwap& p : pairs)
      swap_pairs_.push_back(to_host ? BlockCopy{p.gpu_block, p.cpu_block}
                                    : BlockCopy{p.cpu_block, p.gpu_block});
    copy_swap_pairs(to_host);
  }
  (to_host ? stats_.blocks_swapped_out : stats_.blocks_swapped_in) += int64_t(pairs.size());
  (to_host ? stats_.swap_out_seconds : stats_.swap_in_seconds) += seconds_since(t0);
}

void ModelRunner::copy_swap_pairs(bool to_host) {
  for (size_t l = 0; l < kv_.k.size(); ++l) {
    if (to_host) {
      backend_->swap_blocks(kv_host_.k[l], kv_.k[l], swap_pairs_);
      backend_->swap_blocks(kv_host_.v[l], kv_.v[l], swap_pairs_);
    } else {
      backend_->swap_blocks(kv_.k[l], kv_host_.k[l], swap_pairs_);
      backend_->swap_blocks(kv_.v[l], kv_host_.v[l], swap_pairs_);
    }
  }
}

void ModelRunner::swap_remote(const std::vector<BlockSwap>& pairs, bool to_host) {
  const auto chunk = size_t(kv_host_.num_blocks);
  for (size_t at = 0; at < pairs.size(); at += chunk) {
    const size_t count = std::min(chunk, pairs.size() - at);
    swap_pairs_.clear();
    remote_moves_.clear();
    for (size_t i = 0; i < count; ++i) {
      const BlockSwap& p = pairs[at + i];
      const auto staged = int32_t(i);
      swap_pairs_.push_back(to_host ? BlockCopy{p.gpu_block, staged}
                                    : BlockCopy{staged, p.gpu_block});
      remote_moves_.push_back({int64_t(p.cpu_block), int64_t(i)});
    }
    if (to_host) {
      copy_swap_pairs(true);
      backend_->synchronize();  // the staging cache holds the chunk
      remote_swap_->write(remote_moves_);
    } else {
      remote_swap_->read(remote_moves_);
      copy_swap_pairs(false);
      backend_->synchronize();  // the staging cache is free for the next chunk
    }
  }
}

void ModelRunner::copy_blocks(const std::vector<BlockCopyPlan>& copies) {
  if (copies.empty()) return;
  const int64_t num_blocks = kv_.k.empty() ? 0 : kv_.k[0].dim(0);
  for (const BlockCopyPlan& c : copies)
    if (c.src < 0 || c.src >= num_blocks || c.dst < 0 || c.dst >= num_blocks || c.src == c.dst)
      fail("step: block copy {} -> {} out of range [0, {}) or onto itself", c.src, c.dst,
           num_blocks);
  // Backend::copy of one block's rows, every layer's K and V: ordered on the backend's stream
  // after the swap-outs and before the swap-ins and the forward.
  for (size_t l = 0; l < kv_.k.size(); ++l)
    for (const auto* side : {&kv_.k, &kv_.v})
      for (const BlockCopyPlan& c : copies)
        backend_->copy((*side)[l].rows(c.dst, c.dst + 1), (*side)[l].rows(c.src, c.src + 1));
  stats_.blocks_copied += int64_t(copies.size());
}

void ModelRunner::setup_decode_graphs(const ExecutorInit& init, const RunnerOptions& options) {
  using Pad = RunnerOptions::PadDecode;
  const bool can_capture = backend_->can_capture();
  max_seq_len_to_capture_ = std::min(init.max_seq_len_to_capture, max_model_len_);
  capture_sizes_ =
      decode_capture_sizes(max_num_seqs_, max_num_batched_tokens_, init.cudagraph_capture_sizes);
  pad_decode_ = (options.pad_decode == Pad::always ||
                 (options.pad_decode == Pad::automatic && can_capture)) &&
                max_seq_len_to_capture_ >= 1 && !capture_sizes_.empty();
  use_graphs_ = pad_decode_ && can_capture && !init.enforce_eager;
  if (!pad_decode_) {
    const bool none_fit = capture_sizes_.empty();
    capture_sizes_.clear();
    if (can_capture)
      spdlog::info("executor: CUDA graphs off ({})",
                   options.pad_decode == Pad::never ? "decode padding off"
                   : none_fit ? "no cudagraph_capture_sizes at or below max_num_seqs"
                              : "max_seq_len_to_capture < 1");
    return;
  }
  graph_max_blocks_ = (max_seq_len_to_capture_ + block_size_ - 1) / block_size_;
  const int32_t largest = capture_sizes_.back();
  const StepInputLayout layout =
      StepInputLayout::make(largest, largest, largest, graph_max_blocks_);
  graph_inputs_ = backend_->allocate(layout.total * sizeof(int32_t));
  spdlog::info(
      "executor: decode steps of up to {} sequences of up to {} tokens padded to {} "
      "sequences{}",
      largest, max_seq_len_to_capture_, fmt::join(capture_sizes_, "/"),
      use_graphs_ ? ", each size run as a CUDA graph"
                  : (can_capture ? " (enforce_eager: no CUDA graphs)" : ""));
}

void ModelRunner::capture_decode_graphs() {
  if (!use_graphs_) return;
  // As vLLM does, every size at start-up, largest first, so that no decode step of a run pays
  // for a recording. Inputs of padding only (every token skips its KV write, every sequence is
  // empty): the kernels and their bounds are the layout's, whatever the values, so the graphs
  // are those the first real step of each size would record.
  const auto t0 = Clock::now();
  const RunnerStats before = stats_;
  try {
    for (auto it = capture_sizes_.rbegin(); it != capture_sizes_.rend() && use_graphs_; ++it) {
      const int32_t size = *it;
      const StepInputLayout layout = StepInputLayout::make(size, size, size, graph_max_blocks_);
      host_inputs_.assign(layout.total, 0);
      fill_step_inputs({}, {}, block_size_, layout, host_inputs_);
      const Tensor all = graph_inputs_.tensor(DType::i32, {int64_t(layout.total)});
      backend_->upload(all, host_inputs_.data(), layout.total * sizeof(int32_t));
      ForwardInputs in = forward_inputs(all, layout, 1, max_seq_len_to_capture_);
      in.attention.num_prefill_seqs = 0;
      (void)run_padded_step(size, in);
    }
    backend_->synchronize();
  } catch (const Error& e) {
    // The warm-up is an optimisation: without graphs, padded decode steps run eagerly.
    spdlog::warn("executor: recording the decode-step CUDA graphs failed; decode steps run "
                 "eagerly: {}",
                 e.what());
    graphs_.clear();
    use_graphs_ = false;
    stats_ = before;
    return;
  }
  const int32_t captured = stats_.graphs_captured;
  stats_ = before;  // the warm-up steps are not steps
  stats_.graphs_captured = captured;
  if (use_graphs_)
    spdlog::info("executor: recorded {} decode-step CUDA graphs in {:.2f} s", captured,
                 seconds_since(t0));
}

int32_t ModelRunner::padded_batch_size(const std::vector<Scheduled>& sched, int32_t max_seq,
                                       bool prompt_logprobs) const {
  if (!pad_decode_ || prompt_logprobs || max_seq > max_seq_len_to_capture_ ||
      sched.size() > size_t(capture_sizes_.back()))
    return 0;
  for (const Scheduled& s : sched)
    if (s.count != 1) return 0;
  return *std::lower_bound(capture_sizes_.begin(), capture_sizes_.end(), int32_t(sched.size()));
}

Tensor ModelRunner::run_padded_step(int32_t size, const ForwardInputs& in) {
  ++stats_.padded_steps;
  DecodeGraph& g = graphs_[size];
  if (g.graph) {
    g.graph->replay();
    ++stats_.graph_replays;
    return g.logits;
  }
  const Tensor logits = model_->forward(in, kv_);  // [size, vocab] f32
  if (use_graphs_) {
    // This size's first step ran above, which loaded its kernels and made its GEMM plans (the
    // CUDA backend asks for that before a capture); record the same ops for the next ones.
    // Recording runs nothing, so `logits` still holds this step's values.
    try {
      Tensor recorded;
      g.graph = backend_->capture([&] { recorded = model_->forward(in, kv_); });
      g.logits = recorded;
      if (g.graph) {
        ++stats_.graphs_captured;
      } else {
        use_graphs_ = false;
      }
    } catch (const Error& e) {
      spdlog::warn(
          "executor: recording the decode step of {} sequences as a CUDA graph failed; "
          "decode steps run eagerly from now on: {}",
          size, e.what());
      g = DecodeGraph{};
      use_graphs_ = false;
    }
  }
  return logits;
}

std::vector<float> ModelRunner::last_sampled_logits() {
  if (last_num_sampled_ == 0 || last_logits_.empty()) return {};
  const Tensor rows = last_logits_.rows(0, last_num_sampled_);
  std::vector<float> host(size_t(rows.numel()));
  backend_->download(host.data(), rows, rows.nbytes());
  return host;
}

void ModelRunner::ensure_input_capacity(size_t tokens, size_t seqs, size_t max_blocks) {
  // token_ids, positions, slot_mapping [T]; logits_indices [<= T + S]; query_start_loc [S+1];
  // seq_lens [S]; block_tables [S, max_blocks]: all i32.
  const size_t need = sizeof(int32_t) * (4 * tokens + seqs * (3 + max_blocks) + 1);
  if (need <= input_capacity_bytes_) return;
  const size_t grown = std::max(need, input_capacity_bytes_ * 3 / 2);
  input_buffer_ = backend_->allocate(grown);
  input_capacity_bytes_ = grown;
}

PositionLogprobs ModelRunner::prompt_logprobs_row(const float* row, int32_t next_token,
                                                  int32_t top_n) const {
  const int64_t v = config_.vocab_size;
  float mx = -INFINITY;
  for (int64_t i = 0; i < v; ++i) mx = std::max(mx, row[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < v; ++i) sum += std::exp(double(row[i]) - double(mx));
  const double lse = double(mx) + std::log(sum);
  PositionLogprobs out;
  const float chosen = row[next_token];
  int32_t rank = 1;
  for (int64_t i = 0; i < v; ++i) rank += row[i] > chosen ? 1 : 0;
  out.chosen = LogprobEntry{next_token, float(double(chosen) - lse), rank};
  if (top_n > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(v));
    std::iota(idx.begin(), idx.end(), 0);
    const auto n = std::min<int64_t>(top_n, v);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int64_t k = 0; k < n; ++k)
      out.top.push_back(
          LogprobEntry{idx[size_t(k)], float(double(row[idx[size_t(k)]]) - lse), int32_t(k + 1)});
  }
  return out;
}

StepResult ModelRunner::execute(const StepPlan& plan) {
  if (pending_ || launched_)
    fail("execute: step {} is still in flight (finish it first)",
         pending_ ? pending_->result.step_id : launched_->result.step_id);
  launch(plan);
  start_sampling();
  return finish();
}

bool ModelRunner::must_finish_before(const StepPlan& plan) const {
  if (!pending_ || pending_->completed) return false;
  if (!plan.swap_out.empty() || !plan.swap_in.empty() || !plan.copy_blocks.empty()) return true;
  const auto touched = [&](uint64_t id) {
    for (const PendingRow& r : pending_->rows)
      if (r.seq_id == id) return true;
    return false;
  };
  for (uint64_t id : plan.finished_seq_ids)
    if (touched(id)) return true;
  for (const NewSeq& n : plan.new_seqs)
    if (touched(n.seq_id)) return true;
  return false;
}

void ModelRunner::launch(const StepPlan& plan) {
  const auto t0 = Clock::now();
  if (!started_ && !profiling_) fail("step {}: the runner has not started (start())", plan.step_id);
  if (launched_) fail("launch: step {} is launched and not sampling yet", launched_->result.step_id);
  if (must_finish_before(plan))
    fail("step {}: it forgets, replaces or swaps a sequence whose token step {} is still "
         "sampling (finish that step first)",
         plan.step_id, pending_->result.step_id);
  for (uint64_t id : plan.finished_seq_ids) seqs_.erase(id);
  // Swap out before the copies before swap in before the forward: a block a swap-out vacates
  // may be a copy's destination, filled by a swap-in or written by this step's forward, and the
  // stream runs them in this order.
  swap(plan.swap_out, true);
  copy_blocks(plan.copy_blocks);
  swap(plan.swap_in, false);

  std::vector<Scheduled> sched;
  sched.reserve(plan.new_seqs.size() + plan.cached_seqs.size());
  for (const NewSeq& n : plan.new_seqs) {
    if (n.num_prompt_tokens <= 0 || n.num_prompt_tokens > int32_t(n.token_ids.size()))
      fail("step {}: sequence {} has {} prompt tokens of {}", plan.step_id, n.seq_id,
           n.num_prompt_tokens, n.token_ids.size());
    LiveSeq s{n.token_ids, n.num_prompt_tokens, n.sampling, n.block_ids, n.num_computed_tokens};
    auto [it, inserted] = seqs_.insert_or_assign(n.seq_id, std::move(s));
    (void)inserted;
    sched.push_back(Scheduled{n.seq_id, &it->second, n.num_computed_tokens, n.num_new_tokens});
  }
  for (const CachedSeq& c : plan.cached_seqs) {
    auto it = seqs_.find(c.seq_id);
    if (it == seqs_.end()) fail("step {}: unknown sequence {}", plan.step_id, c.seq_id);
    LiveSeq& s = it->second;
    for (int32_t t : c.appended_token_ids) {
      if (s.num_unconfirmed == 0) {  // an executor that did not sample it (no logits head)
        s.tokens.push_back(t);
        continue;
      }
      // The scheduler's token wins (in a group, rank 0 samples for all) unless a step made
      // ahead already computed on this executor's own.
      const size_t at = s.tokens.size() - size_t(s.num_unconfirmed);
      if (s.awaited >= 0 && at == size_t(s.awaited))
        fail("step {}: sequence {}: the scheduler confirms token {} at position {}, which this "
             "executor is still sampling",
             plan.step_id, c.seq_id, t, at);
      if (s.tokens[at] != t) {
        if (int32_t(at) < s.num_computed)
          fail("step {}: sequence {}: the scheduler has token {} at position {}, where this "
               "executor sampled {} and has computed on it",
               plan.step_id, c.seq_id, t, at, s.tokens[at]);
        s.tokens[at] = t;
      }
      --s.num_unconfirmed;
    }
    s.block_table.insert(s.block_table.end(), c.new_block_ids.begin(), c.new_block_ids.end());
    sched.push_back(Scheduled{c.seq_id, &s, c.num_computed_tokens, c.num_new_tokens});
  }
  // Prompts and chunks (two or more new tokens) first, decodes after, each in plan order: the
  // attention backends then launch their prefill grid over the first ones only
  // (AttentionBatch::num_prefill_seqs). Outputs carry their sequence ids.
  const auto prefill_end = std::stable_partition(
      sched.begin(), sched.end(), [](const Scheduled& s) { return s.count >= 2; });
  const auto num_prefill_seqs = int32_t(prefill_end - sched.begin());
  Launched step;
  step.result.step_id = plan.step_id;
  if (sched.empty()) {
    step.busy_seconds = seconds_since(t0);
    launched_ = std::move(step);
    return;
  }

  // ---- host-side inputs ----
  const auto num_seqs = int32_t(sched.size());
  int32_t num_tokens = 0, max_query = 0, max_seq = 0;
  size_t max_blocks = 1;
  for (const Scheduled& s : sched) {
    if (s.count <= 0 || s.start < 0 || s.start + s.count > int32_t(s.seq->tokens.size()))
      fail("step {}: sequence {} schedules tokens [{}, {}) of {}", plan.step_id, s.seq_id, s.start,
           s.start + s.count, s.seq->tokens.size());
    const auto need_blocks = size_t((s.start + s.count + block_size_ - 1) / block_size_);
    if (s.seq->block_table.size() < need_blocks)
      fail("step {}: sequence {} needs {} blocks, its table has {}", plan.step_id, s.seq_id,
           need_blocks, s.seq->block_table.size());
    num_tokens += s.count;
    max_query = std::max(max_query, s.count);
    max_seq = std::max(max_seq, s.start + s.count);
    max_blocks = std::max(max_blocks, need_blocks);
  }
  if (num_tokens > max_num_batched_tokens_)
    fail("step {}: {} tokens exceed max_num_batched_tokens = {}", plan.step_id, num_tokens,
         max_num_batched_tokens_);

  // Logits rows: sampled sequences first (so their rows are contiguous for sampling), then
  // prompt-logprob positions. Tokens still being sampled by the step in flight: fed on the
  // device from its results (token_feeds_, by their offsets among the step's tokens).
  std::vector<int32_t> logits_rows;
  token_feeds_.clear();
  {
    int32_t token_offset = 0;
    for (size_t i = 0; i < sched.size(); ++i) {
      const Scheduled& s = sched[i];
      if (s.start + s.count == int32_t(s.seq->tokens.size())) {
        step.sampled.push_back(i);
        logits_rows.push_back(token_offset + s.count - 1);
      }
      const int32_t a = s.seq->awaited;
      if (a >= s.start && a < s.start + s.count)
        token_feeds_.push_back(TokenFeed{s.seq->awaited_row, int64_t(token_offset + a - s.start)});
      token_offset += s.count;
    }
    token_offset = 0;
    for (size_t i = 0; i < sched.size(); ++i) {
      const Scheduled& s = sched[i];
      if (s.seq->sampling.num_prompt_logprobs >= 0) {
        // Row at position p predicts token p + 1; prompt tokens 1 .. num_prompt - 1.
        const int32_t last = std::min(s.start + s.count, s.seq->num_prompt - 1);
        if (last > s.start) {
          step.prompt_rows.push_back(
              PromptRows{i, s.start, last - s.start, int32_t(logits_rows.size())});
          for (int32_t p = s.start; p < last; ++p)
            logits_rows.push_back(token_offset + p - s.start);
        }
      }
      token_offset += s.count;
    }
  }
  // A step of prompt chunks only still asks for one (unused) logits row: model programs
  // always end in the logits head.
  step.dummy_logits = logits_rows.empty();
  if (step.dummy_logits) logits_rows.push_back(num_tokens - 1);
  if (int32_t(logits_rows.size()) > max_logits_rows_)
    fail("step {}: {} logits rows exceed the reserved {}", plan.step_id, logits_rows.size(),
         max_logits_rows_);

  std::vector<SeqSlice> slices(sched.size());
  for (size_t i = 0; i < sched.size(); ++i)
    slices[i] =
        SeqSlice{sched[i].seq->tokens, sched[i].seq->block_table, sched[i].start, sched[i].count};
  const int32_t padded = padded_batch_size(sched, max_seq, !step.prompt_rows.empty());
  step.num_logits = logits_rows.size();
  const size_t L = logits_rows.size();
  // A padded step: the capture size's fixed shape in the fixed buffer; else the exact shape.
  const StepInputLayout layout =
      padded > 0 ? StepInputLayout::make(padded, padded, padded, graph_max_blocks_)
                 : StepInputLayout::make(num_tokens, num_seqs, int32_t(L), int32_t(max_blocks));
  if (padded == 0) ensure_input_capacity(size_t(num_tokens), size_t(num_seqs), max_blocks);
  host_inputs_.resize(layout.total);
  fill_step_inputs(slices, logits_rows, block_size_, layout, host_inputs_);
  const Buffer& device_inputs = padded > 0 ? graph_inputs_ : input_buffer_;
  const Tensor all = device_inputs.tensor(DType::i32, {int64_t(layout.total)});
  backend_->upload(all, host_inputs_.data(), layout.total * sizeof(int32_t));
  if (!token_feeds_.empty()) {
    for (TokenFeed& f : token_feeds_) f.index += int64_t(layout.token_ids);
    backend_->feed_sampled_tokens(all, token_feeds_);
  }
  // A padded step's attention bounds are the graph's: the same kernels and splits whether
  // it is replayed or run eagerly (enforce_eager, or a size whose recording failed).
  ForwardInputs in = padded > 0 ? forward_inputs(all, layout, 1, max_seq_len_to_capture_)
                                : forward_inputs(all, layout, max_query, max_seq);
  in.attention.num_prefill_seqs = padded > 0 ? 0 : num_prefill_seqs;  // padded: decodes only

  for (const Scheduled& s : sched) s.seq->num_computed = s.start + s.count;

  step.result.outputs.resize(sched.size());
  for (size_t i = 0; i < sched.size(); ++i) step.result.outputs[i].seq_id = sched[i].seq_id;
  step.sched = std::move(sched);
  ++stats_.steps;
  const auto t_forward = Clock::now();
  stats_.prepare_seconds += std::chrono::duration<double>(t_forward - t0).count();
  const int32_t forward_tokens = padded > 0 ? padded : num_tokens;
  if (!model_->is_first_stage() && !profiling_)
    receive_stage_input(plan.step_id, forward_tokens);
  // Last stage: [L, vocab] f32 (padded: [padded, vocab], the rows past L unused); other
  // stages: the hidden states [T, H] to send on.
  step.logits = padded > 0 ? run_padded_step(padded, in) : model_->forward(in, kv_);
  if (!model_->is_last_stage() && !profiling_) send_stage_output(plan.step_id, step.logits);
  stats_.forward_seconds += seconds_since(t_forward);
  step.busy_seconds = seconds_since(t0);
  launched_ = std::move(step);
}

void ModelRunner::start_sampling() {
  if (!launched_) fail("start_sampling: no step is launched");
  if (pending_) fail("start_sampling: step {} is still sampling", pending_->result.step_id);
  Launched step = std::move(*launched_);
  launched_.reset();
  const auto t_sample = Clock::now();
  Pending p;
  p.result = std::move(step.result);
  p.busy_seconds = step.busy_seconds;
  last_num_sampled_ = 0;
  last_logits_ = step.logits;
  if (step.sched.empty()) {
    p.completed = true;
    p.busy_seconds += seconds_since(t_sample);
    pending_ = std::move(p);
    return;
  }
  if (step.dummy_logits || !model_->is_last_stage()) {
    // The KV cache is filled (and a stage's output sent on); nothing to sample here.
    backend_->synchronize();
    p.completed = true;
    stats_.sample_seconds += seconds_since(t_sample);
    p.busy_seconds += seconds_since(t_sample);
    pending_ = std::move(p);
    return;
  }

  // ---- sampling ----
  if (!step.sampled.empty()) {
    std::vector<SamplingRow> rows(step.sampled.size());
    std::vector<std::vector<std::pair<int32_t, float>>> biases(step.sampled.size());
    for (size_t r = 0; r < step.sampled.size(); ++r) {
      const LiveSeq& s = *step.sched[step.sampled[r]].seq;
      const SeqSampling& sp = s.sampling;
      const int32_t n_out = int32_t(s.tokens.size()) - s.num_prompt;
      auto& bias = biases[r];
      sequence_row_bias(sp, std::span<const int32_t>(s.tokens.data() + s.num_prompt, size_t(n_out)),
                        int32_t(config_.vocab_size), bias);
      if (sp.has_processors())
        apply_processors(step.logits.rows(int64_t(r), int64_t(r) + 1), s, bias);
      SamplingRow& row = rows[r];
      static_cast<SamplingKnobs&>(row) = sp;  // every knob, whole (sampling_knobs.hpp)
      row.offset = uint64_t(n_out);
      row.num_logprobs = sp.num_logprobs;
      row.prompt_ids = std::span<const int32_t>(s.tokens.data(), size_t(s.num_prompt));
      row.output_ids = std::span<const int32_t>(s.tokens.data() + s.num_prompt, size_t(n_out));
      row.logit_bias = bias;
    }
    last_num_sampled_ = int32_t(step.sampled.size());
    backend_->start_sample(step.logits.rows(0, int64_t(step.sampled.size())), rows);
    // The next step may be planned before the scheduler sees this token (async scheduling)
    // and launched before the host has it: it is the sequence's next input either way, fed
    // on the device until finish() writes it here.
    for (size_t r = 0; r < step.sampled.size(); ++r) {
      LiveSeq& s = *step.sched[step.sampled[r]].seq;
      s.awaited = int32_t(s.tokens.size());
      s.awaited_row = int32_t(r);
      s.tokens.push_back(0);
      ++s.num_unconfirmed;
      p.rows.push_back(PendingRow{step.sched[step.sampled[r]].seq_id, &s, step.sampled[r]});
    }
  }

  // ---- prompt logprobs (host side): the logits are read now, before a later step's forward
  // may overwrite them, so such a step completes here ----
  if (!step.prompt_rows.empty()) {
    const int64_t v = config_.vocab_size;
    const int32_t first = step.prompt_rows.front().first_row;
    const int32_t count = int32_t(step.num_logits) - first;
    std::vector<float> host_logits(size_t(count) * size_t(v));
    backend_->download(host_logits.data(), step.logits.rows(first, first + count),
                       host_logits.size() * sizeof(float));
    for (const PromptRows& pr : step.prompt_rows) {
      const Scheduled& s = step.sched[pr.sched_index];
      auto& out = p.result.outputs[pr.sched_index].prompt_logprobs;
      for (int32_t j = 0; j < pr.count; ++j) {
        const float* row = host_logits.data() + size_t(pr.first_row - first + j) * size_t(v);
        const int32_t next = s.seq->tokens[size_t(pr.first_position + j + 1)];
        out.push_back(prompt_logprobs_row(row, next, s.seq->sampling.num_prompt_logprobs));
      }
    }
  }
  stats_.sample_seconds += seconds_since(t_sample);
  p.busy_seconds += seconds_since(t_sample);
  pending_ = std::move(p);
}

void ModelRunner::apply_processors(const Tensor& logits_row, const LiveSeq& s,
                                   std::vector<std::pair<int32_t, float>>& bias) {
  // Only this row comes to the host; the processors' changes go back as bias entries ahead of
  // the others, so the sampler sums them in vLLM's order (processors, then logit_bias).
  const auto v = size_t(config_.vocab_size);
  processor_raw_.resize(v);
  backend_->download(processor_raw_.data(), logits_row, v * sizeof(float));
  processor_work_ = processor_raw_;
  const std::span<const int32_t> prompt(s.tokens.data(), size_t(s.num_prompt));
  const std::span<const int32_t> output(s.tokens.data() + s.num_prompt,
                                        s.tokens.size() - size_t(s.num_prompt));
  for (const auto& spec : s.sampling.logits_processors) {
    if (!plugins_) fail("logits_processors: \"{}\": this executor loaded no plug-ins", spec);
    plugins_->apply(spec, prompt, output, processor_work_);
  }
  for (const auto& fn : s.sampling.logits_processor_fns) fn(prompt, output, processor_work_);
  std::vector<std::pair<int32_t, float>> changes;
  append_changes_as_bias(processor_raw_, processor_work_, changes, "a logits processor");
  bias.insert(bias.begin(), changes.begin(), changes.end());
}

bool ModelRunner::pending_done() {
  return !pending_ || pending_->completed || pending_->rows.empty() || backend_->sample_done();
}

StepResult ModelRunner::finish() {
  if (!pending_) fail("finish: no step is in flight");
  Pending p = std::move(*pending_);
  pending_.reset();
  const auto t_wait = Clock::now();
  if (!p.rows.empty()) {
    const std::vector<SampledToken> tokens = backend_->finish_sample();
    for (size_t r = 0; r < p.rows.size(); ++r) {
      const PendingRow& row = p.rows[r];
      const SampledToken& tok = tokens[r];
      row.seq->tokens[size_t(row.seq->awaited)] = tok.token;
      row.seq->awaited = -1;
      row.seq->awaited_row = -1;
      SeqStepOutput& o = p.result.outputs[row.output];
      o.sampled = true;
      o.token = tok.token;
      o.logprobs.chosen = LogprobEntry{tok.token, tok.logprob, tok.rank};
      for (const TokenLogprob& t : tok.top)
        o.logprobs.top.push_back(LogprobEntry{t.token, t.logprob, t.rank});
    }
  }
  stats_.sample_seconds += seconds_since(t_wait);
  p.result.execute_seconds = p.busy_seconds + seconds_since(t_wait);
  return std::move(p.result);
}

void ModelRunner::reset_batch() {
  launched_.reset();
  if (pending_ && !pending_->completed && !pending_->rows.empty()) {
    try {
      (void)backend_->finish_sample();
    } catch (const std::exception&) {  // the step failed already; its error was reported
    }
  }
  pending_.reset();
  try {
    backend_->synchronize();  // drain what was enqueued; clear any device error it raised
  } catch (const std::exception&) {
  }
  seqs_.clear();
}

}  // namespace troupe
