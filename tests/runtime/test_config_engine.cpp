// EngineArgs: the table against vLLM v0.11's field list and defaults, every validation rule,
// not-yet refusals, legacy notices and the command-line text setter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/config/engine_args.hpp"
#include "runtime/error.hpp"

using Catch::Matchers::Contains;
using troupe::EngineArgs;
using troupe::FieldInfo;

namespace {

// vLLM v0.11's public EngineArgs fields, in its declaration order (vllm/engine/arg_utils.py).
const std::vector<std::string> kVllmEngineFields = {"model",
                                                    "served_model_name",
                                                    "tokenizer",
                                                    "hf_config_path",
                                                    "runner",
                                                    "convert",
                                                    "task",
                                                    "skip_tokenizer_init",
                                                    "enable_prompt_embeds",
                                                    "tokenizer_mode",
                                                    "trust_remote_code",
                                                    "allowed_local_media_path",
                                                    "allowed_media_domains",
                                                    "download_dir",
                                                    "safetensors_load_strategy",
                                                    "load_format",
                                                    "config_format",
                                                    "dtype",
                                                    "kv_cache_dtype",
                                                    "seed",
                                                    "max_model_len",
                                                    "cuda_graph_sizes",
                                                    "cudagraph_capture_sizes",
                                                    "max_cudagraph_capture_size",
                                                    "distributed_executor_backend",
                                                    "pipeline_parallel_size",
                                                    "tensor_parallel_size",
                                                    "decode_context_parallel_size",
                                                    "data_parallel_size",
                                                    "data_parallel_rank",
                                                    "data_parallel_start_rank",
                                                    "data_parallel_size_local",
                                                    "data_parallel_address",
                                                    "data_parallel_rpc_port",
                                                    "data_parallel_hybrid_lb",
                                                    "data_parallel_backend",
                                                    "enable_expert_parallel",
                                                    "all2all_backend",
                                                    "enable_dbo",
                                                    "dbo_decode_token_threshold",
                                                    "dbo_prefill_token_threshold",
                                                    "disable_nccl_for_dp_synchronization",
                                                    "eplb_config",
                                                    "enable_eplb",
                                                    "expert_placement_strategy",
                                                    "num_redundant_experts",
                                                    "eplb_window_size",
                                                    "eplb_step_interval",
                                                    "eplb_log_balancedness",
                                                    "max_parallel_loading_workers",
                                                    "block_size",
                                                    "enable_prefix_caching",
                                                    "prefix_caching_hash_algo",
                                                    "disable_sliding_window",
                                                    "disable_cascade_attn",
                                                    "swap_space",
                                                    "preemption_mode",
                                                    "cpu_offload_gb",
                                                    "gpu_memory_utilization",
                                                    "kv_cache_memory_bytes",
                                                    "max_num_batched_tokens",
                                                    "max_num_partial_prefills",
                                                    "max_long_partial_prefills",
                                                    "long_prefill_token_threshold",
                                                    "max_num_seqs",
                                                    "max_logprobs",
                                                    "logprobs_mode",
                                                    "disable_log_stats",
                                                    "aggregate_engine_logging",
                                                    "revision",
                                                    "code_revision",
                                                    "rope_scaling",
                                                    "rope_theta",
                                                    "hf_token",
                                                    "hf_overrides",
                                                    "tokenizer_revision",
                                                    "quantization",
                                                    "enforce_eager",
                                                    "disable_custom_all_reduce",
                                                    "limit_mm_per_prompt",
                                                    "enable_mm_embeds",
                                                    "interleave_mm_strings",
                                                    "media_io_kwargs",
                                                    "mm_processor_kwargs",
                                                    "disable_mm_preprocessor_cache",
                                                    "mm_processor_cache_gb",
                                                    "mm_processor_cache_type",
                                                    "mm_shm_cache_max_object_size_mb",
                                                    "mm_encoder_tp_mode",
                                                    "mm_encoder_attn_backend",
                                                    "io_processor_plugin",
                                                    "skip_mm_profiling",
                                                    "video_pruning_rate",
                                                    "enable_lora",
                                                    "max_loras",
                                                    "max_lora_rank",
                                                    "default_mm_loras",
                                                    "fully_sharded_loras",
                                                    "max_cpu_loras",
                                                    "lora_dtype",
                                                    "lora_extra_vocab_size",
                                                    "ray_workers_use_nsight",
                                                    "num_gpu_blocks_override",
                                                    "num_lookahead_slots",
                                                    "model_loader_extra_config",
                                                    "ignore_patterns",
                                                    "enable_chunked_prefill",
                                                    "disable_chunked_mm_input",
                                                    "disable_hybrid_kv_cache_manager",
                                                    "structured_outputs_config",
                                                    "reasoning_parser",
                                                    "guided_decoding_backend",
                                                    "guided_decoding_disable_fallback",
                                                    "guided_decoding_disable_any_whitespace",
                                                    "guided_decoding_disable_additional_properties",
                                                    "logits_processor_pattern",
                                                    "speculative_config",
                                                    "show_hidden_metrics_for_version",
                                                    "otlp_traces_endpoint",
                                                    "collect_detailed_traces",
                                                    "scheduling_policy",
                                                    "scheduler_cls",
                                                    "pooler_config",
                                                    "override_pooler_config",
                                                    "compilation_config",
                                                    "worker_cls",
                                                    "worker_extension_cls",
                                                    "kv_transfer_config",
                                                    "kv_events_config",
                                                    "generation_config",
                                                    "enable_sleep_mode",
                                                    "override_generation_config",
                                                    "model_impl",
                                                    "override_attention_dtype",
                                                    "calculate_kv_scales",
                                                    "mamba_cache_dtype",
                                                    "mamba_ssm_cache_dtype",
                                                    "mamba_block_size",
                                                    "additional_config",
                                                    "use_tqdm_on_load",
                                                    "pt_load_map_location",
                                                    "enable_multimodal_encoder_data_parallel",
                                                    "logits_processors",
                                                    "async_scheduling",
                                                    "kv_sharing_fast_prefill"};

EngineArgs with_model() {
  return EngineArgs{.model = "m"};
}

/// validate() of args changed by `edit`; returns the error text, "" when valid.
template <class F>
std::string validate_error(F edit) {
  EngineArgs a = with_model();
  edit(a);
  try {
    troupe::validate(a);
  } catch (const troupe::Error& e) {
    return e.what();
  }
  return "";
}

std::string set_error(std::string_view name, std::string_view value) {
  EngineArgs a = with_model();
  try {
    troupe::set_engine_arg(a, name, value, nullptr);
  } catch (const troupe::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("EngineArgs is an aggregate with designated initialisers", "[config]") {
  static_assert(std::is_aggregate_v<EngineArgs>);
  EngineArgs a{.model = "dir", .max_model_len = 4096, .block_size = 32, .max_num_seqs = 64};
  CHECK(a.model == "dir");
  CHECK(a.max_model_len == 4096);
  CHECK(a.block_size == 32);
  CHECK(a.max_num_seqs == 64);
  CHECK(a.tensor_parallel_size == 1);
  CHECK(a ==
        EngineArgs{.model = "dir", .max_model_len = 4096, .block_size = 32, .max_num_seqs = 64});
}

TEST_CASE("EngineArgs defaults are vLLM's (as resolved by its V1 engine)", "[config]") {
  EngineArgs a;
  CHECK(a.tokenizer_mode == "auto");
  CHECK_FALSE(a.skip_tokenizer_init);
  CHECK(a.dtype == "auto");
  CHECK(a.seed == 0);
  CHECK_FALSE(a.max_model_len);
  CHECK(a.block_size == 16);
  CHECK(a.max_num_seqs == 256);
  CHECK_FALSE(a.max_num_batched_tokens);
  CHECK(a.enable_chunked_prefill);
  CHECK(a.enable_prefix_caching);
  CHECK(a.device == "auto");
  CHECK(a.load_format == "auto");
  CHECK(a.gpu_memory_utilization == 0.9);
  CHECK(a.swap_space == 4.0);
  CHECK_FALSE(a.enforce_eager);
  CHECK(a.max_seq_len_to_capture == 8192);
  CHECK(a.max_logprobs == 20);
  CHECK(a.generation_config == "auto");
  CHECK(a.pipeline_parallel_size == 1);
  CHECK(a.tensor_parallel_size == 1);
  CHECK(a.ignore_patterns == std::vector<std::string>{"original/**/*"});
  CHECK(a.executor_endpoints.empty());
}

TEST_CASE("the EngineArgs table has every vLLM field, in vLLM's order", "[config]") {
  std::vector<std::string> in_table;
  std::set<std::string> names;
  for (const auto& f : troupe::engine_arg_fields()) {
    names.insert(std::string(f.name));
    if (std::find(kVllmEngineFields.begin(), kVllmEngineFields.end(), f.name) !=
        kVllmEngineFields.end()) {
      in_table.push_back(std::string(f.name));
    }
  }
  CHECK(in_table == kVllmEngineFields);
  for (auto extra :
       {"device", "max_seq_len_to_capture", "enable_log_requests", "max_log_len",
        "executor_endpoints", "worker_use_ray", "engine_use_ray", "max_paddings",
        "max_context_len_to_capture", "use_v2_block_manager", "disable_log_requests"}) {
    CHECK(names.count(extra) == 1);
  }
  CHECK(names.size() == troupe::engine_arg_fields().size());  // no duplicates
}

TEST_CASE("the help of the backend-limited flags names where each works", "[config]") {
  // What each flag's refusal enforces (actors/engine.cpp); a text edit for one once changed both.
  std::map<std::string_view, std::string_view> help;
  for (const auto& f : troupe::engine_arg_fields()) help[f.name] = f.help;
  CHECK_THAT(std::string(help.at("swap_space_remote")), Contains("CPU backend only"));
  CHECK_THAT(std::string(help.at("batch_invariant")),
             Contains("CPU and CUDA backends") && Contains("tensor_parallel_size 1 only"));
}

TEST_CASE("every EngineArgs row is complete and its default text reads back", "[config]") {
  std::set<std::string_view> flags;
  const EngineArgs defaults;
  for (const auto& f : troupe::engine_arg_fields()) {
    INFO(f.name);
    std::string kebab(f.name);
    std::replace(kebab.begin(), kebab.end(), '_', '-');
    CHECK(f.flag == kebab);
    CHECK(flags.insert(f.flag).second);
    CHECK_FALSE(f.help.empty());
    CHECK_FALSE(f.type.empty());
    if (f.type != "str") CHECK_FALSE(f.default_text.empty());
    if (f.status != FieldInfo::Status::supported) CHECK_FALSE(f.note.empty());
    CHECK(bool(f.set));
    CHECK(bool(f.parse_text));
    if (f.status == FieldInfo::Status::legacy) {
      CHECK_FALSE(f.get);
      continue;
    }
    REQUIRE(f.get);
    // The default as --help prints it, parsed as the command line would, is the default.
    std::vector<std::string> tokens{std::string(f.default_text)};
    auto value = f.parse_text(tokens, f.name);
    EngineArgs a;
    f.set(&a, value, f.name, nullptr);
    CHECK(f.get(&a) == f.get(&defaults));
  }
}

TEST_CASE("validate accepts the defaults, with a model or without (the embedded one)", "[config]") {
  CHECK_NOTHROW(troupe::validate(with_model()));
  CHECK_NOTHROW(troupe::validate(EngineArgs{}));  // Engine resolves "" to default_model_dir()
}

TEST_CASE("EngineArgs range checks name the field, the value and what is allowed", "[config]") {
  CHECK_THAT(validate_error([](auto& a) { a.block_size = 24; }),
             Contains("block_size = 24: allowed: a power of two in 1..256"));
  CHECK_THAT(validate_error([](auto& a) { a.block_size = 0; }), Contains("block_size = 0"));
  CHECK_THAT(validate_error([](auto& a) { a.block_size = 512; }), Contains("block_size = 512"));
  CHECK(validate_error([](auto& a) { a.block_size = 1; }).empty());
  CHECK(validate_error([](auto& a) { a.block_size = 256; }).empty());
  CHECK_THAT(validate_error([](auto& a) { a.max_num_seqs = 0; }),
             Contains("max_num_seqs = 0: allowed: >= 1"));
  CHECK_THAT(validate_error([](auto& a) { a.stream_interval = 0; }),
             Contains("stream_interval = 0: allowed: >= 1"));
  CHECK(validate_error([](auto& a) { a.stream_interval = 16; }).empty());
  CHECK_THAT(validate_error([](auto& a) { a.gpu_memory_utilization = 0; }),
             Contains("gpu_memory_utilization = 0.0: allowed: (0, 1]"));
  CHECK_THAT(validate_error([](auto& a) { a.gpu_memory_utilization = 1.5; }),
             Contains("gpu_memory_utilization = 1.5"));
  CHECK(validate_error([](auto& a) { a.gpu_memory_utilization = 1.0; }).empty());
  CHECK_THAT(validate_error([](auto& a) { a.swap_space = -1; }),
             Contains("swap_space = -1.0: allowed: >= 0"));
  CHECK_THAT(validate_error([](auto& a) { a.max_model_len = 0; }), Contains("max_model_len = 0"));
  CHECK_THAT(validate_error([](auto& a) { a.kv_cache_memory_bytes = 0; }),
             Contains("kv_cache_memory_bytes = 0"));
  CHECK_THAT(validate_error([](auto& a) { a.num_gpu_blocks_override = 0; }),
             Contains("num_gpu_blocks_override = 0"));
  CHECK_THAT(validate_error([](auto& a) { a.max_num_batched_tokens = 0; }),
             Contains("max_num_batched_tokens = 0"));
  CHECK_THAT(validate_error([](auto& a) { a.max_logprobs = -2; }),
             Contains("max_logprobs = -2: allowed: >= -1"));
  CHECK(validate_error([](auto& a) { a.max_logprobs = -1; }).empty());
  CHECK_THAT(validate_error([](auto& a) { a.max_seq_len_to_capture = 0; }),
             Contains("max_seq_len_to_capture = 0"));
  CHECK_THAT(validate_error([](auto& a) { a.max_log_len = -1; }), Contains("max_log_len = -1"));
  CHECK_THAT(validate_error([](auto& a) {
               a.served_model_name = {"a", ""};
             }),
             Contains("served_model_name = [\"a\",\"\"]"));
  CHECK_THAT(validate_error([](auto& a) { a.generation_config = ""; }),
             Contains("generation_config = \"\""));
  CHECK(validate_error([](auto& a) { a.generation_config = "/ckpt/dir"; }).empty());
}

TEST_CASE("EngineArgs enums list their allowed values", "[config]") {
  CHECK_THAT(validate_error([](auto& a) { a.dtype = "int8"; }),
             Contains("dtype = \"int8\": allowed: auto|half|float16|bfloat16|float|float32"));
  for (auto d : {"auto", "half", "float16", "bfloat16", "float", "float32"}) {
    CHECK(validate_error([&](auto& a) { a.dtype = d; }).empty());
  }
  CHECK_THAT(validate_error([](auto& a) { a.device = "gpu"; }),
             Contains("device = \"gpu\": allowed: auto|cuda|cpu|tpu|xpu|hpu|neuron"));
  CHECK_THAT(validate_error([](auto& a) { a.load_format = "bogus"; }),
             Contains("load_format = \"bogus\": allowed:"));
  CHECK_THAT(validate_error([](auto& a) { a.tokenizer_mode = "fast"; }),
             Contains("tokenizer_mode = \"fast\": allowed: auto|slow|mistral|custom"));
  CHECK_THAT(validate_error([](auto& a) { a.kv_cache_dtype = "int4"; }),
             Contains("kv_cache_dtype = \"int4\": allowed:"));
}

TEST_CASE("partly supported EngineArgs fields refuse the rest as not supported yet", "[config]") {
  CHECK(validate_error([](auto& a) { a.tensor_parallel_size = 2; }).empty());
  CHECK_THAT(validate_error([](auto& a) { a.distributed_executor_backend = "ray"; }),
             Contains("distributed_executor_backend = \"ray\": not supported yet in troupe "
                      "(supported now: mp|uni;"));
  CHECK_THAT(validate_error([](auto& a) { a.tensor_parallel_size = 0; }),
             Contains("tensor_parallel_size = 0: allowed: >= 1"));
  CHECK(validate_error([](auto& a) { a.pipeline_parallel_size = 4; }).empty());
  CHECK_THAT(validate_error([](auto& a) { a.device = "tpu"; }),
             Contains("device = \"tpu\": not supported yet in troupe (supported now: "
                      "auto|cuda|cpu"));
  CHECK(validate_error([](auto& a) { a.device = "cpu"; }).empty());
  CHECK(validate_error([](auto& a) { a.device = "cuda"; }).empty());
  CHECK_THAT(validate_error([](auto& a) { a.load_format = "pt"; }),
             Contains("load_format = \"pt\": not supported yet in troupe"));
  for (auto f : {"auto", "safetensors", "dummy"}) {
    CHECK(validate_error([&](auto& a) { a.load_format = f; }).empty());
  }
  CHECK_THAT(validate_error([](auto& a) { a.tokenizer_mode = "slow"; }),
             Contains("tokenizer_mode = \"slow\": not supported yet in troupe"));
  CHECK(validate_error([](auto& a) { a.skip_tokenizer_init = true; }).empty());
  CHECK_THAT(validate_error([](auto& a) { a.revision = "main"; }),
             Contains("revision = \"main\": not supported yet in troupe"));
  CHECK(validate_error([](auto& a) { a.revision = ""; }).empty());
  CHECK_THAT(validate_error([](auto& a) { a.code_revision = "v1"; }),
             Contains("code_revision = \"v1\": not supported yet"));
  CHECK_THAT(validate_error([](auto& a) { a.tokenizer_revision = "v1"; }),
             Contains("tokenizer_revision = \"v1\": not supported yet"));
}

TEST_CASE("not-yet EngineArgs fields are refused when not at their default", "[config]") {
  CHECK_THAT(validate_error([](auto& a) { a.kv_cache_dtype = "fp8"; }),
             Contains("kv_cache_dtype = \"fp8\": not supported yet in troupe (the KV cache uses "
                      "the model dtype)"));
  CHECK_THAT(validate_error([](auto& a) { a.enable_lora = true; }),
             Contains("enable_lora = true: not supported yet in troupe"));
  CHECK_THAT(validate_error([](auto& a) { a.quantization = "awq"; }),
             Contains("quantization = \"awq\": not supported yet in troupe"));
  CHECK_THAT(validate_error([](auto& a) {
               a.compilation_config = {{"level", 3}};
             }),
             Contains("compilation_config = {\"level\":3}: not supported yet in troupe"));
  CHECK_THAT(validate_error([](auto& a) {
               a.speculative_config = {{"method", "ngram"}};
             }),
             Contains("speculative_config = "));
  // Every not-yet bool field, flipped through its raw setter, is caught by validate().
  int checked = 0;
  for (const auto& f : troupe::engine_arg_fields()) {
    if (f.status != FieldInfo::Status::not_yet || f.type != "bool") continue;
    INFO(f.name);
    EngineArgs a = with_model();
    f.set(&a, !f.get(&a).get<bool>(), f.name, nullptr);
    CHECK_THROWS_WITH(troupe::validate(a),
                      Contains(std::string(f.name) + " = ") && Contains("not supported yet"));
    ++checked;
  }
  CHECK(checked > 20);
}

TEST_CASE("CUDA-graph capture sizes: vLLM's three fields, checked and resolved", "[config]") {
  using troupe::requested_capture_sizes;
  EngineArgs a = with_model();
  CHECK(requested_capture_sizes(a).empty());  // the executor's default
  a.cudagraph_capture_sizes = {16, 1, 4, 4};
  CHECK(requested_capture_sizes(a) == std::vector<int32_t>{1, 4, 16});
  a.max_cudagraph_capture_size = 16;
  CHECK_NOTHROW(troupe::validate(a));
  a = with_model();
  a.max_cudagraph_capture_size = 40;
  CHECK(requested_capture_sizes(a) == std::vector<int32_t>{1, 2, 4, 8, 16, 24, 32, 40});
  a.max_cudagraph_capture_size = 300;
  const auto to_300 = requested_capture_sizes(a);
  CHECK(to_300.back() == 300);
  CHECK(std::find(to_300.begin(), to_300.end(), 272) != to_300.end());  // every 16 past 256
  CHECK(std::find(to_300.begin(), to_300.end(), 264) == to_300.end());
  a = with_model();
  a.cuda_graph_sizes = {20};  // the old name, one value: 1, 2, 4 and every 8 up to it
  CHECK(requested_capture_sizes(a) == std::vector<int32_t>{1, 2, 4, 8, 16, 20});
  a.cuda_graph_sizes = {2, 6};
  CHECK(requested_capture_sizes(a) == std::vector<int32_t>{2, 6});

  CHECK_THAT(validate_error([](auto& e) { e.cudagraph_capture_sizes = {8, 0}; }),
             Contains("cudagraph_capture_sizes = [8,0]") && Contains("sizes >= 1"));
  CHECK_THAT(validate_error([](auto& e) { e.max_cudagraph_capture_size = 0; }),
             Contains("max_cudagraph_capture_size = 0") && Contains(">= 1"));
  CHECK_THAT(validate_error([](auto& e) {
               e.cudagraph_capture_sizes = {1, 8};
               e.max_cudagraph_capture_size = 16;
             }),
             Contains("max_cudagraph_capture_size = 16: allowed: None or 8"));
  CHECK_THAT(validate_error([](auto& e) {
               e.cudagraph_capture_sizes = {1, 8};
               e.cuda_graph_sizes = {4};
             }),
             Contains("cuda_graph_sizes = [4]: allowed: empty when cudagraph_capture_sizes"));
}

TEST_CASE("cross-field EngineArgs checks", "[config]") {
  CHECK_THAT(validate_error([](auto& a) {
               a.max_num_seqs = 512;
               a.max_num_batched_tokens = 256;
             }),
             Contains("max_num_batched_tokens = 256: allowed: >= max_num_seqs (max_num_seqs = "
                      "512)"));
  CHECK_THAT(validate_error([](auto& a) {
               a.enable_chunked_prefill = false;
               a.max_model_len = 4096;
               a.max_num_batched_tokens = 2048;
             }),
             Contains("max_num_batched_tokens = 2048: allowed: >= max_model_len (4096) when "
                      "enable_chunked_prefill = false"));
  CHECK(validate_error([](auto& a) {
          a.max_model_len = 4096;
          a.max_num_batched_tokens = 2048;
        }).empty());
}

TEST_CASE("executor_endpoints must be host:port", "[config]") {
  CHECK(validate_error([](auto& a) {
          a.executor_endpoints = {"10.0.0.2:7000", "localhost:1", "[::1]:65535"};
        }).empty());
  for (auto bad : {"host", "host:0", "host:70000", ":80", "a:b", "::1:80", "[::1]"}) {
    INFO(bad);
    CHECK_THAT(validate_error([&](auto& a) { a.executor_endpoints = {bad}; }),
               Contains("executor_endpoints = ") && Contains("allowed: host:port"));
  }
  CHECK_THAT(validate_error([](auto& a) {
               a.executor_endpoints = {"h:1", "h:1"};
             }),
             Contains("no repeats"));
}

TEST_CASE("swap_space_remote must be host:port and needs preemption by swap", "[config]") {
  CHECK(validate_error([](auto& a) {
          a.preemption_mode = "swap";
          a.swap_space_remote = "10.0.0.2:7000";
        }).empty());
  for (auto bad : {"host", "host:0", ":80", "a:b", ""}) {
    INFO(bad);
    CHECK_THAT(validate_error([&](auto& a) {
                 a.preemption_mode = "swap";
                 a.swap_space_remote = bad;
               }),
               Contains("swap_space_remote = ") && Contains("allowed: None or host:port"));
  }
  CHECK_THAT(validate_error([](auto& a) { a.swap_space_remote = "h:1"; }),
             Contains("swap_space_remote = 'h:1'") && Contains("preemption_mode = \"swap\"") &&
                 Contains("preemption_mode = None"));
  EngineArgs a = with_model();
  troupe::set_engine_arg(a, "--swap-space-remote", "h:2", nullptr);
  REQUIRE(a.swap_space_remote);
  CHECK(*a.swap_space_remote == "h:2");
}

TEST_CASE("set_engine_arg takes snake, kebab and --flag names and command-line text", "[config]") {
  EngineArgs a = with_model();
  troupe::set_engine_arg(a, "max_num_seqs", "64", nullptr);
  troupe::set_engine_arg(a, "block-size", "32", nullptr);
  troupe::set_engine_arg(a, "--gpu-memory-utilization", "0.5", nullptr);
  troupe::set_engine_arg(a, "enforce-eager", "", nullptr);
  troupe::set_engine_arg(a, "no-enable-prefix-caching", "", nullptr);
  troupe::set_engine_arg(a, "enable_chunked_prefill", "false", nullptr);
  troupe::set_engine_arg(a, "served-model-name", "alias", nullptr);
  troupe::set_engine_arg(a, "executor-endpoints", "[\"h:1\", \"h:2\"]", nullptr);
  troupe::set_engine_arg(a, "compilation-config", "{}", nullptr);  // the default: accepted
  CHECK(a.max_num_seqs == 64);
  CHECK(a.block_size == 32);
  CHECK(a.gpu_memory_utilization == 0.5);
  CHECK(a.enforce_eager);
  CHECK_FALSE(a.enable_prefix_caching);
  CHECK_FALSE(a.enable_chunked_prefill);
  CHECK(a.served_model_name == std::vector<std::string>{"alias"});
  CHECK(a.executor_endpoints == std::vector<std::string>{"h:1", "h:2"});
}

TEST_CASE("integers take vLLM's human-readable forms and None", "[config]") {
  EngineArgs a = with_model();
  troupe::set_engine_arg(a, "max-model-len", "32k", nullptr);
  CHECK(a.max_model_len == 32000);
  troupe::set_engine_arg(a, "max-model-len", "32K", nullptr);
  CHECK(a.max_model_len == 32768);
  troupe::set_engine_arg(a, "max-model-len", "25.6k", nullptr);
  CHECK(a.max_model_len == 25600);
  troupe::set_engine_arg(a, "kv-cache-memory-bytes", "2G", nullptr);
  CHECK(a.kv_cache_memory_bytes == int64_t(2) << 30);
  troupe::set_engine_arg(a, "kv-cache-memory-bytes", "1.5g", nullptr);
  CHECK(a.kv_cache_memory_bytes == 1500000000);
  troupe::set_engine_arg(a, "max-model-len", "None", nullptr);
  CHECK_FALSE(a.max_model_len);
  CHECK_THAT(set_error("max-model-len", "1.5K"),
             Contains("--max-model-len = 1.5K: expected an integer"));
  CHECK_THAT(set_error("max-model-len", "1.0001k"), Contains("expected an integer"));
}

TEST_CASE("set_engine_arg errors name the flag", "[config]") {
  CHECK_THAT(set_error("max_num_seqs", "abc"),
             Contains("--max-num-seqs = abc: expected an integer"));
  CHECK_THAT(set_error("max-num-seqs", "0"), Contains("--max-num-seqs = 0: allowed: >= 1"));
  CHECK_THAT(set_error("gpu-memory-utilization", "high"),
             Contains("--gpu-memory-utilization = high: expected a number"));
  CHECK_THAT(set_error("enforce-eager", "maybe"),
             Contains("--enforce-eager = maybe: expected a boolean"));
  CHECK_THAT(set_error("data-parallel-size", "2"),
             Contains("--data-parallel-size = 2: not supported yet in troupe (data parallelism"));
  CHECK_THAT(set_error("kv-cache-dtype", "fp8"),
             Contains("--kv-cache-dtype = \"fp8\": not supported yet in troupe"));
  CHECK_THAT(set_error("compilation-config", "{not json"),
             Contains("--compilation-config = {not json: expected JSON"));
  CHECK_THAT(set_error("max-num-seq", "3"),
             Contains("unknown engine argument 'max-num-seq' (did you mean 'max_num_seqs'?)"));
  CHECK_THAT(set_error("frobnicate", "3"), Contains("unknown engine argument 'frobnicate'"));
  // A refused value leaves the args unchanged.
  EngineArgs a = with_model();
  CHECK_THROWS(troupe::set_engine_arg(a, "block-size", "24", nullptr));
  CHECK(a.block_size == 16);
}

TEST_CASE("legacy flags are accepted and mapped with a notice", "[config]") {
  EngineArgs a = with_model();
  std::vector<std::string> notices;
  troupe::set_engine_arg(a, "--worker-use-ray", "", &notices);
  troupe::set_engine_arg(a, "--engine-use-ray", "", &notices);
  troupe::set_engine_arg(a, "--max-paddings", "512", &notices);
  troupe::set_engine_arg(a, "--use-v2-block-manager", "", &notices);
  REQUIRE(notices.size() == 4);
  CHECK_THAT(notices[0], Contains("--worker-use-ray: no Ray in troupe"));
  CHECK_THAT(notices[1], Contains("--engine-use-ray: no Ray in troupe"));
  CHECK_THAT(notices[2], Contains("--max-paddings: no effect"));
  CHECK_THAT(notices[3], Contains("--use-v2-block-manager: no effect"));
  CHECK(a == with_model());  // they change nothing

  notices.clear();
  troupe::set_engine_arg(a, "max_context_len_to_capture", "4096", &notices);
  CHECK(a.max_seq_len_to_capture == 4096);
  REQUIRE(notices.size() == 1);
  CHECK_THAT(notices[0], Contains("old name of --max-seq-len-to-capture"));
  CHECK_THAT(set_error("max_context_len_to_capture", "0"),
             Contains("--max-context-len-to-capture = 0: allowed: >= 1"));

  notices.clear();
  troupe::set_engine_arg(a, "enable-log-requests", "true", &notices);
  troupe::set_engine_arg(a, "disable-log-requests", "", &notices);
  CHECK_FALSE(a.enable_log_requests);
  troupe::set_engine_arg(a, "disable-log-requests", "false", &notices);
  CHECK(a.enable_log_requests);
  REQUIRE(notices.size() == 2);
  CHECK_THAT(notices[0], Contains("renamed it --enable-log-requests"));

  notices.clear();
  troupe::set_engine_arg(a, "swap-space", "8", &notices);
  CHECK(a.swap_space == 8.0);
  CHECK(notices.empty());  // a supported field now: no notice

  notices.clear();
  troupe::set_engine_arg(a, "trust-remote-code", "", &notices);
  CHECK(a.trust_remote_code);
  REQUIRE(notices.size() == 1);
  CHECK_THAT(notices[0], Contains("no Python code runs in troupe"));
}

TEST_CASE("effective_max_num_batched_tokens follows vLLM's defaults", "[config]") {
  EngineArgs a = with_model();
  CHECK(troupe::effective_max_num_batched_tokens(a, 32768) == 8192);
  a.max_num_seqs = 10000;
  CHECK(troupe::effective_max_num_batched_tokens(a, 32768) == 10000);
  a.max_num_seqs = 256;
  a.enable_chunked_prefill = false;
  CHECK(troupe::effective_max_num_batched_tokens(a, 32768) == 32768);
  CHECK(troupe::effective_max_num_batched_tokens(a, 1024) == 2048);
  a.max_num_batched_tokens = 4096;
  CHECK(troupe::effective_max_num_batched_tokens(a, 32768) == 4096);
}

TEST_CASE("requests are checked against the engine's max_logprobs", "[config]") {
  EngineArgs a = with_model();
  CHECK_NOTHROW(troupe::validate(troupe::SamplingParams{.logprobs = 20}, a));
  CHECK_THROWS_WITH(troupe::validate(troupe::SamplingParams{.logprobs = 21}, a),
                    Contains("logprobs = 21: allowed: <= max_logprobs (20)"));
  CHECK_THROWS_WITH(troupe::validate(troupe::SamplingParams{.prompt_logprobs = -1}, a),
                    Contains("prompt_logprobs = -1"));
  a.max_logprobs = -1;
  CHECK_NOTHROW(troupe::validate(troupe::SamplingParams{.logprobs = -1}, a));
}

TEST_CASE("to_json(EngineArgs) has every member field with vLLM's names", "[config]") {
  auto j = troupe::to_json(EngineArgs{.model = "m", .max_model_len = 128});
  CHECK(j["model"] == "m");
  CHECK(j["max_model_len"] == 128);
  CHECK(j["max_num_batched_tokens"].is_null());
  CHECK(j["block_size"] == 16);
  CHECK(j["compilation_config"] == nlohmann::json::object());
  CHECK_FALSE(j.contains("worker_use_ray"));
  // + device, max_seq_len_to_capture, enable_log_requests, max_log_len, executor_endpoints;
  // nnodes, node_rank, master_addr, master_port, headless (the multi-node flags of later
  // vLLMs' serve command), cluster and logits_processor_plugin; fault, max_executor_restarts
  // and execute_timeout (troupe's fault injection and recovery); swap_space_remote;
  // batch_invariant; stream_interval (a later vLLM's SchedulerConfig field)
  CHECK(j.size() == kVllmEngineFields.size() + 18);
  CHECK(j["stream_interval"] == 1);
  for (const char* f : {"nnodes", "node_rank", "master_addr", "master_port", "headless", "cluster",
                        "logits_processor_plugin", "fault", "max_executor_restarts",
                        "execute_timeout", "swap_space_remote", "batch_invariant",
                        "stream_interval"})
    CHECK(j.contains(f));
}

TEST_CASE("preemption_mode: None, recompute or swap, and swap needs swap space", "[config][swap]") {
  CHECK(EngineArgs{}.preemption_mode == std::nullopt);
  CHECK(validate_error([](auto& a) { a.preemption_mode = "recompute"; }).empty());
  CHECK(validate_error([](auto& a) { a.preemption_mode = "swap"; }).empty());
  const std::string bogus = validate_error([](auto& a) { a.preemption_mode = "bogus"; });
  CHECK_THAT(bogus, Contains("preemption_mode = \"bogus\": allowed: recompute|swap"));
  const std::string no_space = validate_error([](auto& a) {
    a.preemption_mode = "swap";
    a.swap_space = 0;
  });
  CHECK_THAT(no_space, Contains("preemption_mode = \"swap\"") && Contains("swap_space = 0"));
  // Recompute needs no swap space.
  CHECK(validate_error([](auto& a) {
          a.preemption_mode = "recompute";
          a.swap_space = 0;
        }).empty());
  // The command line and TOML take it too.
  EngineArgs a = with_model();
  troupe::set_engine_arg(a, "preemption-mode", "swap", nullptr);
  CHECK(a.preemption_mode == "swap");
  CHECK_THROWS_WITH(troupe::set_engine_arg(a, "preemption-mode", "bogus", nullptr),
                    Contains("--preemption-mode = \"bogus\"") && Contains("recompute|swap"));
  const auto c = troupe::parse_engine_toml(
      "model = \"m\"\npreemption_mode = \"swap\"\nswap_space = 0.5\n", "engine.toml");
  CHECK(c.engine.preemption_mode == "swap");
  CHECK_THROWS_WITH(
      troupe::parse_engine_toml("model = \"m\"\npreemption_mode = \"swap\"\nswap_space = 0\n",
                                "engine.toml"),
      Contains("preemption_mode = \"swap\"") && Contains("swap_space = 0"));
}
