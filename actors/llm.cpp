#include "actors/llm.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <unordered_map>

#include "actors/cluster_launch.hpp"
#include "actors/engine.hpp"
#include "actors/messages.hpp"
#include "runtime/api/progress_bar.hpp"
#include "runtime/error.hpp"

namespace troupe {

struct LLM::Impl {
  // Declaration order is destruction order reversed: the engine goes first, then the actor
  // system (which waits for every actor), then its config.
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<Engine> engine;
};

LLM::LLM(EngineArgs args) : impl_(std::make_unique<Impl>()) {
  // Logs go to stderr, so a program's stdout stays its own; a host that set up spdlog's
  // default logger itself keeps it.
  if (spdlog::default_logger()->name().empty()) {
    // The logger it replaces is kept alive for good: spdlog::info and friends log through a
    // raw pointer to the default logger, and an actor of another actor system may be logging
    // through it right now (an executor finishing; this crashed a test, 1 run in ~20 under
    // load, when a second engine was made while the first's executor shut down).
    static const auto* replaced = new std::shared_ptr<spdlog::logger>(spdlog::default_logger());
    (void)replaced;
    spdlog::set_default_logger(spdlog::stderr_color_mt("troupe"));
  }
  register_message_types(impl_->cfg);
  set_scheduler(impl_->cfg, computes_on_cpu(args));
  // Heartbeats so that a frozen remote worker is noticed within 5 s (CAF's default is never),
  // or within what the cluster file says.
  auto interval = std::chrono::milliseconds(500), timeout = std::chrono::milliseconds(5000);
  if (auto cluster = cluster_of(args)) {
    interval = std::chrono::milliseconds(cluster->heartbeat_interval_ms);
    timeout = std::chrono::milliseconds(cluster->heartbeat_timeout_ms);
  }
  set_heartbeat(impl_->cfg, interval, timeout);
  impl_->sys = std::make_unique<caf::actor_system>(impl_->cfg);
  impl_->engine = std::make_unique<Engine>(*impl_->sys, std::move(args));
}

LLM::~LLM() {
  if (!impl_) return;
  impl_->engine.reset();
  impl_->sys.reset();
}

SamplingParams LLM::get_default_sampling_params() const {
  return impl_->engine->default_sampling_params();
}
std::shared_ptr<const Tokenizer> LLM::get_tokenizer() const { return impl_->engine->tokenizer(); }
int32_t LLM::max_model_len() const { return impl_->engine->info().max_model_len; }
std::string LLM::backend() const { return impl_->engine->info().backend; }

namespace {
EngineStats engine_stats(caf::actor_system& sys, const engine_actor& engine) {
  caf::scoped_actor self{sys};
  EngineStats out;
  std::string err;
  self->request(engine, std::chrono::seconds(30), stats_atom::value)
      .receive([&](const EngineStats& s) { out = s; }, [&](caf::error& e) { err = error_text(e); });
  if (!err.empty()) fail("stats: {}", err);
  return out;
}
}  // namespace

SchedulerStats LLM::scheduler_stats() const {
  return engine_stats(*impl_->sys, impl_->engine->handle()).scheduler;
}
KVStats LLM::kv_stats() const {
  return engine_stats(*impl_->sys, impl_->engine->handle()).kv;
}
std::string LLM::drain_rank(size_t rank) { return impl_->engine->drain_rank(rank); }

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts) {
  return generate(prompts, get_default_sampling_params());
}

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts,
                                         const SamplingParams& params,
                                         const GenerateOptions& options) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params), options);
}

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts,
                                         const std::vector<SamplingParams>& params,
                                         const GenerateOptions& options) {
  std::vector<RequestOutput> outputs(prompts.size());
  generate(
      prompts, params, [&](size_t i, RequestOutput&& out) { outputs[i] = std::move(out); },
      options);
  return outputs;
}

std::vector<BeamSearchOutput> LLM::beam_search(const std::vector<Prompt>& prompts,
                                               const BeamSearchParams& params) {
  GenerateOptions options;
  options.use_tqdm = false;
  const std::vector<RequestOutput> outs = generate(prompts, to_sampling_params(params), options);
  std::vector<BeamSearchOutput> result;
  result.reserve(outs.size());
  for (const RequestOutput& o : outs) result.push_back(to_beam_search_output(o));
  return result;
}

void LLM::generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params,
                   const OutputCallback& on_output, const GenerateOptions& options) {
  if (params.size() != prompts.size())
    fail("generate: {} prompts but {} SamplingParams", prompts.size(), params.size());
  caf::scoped_actor self{*impl_->sys};
  const engine_actor engine = impl_->engine->handle();
  std::unordered_map<std::string, size_t> index;  // request id -> prompt index
  std::vector<bool> complete(prompts.size(), false);

  auto abort_running = [&] {
    for (const auto& [id, i] : index)
      if (!complete[i]) self->send(engine, abort_atom::value, id);
  };
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest req;
    req.prompt = prompts[i].text;
    req.prompt_token_ids = prompts[i].token_ids;
    req.params = params[i];
    std::string err;
    self->request(engine, caf::infinite, submit_atom::value, std::move(req),
                  caf::actor_cast<caf::actor>(self))
        .receive([&](const std::string& id) { index.emplace(id, i); },
                 [&](caf::error& e) { err = error_text(e); });
    if (!err.empty()) {
      abort_running();
      throw Error(prompts.size() > 1 ? fmt::format("prompt {}: {}", i, err) : err);
    }
  }

  ProgressBar bar(prompts.size(), options.use_tqdm);
  size_t done = 0;
  bool cancelled = false;
  std::string failure;
  while (done < prompts.size()) {
    self->receive(
        [&](output_atom, RequestOutput& out) {
          auto it = index.find(out.request_id);
          if (it == index.end() || !out.finished || complete[it->second]) return;
          size_t produced = 0;
          for (const auto& c : out.outputs) produced += c.token_ids.size();
          bar.advance(out.prompt_token_ids.size(), produced);
          if (!out.error.empty() && failure.empty()) failure = out.error;
          complete[it->second] = true;
          ++done;
          try {
            on_output(it->second, std::move(out));
          } catch (...) {
            abort_running();
            throw;
          }
          if (options.on_progress) options.on_progress(done, prompts.size());
        },
        caf::after(std::chrono::milliseconds(50)) >> [] {});
    if (!cancelled && options.cancel != nullptr && options.cancel->load()) {
      cancelled = true;
      abort_running();
    }
  }
  bar.finish();
  if (!failure.empty()) fail("generation failed: {}", failure);
}

}  // namespace troupe
