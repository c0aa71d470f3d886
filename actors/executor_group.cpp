#include "actors/executor_group.hpp"

#include <caf/io/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <thread>

#include "actors/group_call.hpp"
#include "runtime/error.hpp"
#include "runtime/faults/fault_spec.hpp"

namespace troupe {

std::pair<std::string, uint16_t> parse_endpoint(const std::string& ep, std::string_view field) {
  const auto colon = ep.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == ep.size())
    fail("{}: '{}' is not host:port", field, ep);
  int port = 0;
  try {
    port = std::stoi(ep.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  if (port <= 0 || port > 65535) fail("{}: '{}': port must be 1..65535", field, ep);
  return {ep.substr(0, colon), uint16_t(port)};
}

namespace {

caf::actor connect_worker(caf::actor_system& sys, const std::string& endpoint) {
  auto [host, port] = parse_endpoint(endpoint, "executor_endpoints");
  caf::error last;
  for (int attempt = 0; attempt < 50; ++attempt) {  // a worker may still be starting
    auto h = sys.middleman().remote_actor<worker_actor>(host, port);
    if (h) return caf::actor_cast<caf::actor>(*h);
    last = h.error();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  fail("executor_endpoints: cannot reach a troupe worker at {}: {}", endpoint, error_text(last));
}

std::string head_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return fmt::format("{} pid {}", host, getpid());
}

std::string host_of(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  return colon == std::string::npos ? endpoint : endpoint.substr(0, colon);
}

}  // namespace

ExecutorGroup::ExecutorGroup(caf::actor_system& sys, const ExecutorGroupSpec& spec,
                             const ExecutorInit& init)
    : sys_(&sys), spec_(spec), init_(init), tp_(spec.tp), pp_(spec.pp) {
  try {
    find_workers();
    start_ranks();
  } catch (...) {
    shutdown();
    throw;
  }
}

ExecutorGroup::~ExecutorGroup() { shutdown(); }

void ExecutorGroup::find_workers() {
  caf::actor_system& sys = *sys_;
  const ExecutorGroupSpec& spec = spec_;
  const int32_t n = tp_ * pp_;
  if (tp_ < 1 || pp_ < 1) fail("tensor_parallel_size {} x pipeline_parallel_size {}", tp_, pp_);
  std::vector<std::string>& endpoints = endpoint_list_;
  endpoints = spec.endpoints;
  if (!spec.joined_workers.empty()) {
    if (spec.joined_workers.size() != size_t(n))
      fail("{} workers joined for tensor_parallel_size {} x pipeline_parallel_size {} = {} ranks",
           spec.joined_workers.size(), tp_, pp_, n);
    workers_ = spec.joined_workers;
    where_ = spec.joined_names;
  } else {
    if (endpoints.empty() && n > 1) {
      local_ = LocalWorkers(n, spec.worker_args, spec.worker_start_timeout);
      endpoints = local_.endpoints();
    }
    if (!endpoints.empty() && endpoints.size() != size_t(n))
      fail("executor_endpoints: {} worker(s) listed for tensor_parallel_size {} x "
           "pipeline_parallel_size {} = {} ranks; list one per rank",
           endpoints.size(), tp_, pp_, n);
    for (const std::string& ep : endpoints) {
      workers_.push_back(connect_worker(sys, ep));
      where_.push_back(fmt::format("the worker at {}", ep));
    }
  }
  if (workers_.empty()) where_.push_back("in this process");
}

void ExecutorGroup::start_ranks() {
  caf::actor_system& sys = *sys_;
  const ExecutorGroupSpec& spec = spec_;
  const ExecutorInit& base = init_;
  const int32_t n = tp_ * pp_;
  const std::vector<std::string>& endpoints = endpoint_list_;
  executors_.clear();
  names_.clear();
  endpoints_.clear();
  infos_.clear();
  devices_.clear();
  // Lives until the executors are stopped (the workers' sessions end with it), and hears
  // workers asking to leave (drain_atom: `troupe worker` on SIGTERM).
  anchor_ = sys.spawn([table = drain_](caf::event_based_actor* self) -> caf::behavior {
    return {[=](drain_atom, const caf::actor& worker) -> caf::result<std::string> {
      caf::actor engine;
      size_t rank = 0;
      std::string name;
      {
        std::lock_guard lk(table->mu);
        const auto it = std::find(table->workers.begin(), table->workers.end(), worker.address());
        if (it == table->workers.end())
          return make_troupe_error("this worker holds no rank of the engine any more");
        rank = size_t(it - table->workers.begin());
        engine = table->engine;
        name = table->names[rank];
      }
      if (!engine) return make_troupe_error("the engine is not running yet");
      spdlog::warn("engine: {} asks to leave; moving its rank to another worker", name);
      auto rp = self->make_response_promise<std::string>();
      self->request(engine, caf::infinite, drain_atom::value, uint64_t(rank))
          .then([=](std::string& done) mutable { rp.deliver(std::move(done)); },
                [=](caf::error& e) mutable { rp.deliver(e); });
      return rp;
    }};
  });
  if (workers_.empty()) {
    executors_.push_back(spawn_executor(sys));
  } else {
    caf::scoped_actor self{sys};
    const WorkerJoin join{head_name(), anchor_};
    for (size_t i = 0; i < workers_.size(); ++i) {
      // A worker whose previous session (before a restart) is still ending answers busy for
      // a moment: asked again, for up to 10 s.
      std::string err;
      for (int attempt = 0; attempt < 100; ++attempt) {
        err.clear();
        bool busy = false;
        self->request(caf::actor_cast<worker_actor>(workers_[i]), std::chrono::seconds(30),
                      join_atom::value, join)
            .receive(
                [&](caf::actor& exec) {
                  executors_.push_back(caf::actor_cast<executor_actor>(exec));
                },
                [&](caf::error& e) {
                  err = error_text(e);
                  busy = err.find(" is busy: ") != std::string::npos;
                });
        if (!busy) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!err.empty()) fail("{}: {}", where_[i], err);
    }
  }
  for (int32_t r = 0; r < n; ++r) {
    if (workers_.empty())
      names_.push_back("executor 0");
    else if (n == 1)
      names_.push_back(fmt::format("executor 0 ({})", where_[0]));
    else
      names_.push_back(fmt::format("executor {} (tp {}, pp {}; {})", r, r % tp_, r / tp_,
                                   where_[size_t(r)]));
  }

  // ---- prepare: each rank's ends of the wires ----
  hosts_.assign(size_t(n), "this host");
  for (int32_t r = 0; r < n; ++r) {
    if (size_t(r) < endpoints.size()) hosts_[size_t(r)] = host_of(endpoints[size_t(r)]);
    else if (size_t(r) < spec.joined_hosts.size()) hosts_[size_t(r)] = spec.joined_hosts[size_t(r)];
  }
  const std::vector<ExecutorPlacement> placements = this->placements(hosts_);
  for (const ExecutorPlacement& p : placements)
    devices_.push_back(spec.device == "cuda" ? fmt::format("cuda:{}", p.device_index) : "cpu");
  const size_t all = size_t(n);
  auto got = call_each<ExecutorEndpoints>(sys, executors_, names_, all, [&](size_t i) {
    return std::make_tuple(prepare_atom::value, placements[i]);
  });
  if (!got) throw Error(error_text(got.error()));
  endpoints_ = std::move(*got);

  // ---- connect: every rank at once ----
  const std::vector<WirePeers> peers = peers_of(endpoints_);
  auto connected = call_each<bool>(sys, executors_, names_, all, [&](size_t i) {
    return std::make_tuple(connect_atom::value, peers[i]);
  });
  if (!connected) throw Error(error_text(connected.error()));

  // ---- init: load the weights, a few ranks at a time ----
  std::vector<ExecutorInit> inits;
  for (int32_t r = 0; r < n; ++r) inits.push_back(init_of(r, placements[size_t(r)]));
  // Ranks sharing one GPU (pipeline stages of one small machine; NCCL refuses TP ranks on one
  // GPU) split --gpu-memory-utilization between them, and load and start one after another, so
  // that each measures the memory it takes itself.
  std::map<std::string, int32_t> per_device;
  for (const std::string& d : devices_) ++per_device[d];
  bool shared_gpu = false;
  for (int32_t r = 0; r < n; ++r) {
    const int32_t sharing = per_device[devices_[size_t(r)]];
    if (spec.device == "cuda" && sharing > 1 && !local_.pids().empty()) {
      inits[size_t(r)].gpu_memory_utilization = base.gpu_memory_utilization / double(sharing);
      shared_gpu = true;
    }
  }
  if (shared_gpu)
    spdlog::info("engine: {} ranks share a GPU: each gets 1/{} of gpu_memory_utilization and "
                 "they start one at a time",
                 n, per_device.begin()->second);
  const size_t parallel =
      shared_gpu ? 1 : (spec.max_parallel_loading > 0 ? spec.max_parallel_loading : all);
  auto loaded = call_each<ExecutorInfo>(sys, executors_, names_, parallel, [&](size_t i) {
    return std::make_tuple(init_atom::value, inits[i]);
  });
  if (!loaded) throw Error(error_text(loaded.error()));
  for (size_t i = 1; i < loaded->size(); ++i)
    if ((*loaded)[i].checkpoint_fingerprint != (*loaded)[0].checkpoint_fingerprint)
      fail("{} loaded a different checkpoint ({}) from {} ({}): every rank must read the same "
           "model directory",
           names_[i], (*loaded)[i].checkpoint_fingerprint, names_[0],
           (*loaded)[0].checkpoint_fingerprint);

  // ---- start: size the KV caches and record the graphs, every rank at once ----
  auto started = call_each<ExecutorInfo>(sys, executors_, names_, shared_gpu ? 1 : all,
                                         [&](size_t) { return std::make_tuple(start_atom::value); });
  if (!started) throw Error(error_text(started.error()));
  infos_ = std::move(*started);
  publish_drain_table();
}

std::vector<ExecutorPlacement> ExecutorGroup::placements(
    const std::vector<std::string>& hosts) const {
  const ExecutorGroupSpec& spec = spec_;
  const int32_t n = tp_ * pp_;
  bool one_host = true;
  for (const std::string& h : hosts) one_host = one_host && h == hosts.front();
  std::string collectives = "none";
  if (tp_ > 1) {
    collectives = spec.collectives;
    if (collectives == "auto")
      collectives = spec.device == "cuda" ? "nccl" : (one_host ? "shm" : "ucx");
  }
  // Where each rank runs, to share a host's cores between its CPU ranks.
  std::map<std::string, int32_t> ranks_per_host;
  for (const std::string& h : hosts) ++ranks_per_host[h];
  std::vector<ExecutorPlacement> out(static_cast<size_t>(n));
  const int local_devices = spec.device == "cuda" ? std::max(1, cuda_device_count()) : 1;
  for (int32_t r = 0; r < n; ++r) {
    ExecutorPlacement& p = out[size_t(r)];
    p.tp_rank = r % tp_;
    p.tp_size = tp_;
    p.pp_rank = r / tp_;
    p.pp_size = pp_;
    p.device = spec.device;
    p.device_index = spec.device == "cuda" ? r % local_devices : 0;
    p.collectives = collectives;
    p.custom_all_reduce = spec.custom_all_reduce && collectives == "nccl" && one_host;
    p.stage_link = pp_ > 1 ? "ucx" : "none";
    p.ucx_tls = spec.ucx_tls;
    p.ucx_net_devices = spec.ucx_net_devices;
    p.timeout_ms = spec.timeout_ms;
    p.ranks_on_host = ranks_per_host[hosts[size_t(r)]];
  }
  return out;
}

ExecutorInit ExecutorGroup::init_of(int32_t r, const ExecutorPlacement& p) const {
  ExecutorInit in = init_;
  in.tp_rank = p.tp_rank;
  in.tp_size = tp_;
  in.pp_rank = p.pp_rank;
  in.pp_size = pp_;
  in.device = spec_.device;
  in.device_index = p.device_index;
  in.in_worker_process = !workers_.empty();
  for (const FaultSpec& f : spec_.faults)
    if (f.on_rank() && f.rank == r) in.faults.push_back(f.text);
  return in;
}

std::vector<WirePeers> ExecutorGroup::peers_of(const std::vector<ExecutorEndpoints>& ends) const {
  const int32_t n = tp_ * pp_;
  std::vector<WirePeers> peers(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) {
    WirePeers& w = peers[size_t(r)];
    const int32_t stage = r / tp_, t = r % tp_;
    if (tp_ > 1)
      for (int32_t k = 0; k < tp_; ++k) w.tp.push_back(ends[size_t(stage * tp_ + k)].collectives);
    if (pp_ > 1)
      for (int32_t k = 0; k < pp_; ++k) w.stages.push_back(ends[size_t(k * tp_ + t)].stage);
  }
  return peers;
}

void ExecutorGroup::publish_drain_table() {
  std::lock_guard lk(drain_->mu);
  drain_->workers.clear();
  for (const caf::actor& w : workers_) drain_->workers.push_back(w.address());
  drain_->names = names_;
}

void ExecutorGroup::on_drain_request(caf::actor engine) {
  std::lock_guard lk(drain_->mu);
  drain_->engine = std::move(engine);
}

int32_t ExecutorGroup::num_blocks() const {
  int32_t m = INT32_MAX;
  for (const ExecutorInfo& i : infos_) m = std::min(m, i.num_blocks);
  return infos_.empty() ? 0 : m;
}

int32_t ExecutorGroup::num_cpu_blocks() const {
  int32_t m = INT32_MAX;
  for (const ExecutorInfo& i : infos_) m = std::min(m, i.num_cpu_blocks);
  return infos_.empty() ? 0 : m;
}

std::string ExecutorGroup::topology() const {
  std::string out;
  for (size_t r = 0; r < executors_.size(); ++r) {
    const ExecutorEndpoints* e = r < endpoints_.size() ? &endpoints_[r] : nullptr;
    out += fmt::format("  rank {}: tp {} pp {} (stage {} of {}), {} on {} pid {}, {}\n", r,
                       int32_t(r) % tp_, int32_t(r) / tp_, int32_t(r) / tp_, pp_,
                       r < devices_.size() ? devices_[r] : "?", e ? e->hostname : "?",
                       e ? e->pid : 0, where_[r]);
  }
  return out;
}

void ExecutorGroup::stop_executors() {
  for (auto& e : executors_) caf::anon_send_exit(e, caf::exit_reason::user_shutdown);
  for (auto& w : workers_)
    caf::anon_send(caf::actor_cast<worker_actor>(w), leave_atom::value, anchor_);
  if (anchor_) caf::anon_send_exit(anchor_, caf::exit_reason::user_shutdown);
  anchor_ = nullptr;
}

void ExecutorGroup::shutdown() {
  std::lock_guard lk(mu_);
  if (down_) return;
  down_ = true;
  stop_executors();
  local_.stop();
}

void ExecutorGroup::restart(size_t lost, bool process_lost) {
  std::lock_guard lk(mu_);
  if (down_) fail("the engine is shutting down");
  if (lost >= size_t(tp_ * pp_)) fail("executor group: no rank {}", lost);
  const std::string lost_name = lost < names_.size() ? names_[lost] : std::to_string(lost);
  stop_executors();
  if (!local_.pids().empty()) {
    // Our own workers: the lost one when its process was lost (killed first if it still runs,
    // frozen say) and any other whose process ended or is stopped are started again; the
    // others serve a new session.
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (!((i == lost && process_lost) || !local_.alive(i) || local_.stopped(i))) continue;
      spdlog::warn("engine: restarting the worker of {}", i == lost ? lost_name : names_[i]);
      local_.restart(i);
      endpoint_list_[i] = local_.endpoints()[i];
      workers_[i] = connect_worker(*sys_, endpoint_list_[i]);
      where_[i] = fmt::format("the worker at {}", endpoint_list_[i]);
    }
  } else if (!spec_.endpoints.empty() && process_lost) {
    // A worker someone else runs (executor_endpoints) whose process died or froze: troupe did
    // not start it and cannot start another. (Reaching a frozen one again could block for as
    // long as it stays frozen.) Only its executor lost, it serves a new session below.
    fail("{} was lost: its worker process died or stopped answering, and troupe cannot restart "
         "a worker it did not start (the workers of tensor or pipeline parallel runs without "
         "executor_endpoints are restarted)",
         lost_name);
  } else if (!workers_.empty() && spec_.restart_joined) {
    // A cluster file's workers: its launcher starts the lost one (and any whose launched
    // process ended) again, and they join as at the start.
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (!((i == lost && process_lost) || (spec_.joined_alive && !spec_.joined_alive(i))))
        continue;
      try {
        auto [worker, name] = spec_.restart_joined(i);
        workers_[i] = worker;
        where_[i] = name;
      } catch (const Error& e) {
        fail("{} was lost and cannot be replaced: {}", i == lost ? lost_name : names_[i],
             e.what());
      }
    }
  } else if (!workers_.empty() && process_lost) {
    fail("{} was lost, and its worker has no launcher to restart it", lost_name);
  }
  start_ranks();
}

}  // namespace troupe

namespace troupe {

std::optional<std::string> ExecutorGroup::migration_refusal(size_t rank) {
  std::lock_guard lk(mu_);
  return refusal(rank);
}

std::optional<std::string> ExecutorGroup::refusal(size_t rank) const {
  if (down_) return "the engine is shutting down";
  const size_t n = size_t(tp_ * pp_);
  if (rank >= n) return fmt::format("rank {} does not exist: the engine has {} rank(s)", rank, n);
  const std::string& name = names_[rank];
  if (workers_.empty())
    return fmt::format(
        "{} runs in this process: there is no other executor to move it to (a rank moves "
        "between `troupe worker` processes: --tensor-parallel-size / --pipeline-parallel-size)",
        name);
  if (spec_.device != "cpu")
    return fmt::format(
        "moving {} with its KV cache on device = {}: not supported yet (it has run on the CPU "
        "backend only)",
        name, spec_.device);
  if (local_.pids().empty() && !(spec_.spares_left && spec_.spares_left() > 0))
    return fmt::format(
        "{} cannot move: there is no worker to move it to (troupe starts one for the workers "
        "it started itself, --tensor-parallel-size / --pipeline-parallel-size without "
        "--executor-endpoints; a cluster file needs an idle spare node, spare = true)",
        name);
  return std::nullopt;
}

MigrationReport ExecutorGroup::migrate(size_t rank, const std::vector<int32_t>& blocks,
                                       const std::vector<int32_t>& cpu_blocks) {
  std::lock_guard lk(mu_);
  const auto t0 = std::chrono::steady_clock::now();
  if (auto why = refusal(rank)) fail("{}", *why);
  const size_t n = size_t(tp_ * pp_);
  const std::string old_name = names_[rank];
  caf::actor_system& sys = *sys_;
  MigrationReport report;
  report.from = old_name;

  // ---- a worker to take the rank: one more of our own, or a cluster file's spare ----
  const bool ours = !local_.pids().empty();
  std::string endpoint, fresh_where, fresh_host;
  caf::actor fresh_worker;
  if (ours) {
    endpoint = local_.start_spare();
    fresh_where = fmt::format("the worker at {}", endpoint);
    fresh_host = host_of(endpoint);
  } else {
    std::tie(fresh_worker, fresh_where, fresh_host) = spec_.take_spare(rank);
  }
  executor_actor fresh;
  const std::string fresh_name =
      n == 1 ? fmt::format("executor 0 ({})", fresh_where)
             : fmt::format("executor {} (tp {}, pp {}; {})", rank, int32_t(rank) % tp_,
                           int32_t(rank) / tp_, fresh_where);
  auto let_go_of_fresh = [&] {
    if (fresh) caf::anon_send_exit(fresh, caf::exit_reason::user_shutdown);
    if (fresh_worker)
      caf::anon_send(caf::actor_cast<worker_actor>(fresh_worker), leave_atom::value, anchor_);
    if (ours)
      local_.drop_spare();
    else
      spec_.give_back_spare(rank);
  };
  try {
    if (ours) fresh_worker = connect_worker(sys, endpoint);
    {
      caf::scoped_actor self{sys};
      std::string err;
      self->request(caf::actor_cast<worker_actor>(fresh_worker), std::chrono::seconds(30),
                    join_atom::value, WorkerJoin{head_name(), anchor_})
          .receive([&](caf::actor& exec) { fresh = caf::actor_cast<executor_actor>(exec); },
                   [&](caf::error& e) { err = error_text(e); });
      if (!err.empty()) fail("{}: {}", fresh_where, err);
    }

    // ---- the wires: the others rejoin around the newcomer, which prepares its ends ----
    std::vector<std::string> hosts = hosts_;
    hosts[rank] = fresh_host;
    const std::vector<ExecutorPlacement> placements = this->placements(hosts);
    std::vector<executor_actor> group = executors_;
    group[rank] = fresh;
    std::vector<std::string> who = names_;
    who[rank] = fresh_name;
    std::vector<executor_actor> others;
    std::vector<std::string> others_who;
    std::vector<size_t> others_rank;
    for (size_t r = 0; r < n; ++r) {
      if (r == rank) continue;
      others.push_back(executors_[r]);
      others_who.push_back(names_[r]);
      others_rank.push_back(r);
    }
    std::vector<ExecutorEndpoints> ends(n);
    auto rewired = call_each<ExecutorEndpoints>(sys, others, others_who, others.size(),
                                                [&](size_t i) {
      return std::make_tuple(rewire_atom::value, placements[others_rank[i]]);
    });
    if (!rewired) throw Error(error_text(rewired.error()));
    for (size_t i = 0; i < others.size(); ++i) ends[others_rank[i]] = (*rewired)[i];
    auto prepared = call_each<ExecutorEndpoints>(sys, {fresh}, {fresh_name}, 1, [&](size_t) {
      return std::make_tuple(prepare_atom::value, placements[rank]);
    });
    if (!prepared) throw Error(error_text(prepared.error()));
    ends[rank] = (*prepared)[0];
    const std::vector<WirePeers> peers = peers_of(ends);
    auto connected = call_each<bool>(sys, group, who, n, [&](size_t i) {
      return std::make_tuple(connect_atom::value, peers[i]);
    });
    if (!connected) throw Error(error_text(connected.error()));

    // ---- the newcomer loads the rank's shard and sizes its cache ----
    auto loaded = call_each<ExecutorInfo>(sys, {fresh}, {fresh_name}, 1, [&](size_t) {
      return std::make_tuple(init_atom::value, init_of(int32_t(rank), placements[rank]));
    });
    if (!loaded) throw Error(error_text(loaded.error()));
    if (!infos_.empty() && (*loaded)[0].checkpoint_fingerprint != infos_[0].checkpoint_fingerprint)
      fail("{} loaded a different checkpoint ({}) from {} ({})", fresh_name,
           (*loaded)[0].checkpoint_fingerprint, names_[0], infos_[0].checkpoint_fingerprint);
    auto started = call_each<ExecutorInfo>(sys, {fresh}, {fresh_name}, 1,
                                           [&](size_t) { return std::make_tuple(start_atom::value); });
    if (!started) throw Error(error_text(started.error()));
    const ExecutorInfo info = (*started)[0];
    if (info.num_blocks < num_blocks() || info.num_cpu_blocks < num_cpu_blocks())
      fail("{} holds {} KV blocks and {} swap blocks, fewer than the {} and {} the engine "
           "uses",
           fresh_name, info.num_blocks, info.num_cpu_blocks, num_blocks(), num_cpu_blocks());

    // ---- the KV blocks: the old executor exposes them, the newcomer copies them ----
    const auto c0 = std::chrono::steady_clock::now();
    auto exported = call_each<KvExport>(sys, {executors_[rank]}, {old_name}, 1, [&](size_t) {
      return std::make_tuple(kv_export_atom::value);
    });
    if (!exported) throw Error(error_text(exported.error()));
    KvImport import{std::move((*exported)[0]), blocks, cpu_blocks};
    auto copied = call_each<uint64_t>(sys, {fresh}, {fresh_name}, 1, [&](size_t) {
      return std::make_tuple(kv_import_atom::value, import);
    });
    if (!copied) throw Error(error_text(copied.error()));
    report.bytes = (*copied)[0];
    report.copy_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();

    // ---- the old executor and its worker go; the newcomer holds the rank ----
    caf::anon_send_exit(executors_[rank], caf::exit_reason::user_shutdown);
    caf::anon_send(caf::actor_cast<worker_actor>(workers_[rank]), leave_atom::value, anchor_);
    if (ours) local_.promote_spare(rank);
    executors_[rank] = fresh;
    workers_[rank] = fresh_worker;
    where_[rank] = fresh_where;
    names_[rank] = fresh_name;
    if (rank < endpoint_list_.size()) endpoint_list_[rank] = endpoint;
    hosts_[rank] = hosts[rank];
    endpoints_ = std::move(ends);
    infos_[rank] = info;
    publish_drain_table();
  } catch (...) {
    let_go_of_fresh();
    throw;
  }
  report.to = names_[rank];
  report.blocks = blocks.size();
  report.cpu_blocks = cpu_blocks.size();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace troupe
