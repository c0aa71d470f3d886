// The EngineArgs table (one row per field, in vLLM's order), its validation and the
// command-line setter. Allowed values follow vLLM v0.11 (its Literal types and config
// checks); help texts are troupe's own.
#include "runtime/config/engine_args.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "runtime/config/field_codec.hpp"
#include "runtime/error.hpp"
#include "runtime/faults/fault_spec.hpp"
#include "runtime/protocol/step.hpp"

namespace troupe {

namespace {

using namespace config_detail;
using E = EngineArgs;
using Status = FieldInfo::Status;
constexpr Status kNotYet = Status::not_yet;

// A list of integers, each >= 1 (CUDA-graph capture sizes).
bool all_at_least_one(const json& v) {
  if (!v.is_array()) return false;
  for (const auto& e : v)
    if (!e.is_number_integer() || e.get<int64_t>() < 1) return false;
  return true;
}

// Reasons shared by many not-yet rows.
constexpr std::string_view kNoMultimodal = "troupe serves text-only models for now";
constexpr std::string_view kNoLora = "LoRA adapters are not implemented yet";
constexpr std::string_view kNoDataParallel =
    "data parallelism: run several troupe engines behind a load balancer for now";
constexpr std::string_view kNoExperts = "mixture-of-experts models are not implemented yet";
constexpr std::string_view kNoCompile =
    "troupe has no torch.compile; CUDA graphs are set by enforce_eager and "
    "max_seq_len_to_capture";
constexpr std::string_view kNoMamba = "state-space (Mamba) models are not implemented yet";
constexpr std::string_view kNoStructured =
    "structured outputs / guided decoding need a grammar engine";
constexpr std::string_view kNoHub =
    "troupe loads local directories only; download the checkpoint first";

bool power_of_two(const json& v) {
  int64_t x = v.get<int64_t>();
  return x >= 1 && x <= 256 && (x & (x - 1)) == 0;
}

/// "host:port" or "[v6]:port", port 1..65535.
bool valid_endpoint(std::string_view s) {
  size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view host = s.substr(0, colon), port = s.substr(colon + 1);
  if (host.front() == '[' ? host.back() != ']' || host.size() < 3
                          : host.find(':') != std::string_view::npos) {
    return false;
  }
  int p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  return ec == std::errc() && end == port.data() + port.size() && p >= 1 && p <= 65535;
}

std::vector<FieldInfo> build_table(Arena& a) {
  std::vector<FieldInfo> t;
  auto add = [&](FieldInfo f) { t.push_back(std::move(f)); };
  // One row per line, so the table reads (and diffs) like a table.
  // clang-format off
  // ---- model ----
  add(member(a, &E::model, {.name = "model", .help = "The checkpoint directory (a Hugging Face layout: config.json, *.safetensors, tokenizer files). Default: the embedded model, troupe-fortunes ($TROUPE_DEFAULT_MODEL, or found beside the troupe binary or its install's share/troupe)."}));
  add(member(a, &E::served_model_name, {.name = "served_model_name", .help = "Model name(s) the API answers to; the first is reported. Default: the model path.", .allowed = "non-empty names", .valid = [](const json& v) { for (const auto& e : v) if (e.get_ref<const std::string&>().empty()) return false; return true; }}));
  add(member(a, &E::tokenizer, {.name = "tokenizer", .help = "Tokenizer directory. Default: the model directory."}));
  add(member(a, &E::hf_config_path, {.name = "hf_config_path", .help = "Directory of the config.json to use instead of the model's.", .status = kNotYet, .note = "config.json is read from the model directory"}));
  add(member(a, &E::runner, {.name = "runner", .help = "Which runner: generation, pooling or draft model.", .choices = {"auto", "generate", "pooling", "draft"}, .status = kNotYet, .note = "troupe runs generative models only"}));
  add(member(a, &E::convert, {.name = "convert", .help = "Adapt a generative model for pooling tasks.", .choices = {"auto", "none", "embed", "classify", "reward"}, .status = kNotYet, .note = "no pooling models yet"}));
  add(member(a, &E::task, {.name = "task", .help = "Deprecated in vLLM: use runner / convert.", .choices = {"auto", "generate", "embedding", "embed", "classify", "score", "reward", "transcription", "draft"}, .status = kNotYet, .note = "troupe runs generative models only"}));
  add(member(a, &E::skip_tokenizer_init, {.name = "skip_tokenizer_init", .help = "Start without a tokenizer; prompts must then be token ids."}));
  add(member(a, &E::enable_prompt_embeds, {.name = "enable_prompt_embeds", .help = "Accept prompt embeddings instead of token ids.", .status = kNotYet, .note = "prompts are text or token ids"}));
  add(member(a, &E::tokenizer_mode, {.name = "tokenizer_mode", .help = "auto: the fast (tokenizer.json) tokenizer; slow, mistral, custom: other implementations.", .choices = {"auto", "slow", "mistral", "custom"}, .supported = {"auto"}, .note = "troupe reads tokenizer.json"}));
  add(member(a, &E::trust_remote_code, {.name = "trust_remote_code", .help = "Accepted for compatibility: no Python code runs in troupe, so only built-in architectures load."}));
  add(member(a, &E::allowed_local_media_path, {.name = "allowed_local_media_path", .help = "Directory API requests may read images or videos from.", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::allowed_media_domains, {.name = "allowed_media_domains", .help = "Domains API requests may fetch media from.", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::download_dir, {.name = "download_dir", .help = "Where downloaded weights go.", .status = kNotYet, .note = kNoHub}));
  add(member(a, &E::safetensors_load_strategy, {.name = "safetensors_load_strategy", .help = "How safetensors files are read (lazy: memory-mapped).", .choices = {"lazy", "eager", "torchao"}, .status = kNotYet, .note = "troupe memory-maps safetensors files"}));
  add(member(a, &E::load_format, {.name = "load_format", .help = "Weight format: auto/safetensors read *.safetensors; dummy makes random weights (for benchmarks).", .choices = {"auto", "pt", "safetensors", "npcache", "dummy", "tensorizer", "sharded_state", "gguf", "bitsandbytes", "mistral", "runai_streamer", "runai_streamer_sharded", "fastsafetensors"}, .supported = {"auto", "safetensors", "dummy"}, .note = "troupe reads safetensors or makes dummy weights"}));
  add(member(a, &E::config_format, {.name = "config_format", .help = "Format of the model config.", .choices = {"auto", "hf", "mistral"}, .status = kNotYet, .note = "troupe reads Hugging Face config.json"}));
  add(member(a, &E::dtype, {.name = "dtype", .help = "Weight and activation type. auto: the checkpoint's (float32 checkpoints run in float16 on GPUs); half = float16, float = float32.", .choices = {"auto", "half", "float16", "bfloat16", "float", "float32"}}));
  add(member(a, &E::kv_cache_dtype, {.name = "kv_cache_dtype", .help = "KV-cache element type; auto: the model dtype.", .choices = {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"}, .status = kNotYet, .note = "the KV cache uses the model dtype"}));
  add(member(a, &E::seed, {.name = "seed", .help = "Seed of the engine's random stream (requests without their own seed)."}));
  add(member(a, &E::max_model_len, {.name = "max_model_len", .help = "Context length (prompt + output). Default: the model's. Takes 4k = 4000, 4K = 4096.", .allowed = "None or >= 1", .valid = at_least(1)}));
  add(member(a, &E::cuda_graph_sizes, {.name = "cuda_graph_sizes", .help = "Deprecated in vLLM: use cudagraph_capture_sizes. One value N: decode batches of 1, 2, 4 and every 8 up to N run as CUDA graphs; several: exactly those.", .allowed = "sizes >= 1", .valid = all_at_least_one}));
  add(member(a, &E::cudagraph_capture_sizes, {.name = "cudagraph_capture_sizes", .help = "Decode batch sizes that run as CUDA graphs (a batch pads to the next one; larger ones run eagerly). Default: 1, 2, 4, every 8 up to 256 and every 16 past it, up to max_cudagraph_capture_size.", .allowed = "sizes >= 1", .valid = all_at_least_one}));
  add(member(a, &E::max_cudagraph_capture_size, {.name = "max_cudagraph_capture_size", .help = "Largest decode batch run as a CUDA graph. Default: min(max_num_seqs, max_num_batched_tokens, 512); with cudagraph_capture_sizes, its largest.", .allowed = "None or >= 1", .valid = at_least(1)}));
  // ---- parallelism ----
  add(member(a, &E::distributed_executor_backend, {.name = "distributed_executor_backend", .help = "How the ranks start: mp (worker processes this engine starts, the default past one rank), uni (one rank in this process).", .choices = {"mp", "ray", "uni", "external_launcher"}, .supported = {"mp", "uni"}, .note = "no Ray in troupe: executors are actors (in-process, `troupe worker` processes, or a cluster file's workers)"}));
  add(member(a, &E::pipeline_parallel_size, {.name = "pipeline_parallel_size", .help = "Pipeline stages (ranks the layers are split across; each stage its own process).", .allowed = ">= 1", .valid = at_least(1)}));
  add(member(a, &E::tensor_parallel_size, {.name = "tensor_parallel_size", .help = "Tensor-parallel ranks (ranks each layer is split across; each its own process).", .allowed = ">= 1", .valid = at_least(1)}));
  add(member(a, &E::decode_context_parallel_size, {.name = "decode_context_parallel_size", .help = "Context-parallel ranks for decode.", .status = kNotYet, .note = "no context parallelism yet"}));
  add(member(a, &E::data_parallel_size, {.name = "data_parallel_size", .help = "Engine replicas.", .status = kNotYet, .note = kNoDataParallel}));
  add(member(a, &E::data_parallel_rank, {.name = "data_parallel_rank", .help = "This replica's data-parallel rank.", .status = kNotYet, .note = kNoDataParallel}));
  add(member(a, &E::data_parallel_start_rank, {.name = "data_parallel_start_rank", .help = "First data-parallel rank on this node.", .status = kNotYet, .note = kNoDataParallel}));
  add(member(a, &E::data_parallel_size_local, {.name = "data_parallel_size_local", .help = "Data-parallel replicas on this node.", .status = kNotYet, .note = kNoDataParallel}));
  add(member(a, &E::data_parallel_address, {.name = "data_parallel_address", .help = "Address of the data-parallel head node.", .status = kNotYet, .note = kNoDataParallel}));
  add(member(a, &E::data_parallel_rpc_port, {.name = "data_parallel_rpc_port", .help = "Port of the data-parallel head node.", .status = kNotYet, .note = kNoDataParallel}));
  add(member(a, &E::data_parallel_hybrid_lb, {.name = "data_parallel_hybrid_lb", .help = "Hybrid data-parallel load balancing.", .status = kNotYet, .note = kNoDataParallel}));
  add(member(a, &E::data_parallel_backend, {.name = "data_parallel_backend", .help = "How data-parallel replicas start.", .choices = {"mp", "ray"}, .status = kNotYet, .note = kNoDataParallel}));
  add(member(a, &E::enable_expert_parallel, {.name = "enable_expert_parallel", .help = "Split MoE experts across ranks.", .status = kNotYet, .note = kNoExperts}));
  add(member(a, &E::all2all_backend, {.name = "all2all_backend", .help = "All-to-all implementation for expert parallelism.", .choices = {"naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "allgather_reducescatter", "flashinfer_all2allv"}, .status = kNotYet, .note = kNoExperts}));
  add(member(a, &E::enable_dbo, {.name = "enable_dbo", .help = "Dual-batch overlap.", .status = kNotYet, .note = "no micro-batch overlap yet"}));
  add(member(a, &E::dbo_decode_token_threshold, {.name = "dbo_decode_token_threshold", .help = "Dual-batch overlap threshold for decode batches.", .status = kNotYet, .note = "no micro-batch overlap yet"}));
  add(member(a, &E::dbo_prefill_token_threshold, {.name = "dbo_prefill_token_threshold", .help = "Dual-batch overlap threshold for prefill batches.", .status = kNotYet, .note = "no micro-batch overlap yet"}));
  add(member(a, &E::disable_nccl_for_dp_synchronization, {.name = "disable_nccl_for_dp_synchronization", .help = "Synchronise data-parallel ranks over Gloo instead of NCCL.", .status = kNotYet, .note = kNoDataParallel}));
  add(member(a, &E::eplb_config, {.name = "eplb_config", .help = "Expert-parallel load balancer settings (JSON).", .status = kNotYet, .note = kNoExperts}));
  add(member(a, &E::enable_eplb, {.name = "enable_eplb", .help = "Expert-parallel load balancing.", .status = kNotYet, .note = kNoExperts}));
  add(member(a, &E::expert_placement_strategy, {.name = "expert_placement_strategy", .help = "How experts are placed on ranks.", .choices = {"linear", "round_robin"}, .status = kNotYet, .note = kNoExperts}));
  add(member(a, &E::num_redundant_experts, {.name = "num_redundant_experts", .help = "Deprecated in vLLM: use eplb_config.", .status = kNotYet, .note = kNoExperts}));
  add(member(a, &E::eplb_window_size, {.name = "eplb_window_size", .help = "Deprecated in vLLM: use eplb_config.", .status = kNotYet, .note = kNoExperts}));
  add(member(a, &E::eplb_step_interval, {.name = "eplb_step_interval", .help = "Deprecated in vLLM: use eplb_config.", .status = kNotYet, .note = kNoExperts}));
  add(member(a, &E::eplb_log_balancedness, {.name = "eplb_log_balancedness", .help = "Deprecated in vLLM: use eplb_config.", .status = kNotYet, .note = kNoExperts}));
  add(member(a, &E::max_parallel_loading_workers, {.name = "max_parallel_loading_workers", .help = "Ranks that read their weight shards at once (default: all).", .allowed = ">= 1", .valid = at_least(1)}));
  // ---- KV cache and memory ----
  add(member(a, &E::block_size, {.name = "block_size", .help = "Tokens per KV-cache block.", .allowed = "a power of two in 1..256", .valid = power_of_two}));
  add(member(a, &E::enable_prefix_caching, {.name = "enable_prefix_caching", .help = "Reuse the KV blocks of prompt prefixes already computed."}));
  add(member(a, &E::prefix_caching_hash_algo, {.name = "prefix_caching_hash_algo", .help = "Hash of prefix-cache blocks.", .choices = {"sha256", "sha256_cbor"}, .status = kNotYet, .note = "troupe's prefix cache chooses its own block hash"}));
  add(member(a, &E::disable_sliding_window, {.name = "disable_sliding_window", .help = "Ignore the model's sliding window (caps the context at the window).", .status = kNotYet, .note = "no sliding-window models yet"}));
  add(member(a, &E::disable_cascade_attn, {.name = "disable_cascade_attn", .help = "Turn off cascade attention.", .status = kNotYet, .note = "troupe has no cascade attention"}));
  add(member(a, &E::swap_space, {.name = "swap_space", .help = "GiB of CPU memory per GPU for the KV blocks of sequences preempted by swapping (preemption_mode = swap); 0: no swap space. vLLM V1 dropped it; troupe keeps it.", .allowed = ">= 0", .valid = at_least(0)}));
  add(member(a, &E::preemption_mode, {.name = "preemption_mode", .help = "How a running sequence is preempted when the KV cache is full: recompute (drop its KV, prefill it again later) or swap (copy its KV blocks to the swap space and back). None: recompute (n > 1 samples are independent sequences here, so vLLM V0's swap-for-groups rule never applies).", .choices = {"recompute", "swap"}}));
  add(member(a, &E::swap_space_remote, {.name = "swap_space_remote", .help = "host:port of a memory node (`troupe worker --kv-store GIB`) that holds each executor's swap space (swap_space GiB) in its host memory, on this host or another, instead of the executor's own; with preemption_mode = swap, CPU backend only for now.", .allowed = "None or host:port, port 1..65535", .valid = [](const json& v) { return v.is_null() || (v.is_string() && valid_endpoint(v.get_ref<const std::string&>())); }}));
  add(member(a, &E::cpu_offload_gb, {.name = "cpu_offload_gb", .help = "GiB of weights to keep in CPU memory.", .status = kNotYet, .note = "weights stay on the device"}));
  add(member(a, &E::gpu_memory_utilization, {.name = "gpu_memory_utilization", .help = "Fraction of GPU memory the engine may use (weights, activations, KV cache).", .allowed = "(0, 1]", .valid = in_half_open(0, 1)}));
  add(member(a, &E::kv_cache_memory_bytes, {.name = "kv_cache_memory_bytes", .help = "Bytes of KV cache per GPU; overrides gpu_memory_utilization. Takes 4G = 4 GiB.", .allowed = "None or >= 1", .valid = at_least(1)}));
  // ---- scheduler ----
  add(member(a, &E::max_num_batched_tokens, {.name = "max_num_batched_tokens", .help = "Token budget of one step. Default: 8192 with chunked prefill, else max(max_model_len, 2048). Takes 8k.", .allowed = "None or >= 1", .valid = at_least(1)}));
  add(member(a, &E::max_num_partial_prefills, {.name = "max_num_partial_prefills", .help = "Prompts that may be partly prefilled at once.", .status = kNotYet, .note = "one partial prefill at a time"}));
  add(member(a, &E::max_long_partial_prefills, {.name = "max_long_partial_prefills", .help = "Long prompts that may be partly prefilled at once.", .status = kNotYet, .note = "one partial prefill at a time"}));
  add(member(a, &E::long_prefill_token_threshold, {.name = "long_prefill_token_threshold", .help = "Prompts longer than this count as long.", .status = kNotYet, .note = "one partial prefill at a time"}));
  add(member(a, &E::max_num_seqs, {.name = "max_num_seqs", .help = "Most sequences in one step.", .allowed = ">= 1", .valid = at_least(1)}));
  add(member(a, &E::max_logprobs, {.name = "max_logprobs", .help = "Most logprobs a request may ask for; -1: no limit.", .allowed = ">= -1", .valid = at_least(-1)}));
  add(member(a, &E::logprobs_mode, {.name = "logprobs_mode", .help = "What logprobs report: raw or processed (after penalties, temperature, top-k/p) logprobs or logits.", .choices = {"raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits"}, .status = kNotYet, .note = "troupe returns raw logprobs"}));
  add(member(a, &E::disable_log_stats, {.name = "disable_log_stats", .help = "No periodic stats line."}));
  add(member(a, &E::aggregate_engine_logging, {.name = "aggregate_engine_logging", .help = "One stats line across data-parallel engines.", .status = kNotYet, .note = kNoDataParallel}));
  add(member(a, &E::revision, {.name = "revision", .help = "Hub revision of the model (branch, tag or commit).", .status = kNotYet, .note = "troupe loads local directories only; check out the revision yourself"}));
  add(member(a, &E::code_revision, {.name = "code_revision", .help = "Hub revision of the model code.", .status = kNotYet, .note = "troupe loads local directories only and runs no model code"}));
  add(member(a, &E::rope_scaling, {.name = "rope_scaling", .help = "Override the model's rope_scaling (JSON).", .status = kNotYet, .note = "edit config.json (or wait for hf_overrides)"}));
  add(member(a, &E::rope_theta, {.name = "rope_theta", .help = "Override the model's rope_theta.", .status = kNotYet, .note = "edit config.json (or wait for hf_overrides)"}));
  add(member(a, &E::hf_token, {.name = "hf_token", .help = "Hugging Face token (true: the stored one).", .status = kNotYet, .note = kNoHub}));
  add(member(a, &E::hf_overrides, {.name = "hf_overrides", .help = "Keys to override in config.json (JSON).", .status = kNotYet, .note = "edit config.json for now"}));
  add(member(a, &E::tokenizer_revision, {.name = "tokenizer_revision", .help = "Hub revision of the tokenizer.", .status = kNotYet, .note = "troupe loads local directories only"}));
  add(member(a, &E::quantization, {.name = "quantization", .help = "Quantization method of the weights.", .status = kNotYet, .note = "no quantized weights yet"}));
  add(member(a, &E::enforce_eager, {.name = "enforce_eager", .help = "Never use CUDA graphs."}));
  add(member(a, &E::batch_invariant, {.name = "batch_invariant", .help = "A request's tokens and logprobs are bit-identical whatever else shares its batch (fixed reduction orders; slower, docs/benchmarks.md). CPU and CUDA backends; on CUDA with tensor_parallel_size 1 only."}));
  add(member(a, &E::max_seq_len_to_capture, {.name = "max_seq_len_to_capture", .help = "Longest sequence run under a CUDA graph; longer ones run eagerly.", .allowed = ">= 1", .valid = at_least(1)}));
  add(member(a, &E::disable_custom_all_reduce, {.name = "disable_custom_all_reduce", .help = "Use NCCL only for the tensor-parallel all-reduce on CUDA. By default a one-shot all-reduce over CUDA IPC takes the messages up to a crossover measured when the group starts on its own GPUs (every rank on one host). No effect at TP 1 or on the CPU."}));
  // ---- multimodal ----
  add(member(a, &E::limit_mm_per_prompt, {.name = "limit_mm_per_prompt", .help = "Most media items per prompt, per modality (JSON).", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::enable_mm_embeds, {.name = "enable_mm_embeds", .help = "Accept multimodal embeddings.", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::interleave_mm_strings, {.name = "interleave_mm_strings", .help = "Interleave text and media in chat prompts.", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::media_io_kwargs, {.name = "media_io_kwargs", .help = "Media loader arguments (JSON).", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::mm_processor_kwargs, {.name = "mm_processor_kwargs", .help = "Multimodal processor arguments (JSON).", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::disable_mm_preprocessor_cache, {.name = "disable_mm_preprocessor_cache", .help = "Deprecated in vLLM: use mm_processor_cache_gb = 0.", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::mm_processor_cache_gb, {.name = "mm_processor_cache_gb", .help = "GiB of processed-media cache.", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::mm_processor_cache_type, {.name = "mm_processor_cache_type", .help = "Kind of processed-media cache.", .choices = {"lru", "shm"}, .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::mm_shm_cache_max_object_size_mb, {.name = "mm_shm_cache_max_object_size_mb", .help = "Largest object in the shared-memory media cache (MiB).", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::mm_encoder_tp_mode, {.name = "mm_encoder_tp_mode", .help = "How the media encoder is split across tensor-parallel ranks.", .choices = {"weights", "data"}, .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::mm_encoder_attn_backend, {.name = "mm_encoder_attn_backend", .help = "Attention kernel of the media encoder.", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::io_processor_plugin, {.name = "io_processor_plugin", .help = "Plugin that turns requests into model inputs.", .status = kNotYet, .note = "no plugins yet"}));
  add(member(a, &E::skip_mm_profiling, {.name = "skip_mm_profiling", .help = "Skip the media encoder in memory profiling.", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::video_pruning_rate, {.name = "video_pruning_rate", .help = "Fraction of video tokens to prune.", .status = kNotYet, .note = kNoMultimodal}));
  // ---- LoRA ----
  add(member(a, &E::enable_lora, {.name = "enable_lora", .help = "Serve LoRA adapters.", .status = kNotYet, .note = kNoLora}));
  add(member(a, &E::max_loras, {.name = "max_loras", .help = "Most LoRA adapters in one batch.", .status = kNotYet, .note = kNoLora}));
  add(member(a, &E::max_lora_rank, {.name = "max_lora_rank", .help = "Largest LoRA rank.", .allowed = "1|8|16|32|64|128|256|320|512", .valid = [](const json& v) { static const std::set<int64_t> ok{1, 8, 16, 32, 64, 128, 256, 320, 512}; return ok.count(v.get<int64_t>()) > 0; }, .status = kNotYet, .note = kNoLora}));
  add(member(a, &E::default_mm_loras, {.name = "default_mm_loras", .help = "Modality -> LoRA applied by default (JSON).", .status = kNotYet, .note = kNoLora}));
  add(member(a, &E::fully_sharded_loras, {.name = "fully_sharded_loras", .help = "Shard LoRA computation fully across ranks.", .status = kNotYet, .note = kNoLora}));
  add(member(a, &E::max_cpu_loras, {.name = "max_cpu_loras", .help = "LoRA adapters kept in CPU memory.", .status = kNotYet, .note = kNoLora}));
  add(member(a, &E::lora_dtype, {.name = "lora_dtype", .help = "LoRA weight type.", .choices = {"auto", "float16", "bfloat16"}, .status = kNotYet, .note = kNoLora}));
  add(member(a, &E::lora_extra_vocab_size, {.name = "lora_extra_vocab_size", .help = "Extra vocabulary a LoRA adapter may add.", .status = kNotYet, .note = kNoLora}));
  // ---- device, loading, scheduling policy ----
  add(member(a, &E::ray_workers_use_nsight, {.name = "ray_workers_use_nsight", .help = "Profile Ray workers with Nsight.", .status = kNotYet, .note = "no Ray in troupe; run `nsys` on the process"}));
  add(member(a, &E::device, {.name = "device", .help = "Where to run: auto picks cuda when a GPU is visible, else cpu.", .choices = {"auto", "cuda", "cpu", "tpu", "xpu", "hpu", "neuron"}, .supported = {"auto", "cuda", "cpu"}, .note = "troupe has CPU and CUDA backends"}));
  add(member(a, &E::num_gpu_blocks_override, {.name = "num_gpu_blocks_override", .help = "Use this many KV blocks per GPU instead of the measured number (testing preemption).", .allowed = "None or >= 1", .valid = at_least(1)}));
  add(member(a, &E::num_lookahead_slots, {.name = "num_lookahead_slots", .help = "KV slots reserved ahead for speculative tokens.", .status = kNotYet, .note = "no speculative decoding yet"}));
  add(member(a, &E::model_loader_extra_config, {.name = "model_loader_extra_config", .help = "Extra weight-loader settings (JSON).", .status = kNotYet, .note = "the safetensors loader has no settings"}));
  add(member(a, &E::ignore_patterns, {.name = "ignore_patterns", .help = "Weight files to skip (globs).", .status = kNotYet, .note = "troupe reads the top-level *.safetensors files"}));
  add(member(a, &E::enable_chunked_prefill, {.name = "enable_chunked_prefill", .help = "Split long prompts over steps so decodes keep running."}));
  add(member(a, &E::disable_chunked_mm_input, {.name = "disable_chunked_mm_input", .help = "Never split a media item across steps.", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::disable_hybrid_kv_cache_manager, {.name = "disable_hybrid_kv_cache_manager", .help = "One KV layout for all layers.", .status = kNotYet, .note = "troupe's KV cache has one layout already"}));
  add(member(a, &E::structured_outputs_config, {.name = "structured_outputs_config", .help = "Structured-output settings (JSON).", .status = kNotYet, .note = kNoStructured}));
  add(member(a, &E::reasoning_parser, {.name = "reasoning_parser", .help = "Parser that splits reasoning from the answer.", .status = kNotYet, .note = "no reasoning parsers yet"}));
  add(member(a, &E::guided_decoding_backend, {.name = "guided_decoding_backend", .help = "Deprecated in vLLM: use structured_outputs_config.", .status = kNotYet, .note = kNoStructured}));
  add(member(a, &E::guided_decoding_disable_fallback, {.name = "guided_decoding_disable_fallback", .help = "Deprecated in vLLM: use structured_outputs_config.", .status = kNotYet, .note = kNoStructured}));
  add(member(a, &E::guided_decoding_disable_any_whitespace, {.name = "guided_decoding_disable_any_whitespace", .help = "Deprecated in vLLM: use structured_outputs_config.", .status = kNotYet, .note = kNoStructured}));
  add(member(a, &E::guided_decoding_disable_additional_properties, {.name = "guided_decoding_disable_additional_properties", .help = "Deprecated in vLLM: use structured_outputs_config.", .status = kNotYet, .note = kNoStructured}));
  add(member(a, &E::logits_processor_pattern, {.name = "logits_processor_pattern", .help = "Regex of logits processors requests may name.", .status = kNotYet, .note = "no custom logits processors yet"}));
  add(member(a, &E::speculative_config, {.name = "speculative_config", .help = "Speculative decoding settings (JSON).", .status = kNotYet, .note = "no speculative decoding yet"}));
  add(member(a, &E::show_hidden_metrics_for_version, {.name = "show_hidden_metrics_for_version", .help = "Show metrics hidden since this version.", .status = kNotYet, .note = "troupe hides no metrics"}));
  add(member(a, &E::otlp_traces_endpoint, {.name = "otlp_traces_endpoint", .help = "OpenTelemetry endpoint for traces.", .status = kNotYet, .note = "no tracing yet"}));
  add(member(a, &E::collect_detailed_traces, {.name = "collect_detailed_traces", .help = "Modules to trace in detail.", .choices = {"model", "worker", "all"}, .status = kNotYet, .note = "no tracing yet"}));
  add(member(a, &E::scheduling_policy, {.name = "scheduling_policy", .help = "fcfs: first come first served; priority: by request priority, then arrival.", .choices = {"fcfs", "priority"}, .status = kNotYet, .note = "the scheduler is first come first served"}));
  add(member(a, &E::scheduler_cls, {.name = "scheduler_cls", .help = "Python class of the scheduler. Default (None): troupe's.", .status = kNotYet, .note = "no Python runs in troupe"}));
  add(member(a, &E::pooler_config, {.name = "pooler_config", .help = "Pooling settings (JSON).", .status = kNotYet, .note = "no pooling models yet"}));
  add(member(a, &E::override_pooler_config, {.name = "override_pooler_config", .help = "Deprecated in vLLM: use pooler_config.", .status = kNotYet, .note = "no pooling models yet"}));
  add(member(a, &E::compilation_config, {.name = "compilation_config", .help = "torch.compile and CUDA-graph settings (JSON).", .status = kNotYet, .note = kNoCompile}));
  add(member(a, &E::worker_cls, {.name = "worker_cls", .help = "Python class of the workers.", .status = kNotYet, .note = "no Python runs in troupe"}));
  add(member(a, &E::worker_extension_cls, {.name = "worker_extension_cls", .help = "Python class mixed into the workers.", .status = kNotYet, .note = "no Python runs in troupe"}));
  add(member(a, &E::kv_transfer_config, {.name = "kv_transfer_config", .help = "Disaggregated prefill: KV transfer settings (JSON).", .status = kNotYet, .note = "no disaggregated prefill yet"}));
  add(member(a, &E::kv_events_config, {.name = "kv_events_config", .help = "Publish KV-cache events (JSON).", .status = kNotYet, .note = "no KV events yet"}));
  add(member(a, &E::generation_config, {.name = "generation_config", .help = "Default sampling settings: auto reads the model's generation_config.json, vllm uses vLLM's defaults, a directory reads its generation_config.json.", .allowed = "auto|vllm|a directory", .valid = [](const json& v) { return !v.get_ref<const std::string&>().empty(); }}));
  add(member(a, &E::enable_sleep_mode, {.name = "enable_sleep_mode", .help = "Allow freeing GPU memory while idle.", .status = kNotYet, .note = "no sleep mode yet"}));
  add(member(a, &E::override_generation_config, {.name = "override_generation_config", .help = "Keys to override in the generation config (JSON).", .status = kNotYet, .note = "use the [sampling] table of an engine TOML"}));
  add(member(a, &E::model_impl, {.name = "model_impl", .help = "Which model implementation to use.", .choices = {"auto", "vllm", "transformers", "terratorch"}, .status = kNotYet, .note = "troupe has its own implementations only"}));
  add(member(a, &E::override_attention_dtype, {.name = "override_attention_dtype", .help = "Attention computation type.", .status = kNotYet, .note = "attention runs in the model dtype"}));
  add(member(a, &E::calculate_kv_scales, {.name = "calculate_kv_scales", .help = "Compute fp8 KV scales from data.", .status = kNotYet, .note = "no fp8 KV cache yet"}));
  add(member(a, &E::mamba_cache_dtype, {.name = "mamba_cache_dtype", .help = "Mamba state type.", .choices = {"auto", "float32"}, .status = kNotYet, .note = kNoMamba}));
  add(member(a, &E::mamba_ssm_cache_dtype, {.name = "mamba_ssm_cache_dtype", .help = "Mamba SSM state type.", .choices = {"auto", "float32"}, .status = kNotYet, .note = kNoMamba}));
  add(member(a, &E::mamba_block_size, {.name = "mamba_block_size", .help = "Mamba cache block size.", .status = kNotYet, .note = kNoMamba}));
  add(member(a, &E::additional_config, {.name = "additional_config", .help = "Platform plugin settings (JSON).", .status = kNotYet, .note = "no platform plugins"}));
  add(member(a, &E::use_tqdm_on_load, {.name = "use_tqdm_on_load", .help = "Progress bar while loading weights.", .status = kNotYet, .note = "loading logs progress lines"}));
  add(member(a, &E::pt_load_map_location, {.name = "pt_load_map_location", .help = "map_location for PyTorch checkpoints.", .status = kNotYet, .note = "troupe reads safetensors only"}));
  add(member(a, &E::enable_multimodal_encoder_data_parallel, {.name = "enable_multimodal_encoder_data_parallel", .help = "Deprecated in vLLM: use mm_encoder_tp_mode = data.", .status = kNotYet, .note = kNoMultimodal}));
  add(member(a, &E::logits_processors, {.name = "logits_processors", .help = "Python classes of custom logits processors.", .status = kNotYet, .note = "no Python runs in troupe"}));
  add(member(a, &E::stream_interval, {.name = "stream_interval", .help = "Tokens a streamed request gathers before its next output goes out: 1 sends every token at once; a larger value (e.g. 10) sends fewer, larger pieces, with less host work per token. A request's first token and its end go out at once.", .allowed = ">= 1", .valid = at_least(1)}));
  add(member(a, &E::async_scheduling, {.name = "async_scheduling", .help = "Plan the next step while the current one runs, so the GPU does not wait for the scheduler (a sequence that stops on a token runs one step more, whose output is dropped)."}));
  add(member(a, &E::kv_sharing_fast_prefill, {.name = "kv_sharing_fast_prefill", .help = "Skip prefill of layers that share KV (Gemma-3n style).", .status = kNotYet, .note = "no cross-layer KV sharing yet"}));
  // ---- front end ----
  add(member(a, &E::enable_log_requests, {.name = "enable_log_requests", .help = "Log each request (prompt cut at max_log_len)."}));
  add(member(a, &E::max_log_len, {.name = "max_log_len", .help = "Characters (or token ids) of a prompt shown in the request log. Default: all.", .allowed = "None or >= 0", .valid = at_least(0)}));
  // ---- multi-node ----
  add(member(a, &E::nnodes, {.name = "nnodes", .help = "Nodes the ranks are spread over (vLLM's multi-node flags; same as a cluster file).", .allowed = ">= 1", .valid = at_least(1)}));
  add(member(a, &E::node_rank, {.name = "node_rank", .help = "This node's index: 0 runs the engine (the head), others run --headless.", .allowed = ">= 0", .valid = at_least(0)}));
  add(member(a, &E::master_addr, {.name = "master_addr", .help = "Node 0's address, which the other nodes' workers dial."}));
  add(member(a, &E::master_port, {.name = "master_port", .help = "The head's port. Default: 29501 with several nodes, any free port with one.", .allowed = "None or 1..65535", .valid = [](const json& v) { return v.is_null() || (v.get<int64_t>() >= 1 && v.get<int64_t>() <= 65535); }}));
  add(member(a, &E::headless, {.name = "headless", .help = "Run only this node's workers (nodes past 0), joining the head at master_addr:master_port."}));
  // ---- troupe ----
  add(member(a, &E::cluster, {.name = "cluster", .help = "A cluster file (configs/cluster/*.toml): start the workers it names and run the ranks on them (what `troupe launch FILE -- generate` sets)."}));
  add(member(a, &E::executor_endpoints, {.name = "executor_endpoints", .help = "host:port of `troupe worker` processes to use as executors instead of in-process ones.", .allowed = "host:port, port 1..65535, no repeats", .valid = [](const json& v) {
    std::set<std::string> seen;
    for (const auto& e : v) {
      if (!valid_endpoint(e.get_ref<const std::string&>()) || !seen.insert(e.get<std::string>()).second) return false;
    }
    return true;
  }}));
  add(member(a, &E::logits_processor_plugin, {.name = "logits_processor_plugin", .help = "Shared libraries of logits processors (runtime/sampling/logits_processor_plugin.h) for requests to name in logits_processors; repeat the flag for several.", .allowed = "paths of plug-in libraries", .valid = [](const json& v) {
    for (const auto& e : v)
      if (e.get_ref<const std::string&>().empty()) return false;
    return true;
  }, .text_items = true}));
  add(member(a, &E::fault, {.name = "fault", .help = "Inject a fault (testing recovery): KIND:key=value,... e.g. kill-worker:rank=1,step=20; kinds kill-worker, kill-executor, freeze, drop, delay, ucx-fail, refuse-kv, slow (docs/faults.md). Repeat the flag for several.", .allowed = "fault specs (docs/faults.md)", .valid = [](const json& v) {
    for (const auto& e : v)
      if (e.get_ref<const std::string&>().empty()) return false;
    return true;
  }, .text_items = true}));
  add(member(a, &E::max_executor_restarts, {.name = "max_executor_restarts", .help = "Times in a row the engine replaces lost executors (restarting their workers) and recomputes their requests before it fails them; a step that completes resets the count. 0: a lost executor fails its requests at once.", .allowed = "0 .. 100", .valid = [](const json& v) { return v.get<int64_t>() >= 0 && v.get<int64_t>() <= 100; }}));
  add(member(a, &E::execute_timeout, {.name = "execute_timeout", .help = "Seconds a step may take on the executors before the ones that did not answer are taken for lost (as VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS).", .allowed = "> 0 and <= 86400", .valid = [](const json& v) { return v.get<double>() > 0 && v.get<double>() <= 86400; }}));
  // ---- legacy flags: no member of their own ----
  add(legacy<E, bool>(a, {.name = "worker_use_ray", .help = "Old vLLM flag: run workers as Ray actors.", .note = "no Ray in troupe: executors are actors already"}, "false",
      [](E&, const bool&) { return std::string("--worker-use-ray: no Ray in troupe; executors are already actors (in-process, or `troupe worker` processes listed in executor_endpoints); ignored"); }));
  add(legacy<E, bool>(a, {.name = "engine_use_ray", .help = "Old vLLM flag: run the engine as a Ray actor.", .note = "no Ray in troupe: the engine is an actor already"}, "false",
      [](E&, const bool&) { return std::string("--engine-use-ray: no Ray in troupe; the engine is already an actor; ignored"); }));
  add(legacy<E, int64_t>(a, {.name = "max_paddings", .help = "Old vLLM flag: most padding tokens in a batch.", .note = "no effect: the scheduler packs tokens without padding"}, "256",
      [](E&, const int64_t&) { return std::string("--max-paddings: no effect; troupe's V1-style scheduler packs tokens without padding; ignored"); }));
  add(legacy<E, int64_t>(a, {.name = "max_context_len_to_capture", .help = "Old name of max_seq_len_to_capture.", .note = "mapped to max_seq_len_to_capture"}, "None",
      [](E& e, const int64_t& v) {
        if (v < 1) throw Problem("allowed: >= 1");
        e.max_seq_len_to_capture = v;
        return fmt::format("--max-context-len-to-capture is the old name of --max-seq-len-to-capture: set max_seq_len_to_capture = {}", v);
      }));
  add(legacy<E, bool>(a, {.name = "use_v2_block_manager", .help = "Old vLLM flag: use the v2 block manager.", .note = "no effect: troupe has one block manager"}, "true",
      [](E&, const bool&) { return std::string("--use-v2-block-manager: no effect; troupe has one block manager; ignored"); }));
  add(legacy<E, bool>(a, {.name = "disable_log_requests", .help = "Old vLLM flag: renamed enable_log_requests (inverted).", .note = "mapped to enable_log_requests = !value"}, "false",
      [](E& e, const bool& v) {
        e.enable_log_requests = !v;
        return fmt::format("--disable-log-requests: vLLM renamed it --enable-log-requests; set enable_log_requests = {}", !v);
      }));
  // clang-format on
  return t;
}

const FieldTable<EngineArgs, build_table>& table() {
  return FieldTable<EngineArgs, build_table>::get();
}

/// The one-line notices that some supported values deserve (the legacy rows make their own).
void notice_for(const FieldInfo& f, const EngineArgs& a, std::vector<std::string>* notices) {
  if (!notices) return;
  if (f.name == "trust_remote_code" && a.trust_remote_code) {
    notices->push_back(
        "trust_remote_code: accepted, but no Python code runs in troupe; only architectures "
        "built into troupe load");
  }
}

}  // namespace

const std::vector<FieldInfo>& engine_arg_fields() {
  return table().fields;
}

void validate(const EngineArgs& a) {
  check_all(table().fields, table().defaults, &a);
  const int64_t ranks = a.tensor_parallel_size * a.pipeline_parallel_size;
  if (a.distributed_executor_backend == "uni" && ranks > 1)
    fail("distributed_executor_backend = uni: runs one rank in this process, but "
         "tensor_parallel_size x pipeline_parallel_size = {}; allowed: mp (or None)",
         ranks);
  if (a.cluster && !a.executor_endpoints.empty())
    fail("cluster = '{}' and executor_endpoints: give one or the other (a cluster file starts "
         "its own workers)",
         *a.cluster);
  if (a.cluster && a.nnodes > 1)
    fail("cluster = '{}' and nnodes = {}: give one or the other (vLLM's multi-node flags "
         "describe a cluster too)",
         *a.cluster, a.nnodes);
  if (!a.executor_endpoints.empty() && a.nnodes > 1)
    fail("executor_endpoints and nnodes = {}: give one or the other", a.nnodes);
  if (a.node_rank >= a.nnodes)
    fail("node_rank = {}: allowed: 0 .. nnodes - 1 = {}", a.node_rank, a.nnodes - 1);
  if (a.max_num_batched_tokens && *a.max_num_batched_tokens < a.max_num_seqs) {
    fail("max_num_batched_tokens = {}: allowed: >= max_num_seqs (max_num_seqs = {})",
         *a.max_num_batched_tokens, a.max_num_seqs);
  }
  (void)parse_fault_specs(a.fault);  // names the spec at fault
  if (a.preemption_mode == "swap" && a.swap_space <= 0) {
    fail(
        "preemption_mode = \"swap\": allowed only with swap_space > 0 (swap_space = {}); set "
        "--swap-space or use preemption_mode = \"recompute\"",
        a.swap_space);
  }
  if (a.swap_space_remote && a.preemption_mode != "swap")
    fail(
        "swap_space_remote = '{}': allowed only with preemption_mode = \"swap\" (preemption_mode "
        "= {}); without it there is no swap space to hold",
        *a.swap_space_remote, a.preemption_mode.value_or("None"));
  if (!a.cuda_graph_sizes.empty() && !a.cudagraph_capture_sizes.empty())
    fail("cuda_graph_sizes = [{}]: allowed: empty when cudagraph_capture_sizes is set (it is "
         "that field's old name)",
         fmt::join(a.cuda_graph_sizes, ", "));
  if (!a.cudagraph_capture_sizes.empty() && a.max_cudagraph_capture_size) {
    const int64_t largest =
        *std::max_element(a.cudagraph_capture_sizes.begin(), a.cudagraph_capture_sizes.end());
    if (*a.max_cudagraph_capture_size != largest)
      fail("max_cudagraph_capture_size = {}: allowed: None or {} (the largest of "
           "cudagraph_capture_sizes)",
           *a.max_cudagraph_capture_size, largest);
  }
  // Without chunked prefill a whole prompt must fit in one step.
  if (!a.enable_chunked_prefill && a.max_num_batched_tokens && a.max_model_len &&
      *a.max_num_batched_tokens < *a.max_model_len) {
    fail(
        "max_num_batched_tokens = {}: allowed: >= max_model_len ({}) when "
        "enable_chunked_prefill = false (a prompt must fit in one step)",
        *a.max_num_batched_tokens, *a.max_model_len);
  }
}

void validate(const SamplingParams& p, const EngineArgs& a) {
  if (a.max_logprobs < 0) return;
  if (p.logprobs && (*p.logprobs == -1 || *p.logprobs > a.max_logprobs)) {
    fail("logprobs = {}: allowed: <= max_logprobs ({}) of this engine", *p.logprobs,
         a.max_logprobs);
  }
  if (p.prompt_logprobs && (*p.prompt_logprobs == -1 || *p.prompt_logprobs > a.max_logprobs)) {
    fail("prompt_logprobs = {}: allowed: <= max_logprobs ({}) of this engine", *p.prompt_logprobs,
         a.max_logprobs);
  }
}

void set_engine_arg(EngineArgs& a, std::string_view name, std::string_view value,
                    std::vector<std::string>* notices) {
  EngineArgs copy = a;
  std::vector<std::string> new_notices;
  std::string token(value);
  set_from_text(table().fields, table().defaults, &copy, name, std::span(&token, 1), &new_notices,
                "engine argument");
  if (const FieldInfo* f = find_field(table().fields, name)) notice_for(*f, copy, &new_notices);
  a = std::move(copy);
  if (notices) notices->insert(notices->end(), new_notices.begin(), new_notices.end());
}

std::vector<int32_t> requested_capture_sizes(const EngineArgs& a) {
  std::vector<int32_t> sizes;
  if (!a.cudagraph_capture_sizes.empty()) {
    for (int64_t s : a.cudagraph_capture_sizes) sizes.push_back(int32_t(s));
  } else if (a.cuda_graph_sizes.size() == 1) {
    sizes = capture_size_pattern(a.cuda_graph_sizes[0], 8);  // vLLM's old rule: every 8
  } else if (!a.cuda_graph_sizes.empty()) {
    for (int64_t s : a.cuda_graph_sizes) sizes.push_back(int32_t(s));
  } else if (a.max_cudagraph_capture_size) {
    sizes = capture_size_pattern(*a.max_cudagraph_capture_size);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

int64_t effective_max_num_batched_tokens(const EngineArgs& a, int64_t model_max_len) {
  if (a.max_num_batched_tokens) return *a.max_num_batched_tokens;
  int64_t tokens = a.enable_chunked_prefill ? 8192 : std::max<int64_t>(model_max_len, 2048);
  return std::max(tokens, a.max_num_seqs);
}

nlohmann::json to_json(const EngineArgs& a) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : table().fields) {
    if (f.get) j[std::string(f.name)] = f.get(&a);
  }
  return j;
}

namespace config_detail {

// For the TOML loader (engine_config_file.cpp) and the command line: apply one value to an
// EngineArgs, with the notices a value deserves.
void apply_engine_value(EngineArgs& a, const FieldInfo& f, const json& value,
                        std::string_view label, std::vector<std::string>* notices) {
  const auto& fields = table().fields;
  apply_value(f, &a, table().defaults[size_t(&f - fields.data())], value, label, notices);
  notice_for(f, a, notices);
}

}  // namespace config_detail

}  // namespace troupe
