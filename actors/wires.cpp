#include "actors/wires.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "runtime/error.hpp"
#include "transport/collectives/shm_collectives.hpp"
#include "transport/collectives/ucx_collectives.hpp"
#include "transport/stage/ucx_stage_link.hpp"

#ifdef TROUPE_HAVE_NCCL
#include "cuda/cuda_backend.hpp"
#include "transport/nccl/custom_all_reduce.hpp"
#include "transport/nccl/nccl_collectives.hpp"
#include "transport/nccl/tp_collectives.hpp"
#endif

namespace troupe {

namespace {

std::string local_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

ucx::Settings ucx_settings(const ExecutorPlacement& p) {
  ucx::Settings s;
  s.tls = p.ucx_tls;
  s.net_devices = p.ucx_net_devices;
  s.timeout = std::chrono::milliseconds(p.timeout_ms);
  s.validate();
  return s;
}

class GroupWires final : public PreparedWires {
 public:
  explicit GroupWires(const ExecutorPlacement& p) : p_(p) {
    ends_.hostname = local_hostname();
    ends_.pid = int32_t(getpid());
    if (p.tp_size > 1) {
      if (p.collectives == "shm") {
        ShmCollectivesSettings s;
        s.timeout = std::chrono::milliseconds(p.timeout_ms);
        shm_ = std::make_shared<ShmCollectives>(p.tp_rank, p.tp_size, s);
        ends_.collectives = shm_->blob();
      } else if (p.collectives == "ucx") {
        UcxCollectivesSettings s;
        s.ucx = ucx_settings(p);
        ucx_ = std::make_shared<UcxCollectives>(p.tp_rank, p.tp_size, s);
        ends_.collectives = ucx_->blob();
      } else if (p.collectives == "nccl") {
#ifdef TROUPE_HAVE_NCCL
        if (p.device != "cuda")
          fail("placement: collectives = nccl needs device = cuda, not {}", p.device);
        // Rank 0 hosts NCCL's bootstrap root: its process lives as long as the group. Each rank
        // adds its custom all-reduce buffer's handle where that path is on.
        BlobWriter w(kNcclEndsMagic);
        w.bytes(p.tp_rank == 0 ? NcclCollectives::make_unique_id() : Blob{});
        if (p.custom_all_reduce) {
          CustomAllReduceSettings s;
          s.device = p.device_index;
          s.timeout = std::chrono::milliseconds(std::max(p.timeout_ms, 10000));
          custom_ = std::make_shared<CustomAllReduce>(p.tp_rank, p.tp_size, s);
          w.bytes(custom_->blob());
        } else {
          w.bytes(Blob{});
        }
        ends_.collectives = w.take();
#else
        fail("placement: collectives = nccl: this build has no NCCL (it needs the CUDA backend)");
#endif
      } else {
        fail("placement: collectives = '{}' with tensor_parallel_size {}; allowed: shm, ucx, nccl",
             p.collectives, p.tp_size);
      }
    }
    if (p.pp_size > 1) {
      if (p.stage_link != "ucx")
        fail("placement: stage_link = '{}' with pipeline_parallel_size {}; allowed: ucx",
             p.stage_link, p.pp_size);
      UcxStageLinkSettings s;
      s.ucx = ucx_settings(p);
      link_ = std::make_shared<UcxStageLink>(p.pp_rank, p.pp_size, s);
      ends_.stage = link_->blob();
    }
  }

  [[nodiscard]] ExecutorEndpoints endpoints() const override { return ends_; }

  std::pair<std::shared_ptr<Collectives>, std::shared_ptr<StageLink>> connect(
      const WirePeers& peers, Backend& backend) override {
    std::shared_ptr<Collectives> group;
    if (p_.tp_size > 1) {
      if (peers.tp.size() != size_t(p_.tp_size))
        fail("connect: {} TP peers for tensor_parallel_size {}", peers.tp.size(), p_.tp_size);
      if (shm_) {
        shm_->connect(peers.tp);
        group = shm_;
      } else if (ucx_) {
        ucx_->connect(peers.tp);
        group = ucx_;
      } else {
#ifdef TROUPE_HAVE_NCCL
        CudaBackend* cuda = cuda_backend_of(backend);
        if (cuda == nullptr) fail("connect: NCCL needs the CUDA backend, not {}", backend.name());
        NcclSettings s;
        s.timeout = std::chrono::milliseconds(std::max(p_.timeout_ms, 60000));
        std::vector<Blob> ids, custom_blobs;
        for (size_t r = 0; r < peers.tp.size(); ++r) {
          BlobReader rd(peers.tp[r], kNcclEndsMagic, fmt::format("NCCL ends of TP rank {}", r));
          ids.push_back(rd.bytes());
          custom_blobs.push_back(rd.bytes());
          rd.finish();
        }
        if (custom_) custom_->connect(custom_blobs, cuda->stream());
        auto nccl =
            std::make_shared<NcclCollectives>(p_.tp_rank, p_.tp_size, ids.at(0), cuda->stream(), s);
        auto tp = std::make_shared<CudaTpCollectives>(nccl, custom_, cuda->stream());
        if (custom_ && p_.tp_rank == 0) {
          std::string table;
          for (const AllReduceTiming& t : tp->timings())
            table +=
                fmt::format(" {} KiB {:.1f}/{:.1f} us;", t.bytes >> 10, t.nccl_us, t.custom_us);
          spdlog::info(
              "executor: the custom all-reduce takes messages up to {} KiB (NCCL / custom, summed "
              "over ranks:{})",
              tp->crossover() >> 10, table);
        }
        group = tp;
#endif
      }
    }
    if (p_.pp_size > 1) {
      if (peers.stages.size() != size_t(p_.pp_size))
        fail("connect: {} stage peers for pipeline_parallel_size {}", peers.stages.size(),
             p_.pp_size);
      link_->connect(peers.stages);
    }
    (void)backend;
    return {group, link_};
  }

 private:
  ExecutorPlacement p_;
  ExecutorEndpoints ends_;
  std::shared_ptr<ShmCollectives> shm_;
  std::shared_ptr<UcxCollectives> ucx_;
  std::shared_ptr<UcxStageLink> link_;
#ifdef TROUPE_HAVE_NCCL
  static constexpr uint32_t kNcclEndsMagic = 0x4e43454e;  // "NCEN"
  std::shared_ptr<CustomAllReduce> custom_;
#endif
};

}  // namespace

std::unique_ptr<PreparedWires> prepare_wires(const ExecutorPlacement& p) {
  if (p.tp_size < 1 || p.tp_rank < 0 || p.tp_rank >= p.tp_size)
    fail("placement: tp_rank {} is outside [0, tp_size {})", p.tp_rank, p.tp_size);
  if (p.pp_size < 1 || p.pp_rank < 0 || p.pp_rank >= p.pp_size)
    fail("placement: pp_rank {} is outside [0, pp_size {})", p.pp_rank, p.pp_size);
  return std::make_unique<GroupWires>(p);
}

}  // namespace troupe
