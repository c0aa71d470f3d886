#include "actors/engine.hpp"

#include <caf/io/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "actors/cache_manager_actor.hpp"
#include "actors/engine_actor.hpp"
#include "actors/executor_actor.hpp"
#include "actors/cluster_launch.hpp"
#include "actors/executor_group.hpp"
#include "actors/recovery.hpp"
#include "runtime/error.hpp"
#include "runtime/checkpoint/generation_config.hpp"
#include "runtime/models/model.hpp"

namespace troupe {

bool computes_on_cpu(const EngineArgs& args) {
  return args.device == "cpu" || (args.device == "auto" && cuda_device_count() == 0);
}

namespace fs = std::filesystem;

struct Engine::Impl {
  caf::actor_system& sys;
  EngineInfo info;
  ModelConfig model;
  std::shared_ptr<const Tokenizer> tokenizer;
  SamplingParams defaults;
  std::unique_ptr<ClusterLaunch> launch;  // a cluster file's workers (before the group: it
                                         // goes after the group has left them)
  std::shared_ptr<ExecutorGroup> group;  // shared with the recovery actor
  recovery_actor recovery;
  engine_actor engine;
  explicit Impl(caf::actor_system& s) : sys(s) {}
};


Engine::Engine(caf::actor_system& sys, EngineArgs args) : impl_(std::make_unique<Impl>(sys)) {
  const auto t0 = std::chrono::steady_clock::now();
  if (args.model.empty()) args.model = default_model_dir();
  validate(args);
  Impl& m = *impl_;
  const std::string dir = args.model;
  if (!fs::is_directory(dir))
    fail("model = '{}': not a directory (troupe loads a local Hugging Face checkpoint directory)",
         dir);
  m.model = load_model_config(dir);
  m.info.model_dir = dir;

  GenerationConfig gen;
  if (args.generation_config == "auto") gen = load_generation_config(dir);
  else if (args.generation_config != "vllm") gen = load_generation_config(args.generation_config);
  m.defaults = sampling_defaults_from(gen);

  m.info.tokenizer_dir = args.tokenizer ? *args.tokenizer : dir;
  if (!args.skip_tokenizer_init) m.tokenizer = Tokenizer::load(m.info.tokenizer_dir);

  // max_model_len: the model's, or a smaller one asked for.
  const auto model_len = int32_t(m.model.max_position_embeddings);
  int32_t max_len = model_len > 0 ? model_len : 2048;
  if (args.max_model_len) {
    if (*args.max_model_len > max_len)
      fail("max_model_len = {}: larger than the model's max_position_embeddings = {}",
           *args.max_model_len, max_len);
    max_len = int32_t(*args.max_model_len);
  }
  m.info.max_model_len = max_len;
  if (m.model.sliding_window && max_len > *m.model.sliding_window)
    fail(
        "{}: sliding_window = {}: sliding-window attention is not supported yet, and "
        "max_model_len {} is longer than the window; allowed: --max-model-len <= {} (where "
        "every sequence fits the window, full attention is the same)",
        (fs::path(dir) / "config.json").string(), *m.model.sliding_window, max_len,
        *m.model.sliding_window);

  // Device and dtype.
  std::string device = args.device;
  if (device == "auto") device = computes_on_cpu(args) ? "cpu" : "cuda";
  if (device == "cpu" && args.dtype != "auto" && args.dtype != "float32" && args.dtype != "float")
    fail("dtype = '{}': the CPU backend computes in float32; use --dtype auto or float32",
         args.dtype);
  m.info.device = device;

  const bool chunked = args.enable_chunked_prefill;
  const auto batched = int32_t(effective_max_num_batched_tokens(args, max_len));
  if (!chunked && batched < max_len)
    fail("max_num_batched_tokens = {}: without chunked prefill it must be >= max_model_len = {}",
         batched, max_len);

  ExecutorInit init;
  init.model_dir = fs::absolute(dir).string();
  init.load_format = args.load_format;
  init.dtype = args.dtype;
  init.device = device;
  init.block_size = int32_t(args.block_size);
  init.max_num_batched_tokens = batched;
  init.max_num_seqs = int32_t(args.max_num_seqs);
  init.max_model_len = max_len;
  init.seed = uint64_t(args.seed);
  init.kv_cache_memory_bytes = args.kv_cache_memory_bytes.value_or(0);
  init.gpu_memory_utilization = args.gpu_memory_utilization;
  init.num_gpu_blocks_override = args.num_gpu_blocks_override.value_or(0);
  init.enforce_eager = args.enforce_eager;
  init.batch_invariant = args.batch_invariant;
  init.max_seq_len_to_capture = int32_t(args.max_seq_len_to_capture);
  init.cudagraph_capture_sizes = requested_capture_sizes(args);
  // Swap space only when preempting by swap (the default recomputes: n > 1 samples are
  // independent sequences here), so a default engine pins no host memory.
  const bool swap = args.preemption_mode == "swap";
  init.swap_space_bytes = swap ? int64_t(args.swap_space * double(int64_t(1) << 30)) : 0;
  if (args.swap_space_remote) {
    // Until a GPU has run it: the staging copies would need pinned buffers and stream waits
    // that only the CPU backend has been tested with (docs/engine.md, "Remote swap space").
    if (device != "cpu")
      fail(
          "swap_space_remote = '{}' with device = {}: not supported yet (it has run on the CPU "
          "backend only); allowed: device = cpu, or no swap_space_remote (local swap space)",
          *args.swap_space_remote, device);
    init.swap_space_remote = *args.swap_space_remote;
  }
  // The engine loads the plug-ins too (to check the names requests give), first, so that a bad
  // path is one error before any executor loads; executors (remote ones too) load the same paths.
  std::shared_ptr<const LogitsProcessorPlugins> plugins;
  if (!args.logits_processor_plugin.empty()) {
    plugins = std::make_shared<const LogitsProcessorPlugins>(args.logits_processor_plugin);
    for (const auto& p : args.logits_processor_plugin)
      init.logits_processor_plugins.push_back(fs::absolute(p).string());
  }

  check_parallel_layout(m.model, args.tensor_parallel_size, args.pipeline_parallel_size);
  // Executors: in-process, `troupe worker` processes reached over the middleman (listed, or
  // started here for a parallel layout), or workers that joined a launcher.
  ExecutorGroupSpec spec;
  spec.tp = int32_t(args.tensor_parallel_size);
  spec.pp = int32_t(args.pipeline_parallel_size);
  spec.device = device;
  spec.endpoints = args.executor_endpoints;
  spec.custom_all_reduce = !args.disable_custom_all_reduce;
  if (auto cluster = cluster_of(args)) {
    // A cluster file or vLLM's multi-node flags: its parallel sizes rule, and the command
    // line may only repeat them.
    const auto differs = [](int64_t flag, int32_t file) { return flag != 1 && flag != file; };
    if (differs(args.tensor_parallel_size, cluster->tensor_parallel_size) ||
        differs(args.pipeline_parallel_size, cluster->pipeline_parallel_size))
      fail("tensor_parallel_size {} x pipeline_parallel_size {} on the command line, but the "
           "cluster has {} x {}: give them in one place",
           args.tensor_parallel_size, args.pipeline_parallel_size,
           cluster->tensor_parallel_size, cluster->pipeline_parallel_size);
    spec.tp = cluster->tensor_parallel_size;
    spec.pp = cluster->pipeline_parallel_size;
    check_parallel_layout(m.model, spec.tp, spec.pp);
    m.launch = std::make_unique<ClusterLaunch>(sys, *cluster);
    spec.joined_workers = m.launch->workers();
    spec.joined_names = m.launch->names();
    spec.joined_hosts = m.launch->hosts();
    ClusterLaunch* launch = m.launch.get();  // outlives the group (Impl's member order)
    spec.restart_joined = [launch](size_t rank) {
      caf::actor w = launch->restart(rank);
      return std::make_pair(w, launch->names()[rank]);
    };
    spec.joined_alive = [launch](size_t rank) { return launch->launched_alive(rank); };
    spec.spares_left = [launch] { return launch->spares_left(); };
    spec.take_spare = [launch](size_t rank) {
      caf::actor w = launch->take_spare(rank);
      return std::make_tuple(w, launch->names()[rank], launch->hosts()[rank]);
    };
    spec.give_back_spare = [launch](size_t rank) { launch->give_back_spare(rank); };
    spec.collectives = cluster->collectives;
    if (spec.collectives == "auto" && device != "cuda")
      spec.collectives = m.launch->one_host() ? "shm" : "ucx";
    spec.ucx_tls = cluster->ucx_tls;
    spec.ucx_net_devices = cluster->net_device;
    spec.timeout_ms = std::max(30000, cluster->heartbeat_timeout_ms);
  }
  spec.max_parallel_loading = size_t(args.max_parallel_loading_workers.value_or(0));
  spec.worker_args = {"--log-level", worker_log_level()};
  // Injected faults (issue 22): the flags' and the cluster file's, checked against the layout
  // before anything starts.
  std::vector<std::string> fault_texts = args.fault;
  int64_t max_restarts = args.max_executor_restarts;
  if (m.launch) {
    const ClusterConfig& c = m.launch->config();
    fault_texts.insert(fault_texts.end(), c.fault_inject.begin(), c.fault_inject.end());
    if (c.max_executor_restarts) max_restarts = *c.max_executor_restarts;
  }
  spec.faults = parse_fault_specs(fault_texts);
  check_fault_layout(spec.faults,
                     FaultLayout{spec.tp, spec.pp,
                                 spec.tp * spec.pp > 1 || !spec.endpoints.empty() ||
                                     !spec.joined_workers.empty()});
  for (const FaultSpec& f : spec.faults) spdlog::warn("engine: fault to inject: {}", f.text);
  // NCCL picks its all-reduce algorithm and chunking by message size, that is by the batch, and
  // no fixed-order all-reduce has run on GPUs; one rank's GEMMs and attention are invariant.
  if (args.batch_invariant && device == "cuda" && spec.tp > 1)
    fail(
        "batch_invariant = true with tensor_parallel_size = {} on device = cuda: not supported "
        "yet (NCCL's all-reduce order follows the batch's size); allowed: tensor_parallel_size "
        "= 1 (pipeline stages are fine), or device = cpu",
        spec.tp);
  m.group = std::make_shared<ExecutorGroup>(sys, spec, init);
  const int32_t num_blocks = m.group->num_blocks();
  m.info.backend = m.group->infos().front().backend;
  m.info.num_kv_blocks = num_blocks;
  m.info.num_cpu_blocks = swap ? m.group->num_cpu_blocks() : 0;
  m.info.block_size = int32_t(args.block_size);
  if (spec.tp * spec.pp > 1)
    spdlog::info("engine: {} ranks (tensor_parallel_size {} x pipeline_parallel_size {}):\n{}",
                 spec.tp * spec.pp, spec.tp, spec.pp, m.group->topology());

  EngineContext ctx;
  OutputProcessorConfig& rq = ctx.requests;
  rq.max_model_len = max_len;
  rq.vocab_size = int32_t(m.model.vocab_size);
  rq.max_logprobs = int32_t(args.max_logprobs);
  rq.seed = uint64_t(args.seed);
  for (auto e : (gen.eos_token_ids.empty() ? m.model.eos_token_ids : gen.eos_token_ids))
    rq.eos_token_ids.push_back(int32_t(e));
  if (rq.eos_token_ids.empty() && m.tokenizer && m.tokenizer->eos_token_id())
    rq.eos_token_ids.push_back(*m.tokenizer->eos_token_id());
  rq.log_requests = args.enable_log_requests;
  rq.max_log_len = int32_t(args.max_log_len.value_or(0));
  rq.stream_interval = int32_t(args.stream_interval);
  rq.plugins = plugins;
  rq.in_process_executors = m.group->in_process();
  rq.max_num_seqs = int32_t(args.max_num_seqs);
  rq.kv_blocks = num_blocks;
  rq.kv_block_size = int32_t(args.block_size);
  // A pipeline cuts a group's beams into micro-batches that never meet. (Beam forks copy KV
  // blocks with Backend::copy, model_runner.cpp, on either backend.)
  if (spec.pp > 1)
    rq.beam_search_refusal = fmt::format(
        "pipeline_parallel_size = {}: beam groups are stepped together, which the pipeline's "
        "micro-batches do not do; use pipeline_parallel_size = 1",
        spec.pp);
  ctx.tokenizer = m.tokenizer;
  if (m.tokenizer)
    ctx.tokenizers = TokenizerPool(sys, m.tokenizer,
                                   int(std::clamp(std::thread::hardware_concurrency(), 1u, 4u)));
  else
    ctx.tokenizers = TokenizerPool();
  ctx.cache_manager = spawn_cache_manager(sys, num_blocks, int32_t(args.block_size),
                                          args.enable_prefix_caching, m.info.num_cpu_blocks);
  ctx.executors = ExecutorRanks{m.group->executors(), m.group->names(), m.group->driver()};
  ctx.scheduler.policy.pipeline_parallel_size = int32_t(args.pipeline_parallel_size);
  ctx.scheduler.policy.max_num_batched_tokens = batched;
  ctx.scheduler.policy.max_num_seqs = int32_t(args.max_num_seqs);
  ctx.scheduler.policy.max_model_len = max_len;
  ctx.scheduler.policy.enable_chunked_prefill = chunked;
  ctx.scheduler.policy.async_scheduling = args.async_scheduling;
  ctx.scheduler.policy.preemption_mode = swap ? PreemptionMode::swap : PreemptionMode::recompute;
  ctx.scheduler.log_stats = !args.disable_log_stats;
  ctx.scheduler.max_executor_restarts = int32_t(max_restarts);
  ctx.scheduler.execute_timeout_seconds = args.execute_timeout;
  for (const FaultSpec& f : spec.faults)
    if (!f.on_rank()) ctx.scheduler.faults.push_back(f);
  // Also with max_executor_restarts = 0 (the scheduler then restarts nothing): it moves ranks
  // to other workers (drain_rank).
  m.recovery = spawn_recovery(sys, m.group);
  ctx.recovery = m.recovery;
  m.engine = spawn_engine_actor(sys, std::move(ctx));
  m.group->on_drain_request(caf::actor_cast<caf::actor>(m.engine));
  m.info.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("engine: {} ({}) on {}, max_model_len {}, {} KV blocks of {} tokens, ready in "
               "{:.2f} s",
               dir, m.model.architecture, m.info.backend, max_len, num_blocks, args.block_size,
               m.info.load_seconds);
  if (swap)
    spdlog::info("engine: preemption by swap, {} CPU blocks of swap space{}", m.info.num_cpu_blocks,
                 m.info.num_cpu_blocks == 0 ? " (too small for one block: every preemption "
                                              "recomputes)"
                                            : "");
}

Engine::~Engine() {
  if (!impl_) return;
  caf::anon_send_exit(impl_->engine, caf::exit_reason::user_shutdown);
  if (impl_->recovery) caf::anon_send_exit(impl_->recovery, caf::exit_reason::user_shutdown);
  if (impl_->group) impl_->group->shutdown();
}

engine_actor Engine::handle() const { return impl_->engine; }
const EngineInfo& Engine::info() const { return impl_->info; }
const ModelConfig& Engine::model_config() const { return impl_->model; }
std::shared_ptr<const Tokenizer> Engine::tokenizer() const { return impl_->tokenizer; }
const SamplingParams& Engine::default_sampling_params() const { return impl_->defaults; }

std::string Engine::drain_rank(size_t rank) {
  caf::scoped_actor self{impl_->engine.home_system()};
  std::string done;
  caf::error err;
  self->request(impl_->engine, caf::infinite, drain_atom::value, uint64_t(rank))
      .receive([&](std::string& d) { done = std::move(d); }, [&](caf::error& e) { err = e; });
  if (err) fail("drain_rank({}): {}", rank, error_text(err));
  return done;
}

}  // namespace troupe
