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
#include "runtime/error.hpp"
#include "runtime/checkpoint/generation_config.hpp"

namespace troupe {

namespace fs = std::filesystem;

struct Engine::Impl {
  caf::actor_system& sys;
  EngineInfo info;
  ModelConfig model;
  std::shared_ptr<const Tokenizer> tokenizer;
  SamplingParams defaults;
  std::vector<executor_actor> executors;
  engine_actor engine;
  explicit Impl(caf::actor_system& s) : sys(s) {}
};

namespace {

std::pair<std::string, uint16_t> parse_endpoint(const std::string& ep) {
  const auto colon = ep.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == ep.size())
    fail("executor_endpoints: '{}' is not host:port", ep);
  int port = 0;
  try {
    port = std::stoi(ep.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  if (port <= 0 || port > 65535) fail("executor_endpoints: '{}': port must be 1..65535", ep);
  return {ep.substr(0, colon), uint16_t(port)};
}

/// Asks `exec` to load the model and waits for its reply or its end, whichever comes first:
/// CAF answers no pending request when a remote worker's connection drops (its process was
/// killed while loading, or crashed), so a plain request would wait forever. `who` names the
/// executor in the error.
caf::expected<ExecutorInfo> init_executor(caf::actor_system& sys, const executor_actor& exec,
                                          const ExecutorInit& init, const std::string& who) {
  caf::scoped_actor self{sys};
  const caf::actor waiter = caf::actor_cast<caf::actor>(self);
  sys.spawn([exec, init, waiter, who](caf::event_based_actor* h) -> caf::behavior {
    h->monitor(exec);
    h->set_down_handler([=](caf::down_msg& dm) {
      if (dm.source != exec.address()) return;
      h->send(waiter, make_troupe_error(fmt::format("{} went down while loading the model ({})",
                                                    who, caf::to_string(dm.reason))));
      h->quit();
    });
    h->request(exec, caf::infinite, init_atom::value, init)
        .then(
            [=](const ExecutorInfo& info) {
              h->send(waiter, info);
              h->quit();
            },
            [=](caf::error& e) {
              h->send(waiter, std::move(e));
              h->quit();
            });
    return {[](caf::unit_t) {}};  // stays up until the reply or the down message
  });
  caf::expected<ExecutorInfo> out{caf::make_error(caf::sec::runtime_error)};
  self->receive([&](const ExecutorInfo& info) { out = info; },
                [&](caf::error& e) { out = std::move(e); });
  return out;
}

executor_actor connect_executor(caf::actor_system& sys, const std::string& endpoint) {
  auto [host, port] = parse_endpoint(endpoint);
  caf::error last;
  for (int attempt = 0; attempt < 50; ++attempt) {  // a worker may still be starting
    auto h = sys.middleman().remote_actor<executor_actor>(host, port);
    if (h) return *h;
    last = h.error();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  fail("executor_endpoints: cannot reach a troupe worker at {}: {}", endpoint, error_text(last));
}

}  // namespace

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

  // Device and dtype.
  std::string device = args.device;
  if (device == "auto") device = cuda_device_count() > 0 ? "cuda" : "cpu";
  if (device == "cpu" && args.dtype != "auto" && args.dtype != "float32" && args.dtype != "float")
    fail("dtype = '{}': the CPU backend computes in float32; use --dtype auto or float32",
         args.dtype);
  m.info.device = device;

  const bool chunked = args.enable_chunked_prefill;
  const auto batched = int32_t(effective_max_num_batched_tokens(args, max_len));
  if (!chunked && batched < max_len)
    fail("max_num_batched_tokens = {}: without chunked prefill it must be >= max_model_len = {}",
         batched, max_len);

  // Executors: in-process, or `troupe worker` processes reached over the middleman.
  if (!args.executor_endpoints.empty()) {
    for (const auto& ep : args.executor_endpoints) m.executors.push_back(connect_executor(sys, ep));
  } else {
    m.executors.push_back(spawn_executor(sys));
  }
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
  init.max_seq_len_to_capture = int32_t(args.max_seq_len_to_capture);
  init.cudagraph_capture_sizes = requested_capture_sizes(args);
  // Swap space only when preempting by swap (the default recomputes: n > 1 samples are
  // independent sequences here), so a default engine pins no host memory.
  const bool swap = args.preemption_mode == "swap";
  init.swap_space_bytes = swap ? int64_t(args.swap_space * double(int64_t(1) << 30)) : 0;
  // The engine loads the plug-ins too (to check the names requests give), first, so that a bad
  // path is one error before any executor loads; executors (remote ones too) load the same paths.
  std::shared_ptr<const LogitsProcessorPlugins> plugins;
  if (!args.logits_processor_plugin.empty()) {
    plugins = std::make_shared<const LogitsProcessorPlugins>(args.logits_processor_plugin);
    for (const auto& p : args.logits_processor_plugin)
      init.logits_processor_plugins.push_back(fs::absolute(p).string());
  }

  int32_t num_blocks = INT32_MAX;
  int32_t num_cpu_blocks = INT32_MAX;
  for (size_t i = 0; i < m.executors.size(); ++i) {
    init.tp_rank = int32_t(i);
    const std::string who =
        args.executor_endpoints.empty()
            ? fmt::format("executor {}", i)
            : fmt::format("executor {} (the worker at {})", i, args.executor_endpoints[i]);
    const auto info = init_executor(sys, m.executors[i], init, who);
    if (!info) {
      for (auto& e : m.executors) caf::anon_send_exit(e, caf::exit_reason::user_shutdown);
      throw Error(error_text(info.error()));
    }
    num_blocks = std::min(num_blocks, info->num_blocks);
    num_cpu_blocks = std::min(num_cpu_blocks, info->num_cpu_blocks);
    m.info.backend = info->backend;
  }
  m.info.num_kv_blocks = num_blocks;
  m.info.num_cpu_blocks = swap ? num_cpu_blocks : 0;
  m.info.block_size = int32_t(args.block_size);

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
  rq.plugins = plugins;
  rq.in_process_executors = args.executor_endpoints.empty();
  ctx.tokenizer = m.tokenizer;
  if (m.tokenizer)
    ctx.tokenizers = TokenizerPool(sys, m.tokenizer,
                                   int(std::clamp(std::thread::hardware_concurrency(), 1u, 4u)));
  else
    ctx.tokenizers = TokenizerPool();
  ctx.cache_manager = spawn_cache_manager(sys, num_blocks, int32_t(args.block_size),
                                          args.enable_prefix_caching, m.info.num_cpu_blocks);
  ctx.executors = m.executors;
  ctx.scheduler.policy.max_num_batched_tokens = batched;
  ctx.scheduler.policy.max_num_seqs = int32_t(args.max_num_seqs);
  ctx.scheduler.policy.max_model_len = max_len;
  ctx.scheduler.policy.enable_chunked_prefill = chunked;
  ctx.scheduler.policy.async_scheduling = args.async_scheduling;
  ctx.scheduler.policy.preemption_mode = swap ? PreemptionMode::swap : PreemptionMode::recompute;
  ctx.scheduler.log_stats = !args.disable_log_stats;
  m.engine = spawn_engine_actor(sys, std::move(ctx));
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
  for (auto& e : impl_->executors) caf::anon_send_exit(e, caf::exit_reason::user_shutdown);
}

engine_actor Engine::handle() const { return impl_->engine; }
const EngineInfo& Engine::info() const { return impl_->info; }
const ModelConfig& Engine::model_config() const { return impl_->model; }
std::shared_ptr<const Tokenizer> Engine::tokenizer() const { return impl_->tokenizer; }
const SamplingParams& Engine::default_sampling_params() const { return impl_->defaults; }

}  // namespace troupe
