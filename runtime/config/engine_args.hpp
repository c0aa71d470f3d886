// EngineArgs: every engine setting, with vLLM's EngineArgs names, order and defaults
// (vllm/engine/arg_utils.py, v0.11), so `troupe::EngineArgs{.model = "dir",
// .max_num_seqs = 64}` reads as `EngineArgs(model="dir", max_num_seqs=64)` does in Python.
//
// Every field is described once in engine_arg_fields() (engine_args.cpp): kebab flag, type,
// default, help, allowed values and whether troupe supports it yet. Fields troupe does not
// support yet are refused by validate() (and by the TOML / command-line setters) when set to
// anything but their default; they are never silently ignored.
//
// Where troupe differs from vLLM, on purpose:
// - model defaults to "", which means the checkpoint troupe ships (default_model_dir(),
//   runtime/checkpoint/default_model.hpp): troupe loads local checkpoint directories only, so
//   vLLM's default hub name would not load.
// - seed, block_size, max_num_seqs, enable_prefix_caching and enable_chunked_prefill hold
//   the values vLLM resolves its `None` to (0, 16, 256, true, true); max_num_batched_tokens
//   stays optional, see effective_max_num_batched_tokens().
// - device and max_seq_len_to_capture (vLLM <= 0.10) are kept; enable_log_requests (vLLM's
//   AsyncEngineArgs) and max_log_len (vLLM's server flag) live here too, as do the legacy
//   flags listed in the table (worker_use_ray, max_paddings, disable_log_requests, ...), which
//   have no member of their own.
// - preemption_mode is vLLM V0's (SchedulerConfig), kept with swap_space, which it enables.
// - executor_endpoints is troupe's own: `troupe worker` processes to use as executors.
// - vLLM's private fields (_api_process_count, _api_process_rank) are left out.
// - vLLM's dict-valued fields (compilation_config, hf_overrides, speculative_config, ...) are
//   kept as JSON: troupe does not read them yet, so any value but the default is refused.
//
// vLLM's `None` is std::nullopt (or null JSON); `list | None` fields are empty when None.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/field_info.hpp"
#include "runtime/config/sampling_params.hpp"

namespace troupe {

struct EngineArgs {
  // ---- model ----
  std::string model;                           // the checkpoint directory; "": the embedded one
  std::vector<std::string> served_model_name;  // names in the API; empty = model
  std::optional<std::string> tokenizer;        // directory; unset = model
  std::optional<std::string> hf_config_path;
  std::string runner = "auto";
  std::string convert = "auto";
  std::optional<std::string> task;
  bool skip_tokenizer_init = false;
  bool enable_prompt_embeds = false;
  std::string tokenizer_mode = "auto";
  bool trust_remote_code = false;
  std::string allowed_local_media_path;
  std::vector<std::string> allowed_media_domains;
  std::optional<std::string> download_dir;
  std::string safetensors_load_strategy = "lazy";
  std::string load_format = "auto";  // auto | safetensors | dummy
  std::string config_format = "auto";
  std::string dtype = "auto";  // auto | float32 | float | bfloat16 | float16 | half
  std::string kv_cache_dtype = "auto";
  int64_t seed = 0;
  std::optional<int64_t> max_model_len;  // unset = the model's max_position_embeddings
  std::vector<int64_t> cuda_graph_sizes;
  std::vector<int64_t> cudagraph_capture_sizes;
  std::optional<int64_t> max_cudagraph_capture_size;
  // ---- parallelism ----
  std::optional<std::string> distributed_executor_backend;
  int64_t pipeline_parallel_size = 1;
  int64_t tensor_parallel_size = 1;
  int64_t decode_context_parallel_size = 1;
  int64_t data_parallel_size = 1;
  std::optional<int64_t> data_parallel_rank;
  std::optional<int64_t> data_parallel_start_rank;
  std::optional<int64_t> data_parallel_size_local;
  std::optional<std::string> data_parallel_address;
  std::optional<int64_t> data_parallel_rpc_port;
  bool data_parallel_hybrid_lb = false;
  std::string data_parallel_backend = "mp";
  bool enable_expert_parallel = false;
  std::optional<std::string> all2all_backend;
  bool enable_dbo = false;
  int64_t dbo_decode_token_threshold = 32;
  int64_t dbo_prefill_token_threshold = 512;
  bool disable_nccl_for_dp_synchronization = false;
  nlohmann::json eplb_config = nlohmann::json::object();
  bool enable_eplb = false;
  std::string expert_placement_strategy = "linear";
  int64_t num_redundant_experts = 0;
  int64_t eplb_window_size = 1000;
  int64_t eplb_step_interval = 3000;
  bool eplb_log_balancedness = false;
  std::optional<int64_t> max_parallel_loading_workers;
  // ---- KV cache and memory ----
  int64_t block_size = 16;  // tokens per KV block: a power of two in 1..256
  bool enable_prefix_caching = true;
  std::string prefix_caching_hash_algo = "sha256";
  bool disable_sliding_window = false;
  bool disable_cascade_attn = false;
  double swap_space = 4.0;  // GiB of CPU swap space per GPU (used when preempting by swap)
  std::optional<std::string> preemption_mode;  // None | "recompute" | "swap" (vLLM V0's)
  // host:port of a memory node (`troupe worker --kv-store GIB`) that holds each executor's
  // swap_space GiB instead of the executor's own host memory (troupe's, issue 19).
  std::optional<std::string> swap_space_remote;
  double cpu_offload_gb = 0.0;
  double gpu_memory_utilization = 0.9;           // (0, 1]
  std::optional<int64_t> kv_cache_memory_bytes;  // overrides gpu_memory_utilization
  // ---- scheduler ----
  std::optional<int64_t> max_num_batched_tokens;  // see effective_max_num_batched_tokens()
  int64_t max_num_partial_prefills = 1;
  int64_t max_long_partial_prefills = 1;
  int64_t long_prefill_token_threshold = 0;
  int64_t max_num_seqs = 256;
  int64_t max_logprobs = 20;  // -1 = no limit
  std::string logprobs_mode = "raw_logprobs";
  bool disable_log_stats = false;
  bool aggregate_engine_logging = false;
  std::optional<std::string> revision;
  std::optional<std::string> code_revision;
  nlohmann::json rope_scaling = nlohmann::json::object();
  std::optional<double> rope_theta;
  nlohmann::json hf_token;  // bool | str | None
  nlohmann::json hf_overrides = nlohmann::json::object();
  std::optional<std::string> tokenizer_revision;
  std::optional<std::string> quantization;
  bool enforce_eager = false;             // no CUDA graphs
  bool batch_invariant = false;           // Backend::set_batch_invariant (troupe's own flag)
  int64_t max_seq_len_to_capture = 8192;  // longest sequence run under a CUDA graph
  bool disable_custom_all_reduce = false;
  // ---- multimodal ----
  nlohmann::json limit_mm_per_prompt = nlohmann::json::object();
  bool enable_mm_embeds = false;
  bool interleave_mm_strings = false;
  nlohmann::json media_io_kwargs = nlohmann::json::object();
  nlohmann::json mm_processor_kwargs;
  bool disable_mm_preprocessor_cache = false;
  double mm_processor_cache_gb = 4.0;
  std::string mm_processor_cache_type = "lru";
  int64_t mm_shm_cache_max_object_size_mb = 128;
  std::string mm_encoder_tp_mode = "weights";
  std::optional<std::string> mm_encoder_attn_backend;
  std::optional<std::string> io_processor_plugin;
  bool skip_mm_profiling = false;
  std::optional<double> video_pruning_rate;
  // ---- LoRA ----
  bool enable_lora = false;
  int64_t max_loras = 1;
  int64_t max_lora_rank = 16;
  nlohmann::json default_mm_loras;
  bool fully_sharded_loras = false;
  std::optional<int64_t> max_cpu_loras;
  std::string lora_dtype = "auto";
  int64_t lora_extra_vocab_size = 256;
  // ---- device, loading, scheduling policy ----
  bool ray_workers_use_nsight = false;
  std::string device = "auto";  // auto | cpu | cuda
  std::optional<int64_t> num_gpu_blocks_override;
  int64_t num_lookahead_slots = 0;
  nlohmann::json model_loader_extra_config = nlohmann::json::object();
  std::vector<std::string> ignore_patterns = {"original/**/*"};
  bool enable_chunked_prefill = true;
  bool disable_chunked_mm_input = false;
  bool disable_hybrid_kv_cache_manager = false;
  nlohmann::json structured_outputs_config = nlohmann::json::object();
  std::string reasoning_parser;
  std::optional<std::string> guided_decoding_backend;
  std::optional<bool> guided_decoding_disable_fallback;
  std::optional<bool> guided_decoding_disable_any_whitespace;
  std::optional<bool> guided_decoding_disable_additional_properties;
  std::optional<std::string> logits_processor_pattern;
  nlohmann::json speculative_config;
  std::optional<std::string> show_hidden_metrics_for_version;
  std::optional<std::string> otlp_traces_endpoint;
  std::vector<std::string> collect_detailed_traces;
  std::string scheduling_policy = "fcfs";
  std::optional<std::string> scheduler_cls;  // unset = troupe's scheduler
  nlohmann::json pooler_config;
  nlohmann::json override_pooler_config;
  nlohmann::json compilation_config = nlohmann::json::object();
  std::string worker_cls = "auto";
  std::string worker_extension_cls;
  nlohmann::json kv_transfer_config;
  nlohmann::json kv_events_config;
  std::string generation_config = "auto";  // auto | vllm | a directory
  bool enable_sleep_mode = false;
  nlohmann::json override_generation_config = nlohmann::json::object();
  std::string model_impl = "auto";
  std::optional<std::string> override_attention_dtype;
  bool calculate_kv_scales = false;
  std::string mamba_cache_dtype = "auto";
  std::string mamba_ssm_cache_dtype = "auto";
  std::optional<int64_t> mamba_block_size;
  nlohmann::json additional_config = nlohmann::json::object();
  bool use_tqdm_on_load = true;
  std::string pt_load_map_location = "cpu";
  bool enable_multimodal_encoder_data_parallel = false;
  std::vector<std::string> logits_processors;
  bool async_scheduling = false;
  int64_t stream_interval = 1;  // tokens a streamed output waits for (vLLM's SchedulerConfig)
  bool kv_sharing_fast_prefill = false;
  // ---- front end (vLLM's AsyncEngineArgs and server flags) ----
  bool enable_log_requests = false;
  std::optional<int64_t> max_log_len;  // characters / ids of a prompt in the request log
  // ---- multi-node (vLLM's flags: every node runs the same command, nodes past 0 headless) ----
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::optional<int64_t> master_port;
  bool headless = false;
  // ---- troupe ----
  /// "host:port" of `troupe worker` processes to use as executors instead of in-process ones.
  std::vector<std::string> executor_endpoints;
  /// A cluster file (configs/cluster/*.toml): the workers it names are started and joined, and
  /// the ranks run on them (`troupe launch FILE -- generate ...` sets it).
  std::optional<std::string> cluster;
  /// Logits-processor plug-ins (runtime/sampling/logits_processor_plugin.h) that the engine and
  /// every executor load; requests name their processors in SamplingParams.logits_processors.
  std::vector<std::string> logits_processor_plugin;
  /// Faults to inject (runtime/faults/fault_spec.hpp; docs/faults.md), for testing recovery.
  std::vector<std::string> fault;
  /// Times in a row lost executors are replaced before their requests fail (0: never).
  int64_t max_executor_restarts = 3;
  /// Seconds a step may take before the executors that did not answer are taken for lost.
  double execute_timeout = 300.0;

  bool operator==(const EngineArgs&) const = default;
};

/// One row per EngineArgs field in declaration order, then the legacy flags.
const std::vector<FieldInfo>& engine_arg_fields();

/// Range, enum and consistency checks that need no model. Throws troupe::Error naming the
/// field, the value and what is allowed, or "<field> = <value>: not supported yet in troupe
/// (...)".
void validate(const EngineArgs& a);

/// Checks of a request against the engine: logprobs and prompt_logprobs <= max_logprobs.
void validate(const SamplingParams& p, const EngineArgs& a);

/// Sets one field from text as the command line gives it (`name` in snake, kebab or --flag
/// form; "no-<flag>" for a bool). Refuses bad and not-yet values at once; errors name the
/// --flag. Legacy flags are mapped and append a notice to `notices` (when not null).
void set_engine_arg(EngineArgs& a, std::string_view name, std::string_view value,
                    std::vector<std::string>* notices);

/// max_num_batched_tokens, or vLLM's default when unset: 8192 with chunked prefill, else
/// max(max_model_len, 2048); never below max_num_seqs. `model_max_len` is the resolved
/// max_model_len (from the model config when the field is unset).
[[nodiscard]] int64_t effective_max_num_batched_tokens(const EngineArgs& a, int64_t model_max_len);
/// The decode batch sizes the user asked to run as CUDA graphs, sorted and without repeats:
/// cudagraph_capture_sizes as given; cuda_graph_sizes (old name) as given, or for one value N
/// vLLM's old pattern 1, 2, 4, 8, 16, ..., N; max_cudagraph_capture_size alone: the default
/// pattern (1, 2, 4, every 8 to 256, every 16 past it) up to it. Empty: none asked for (the
/// executor's default, decode_capture_sizes). Sizes past what a decode step can hold are
/// dropped by the executor.
[[nodiscard]] std::vector<int32_t> requested_capture_sizes(const EngineArgs& a);

/// Every field with a member, with vLLM's names; None is null. For logs and `--dump-config`.
nlohmann::json to_json(const EngineArgs& a);

/// An engine TOML: top-level keys are EngineArgs fields, an optional [sampling] table holds
/// SamplingParams defaults.
struct EngineConfigFile {
  EngineArgs engine;
  SamplingParams sampling;
  std::vector<std::string> notices;  // legacy-flag notices, for the caller to log
};

/// Reads `path` over `base` / `sbase` and validates the result. Unknown keys, wrong types,
/// refused values and parse errors -> troupe::Error starting "<path>:<line>:<column>: ".
EngineConfigFile load_engine_toml(const std::filesystem::path& path, const EngineArgs& base = {},
                                  const SamplingParams& sbase = {});

/// The same, from TOML text; `source_name` stands for the path in errors. With
/// `validate_result` false the caller validates later (the command line applies its flags
/// on top of the file first).
EngineConfigFile parse_engine_toml(std::string_view text, std::string_view source_name,
                                   const EngineArgs& base = {}, const SamplingParams& sbase = {},
                                   bool validate_result = true);

}  // namespace troupe
