#include "actors/kv_store_actor.hpp"

#include <spdlog/spdlog.h>
#include <caf/io/all.hpp>

#include <map>
#include <memory>

#include "actors/executor_group.hpp"
#include "runtime/error.hpp"
#include "transport/kv/kv_region.hpp"
#include "transport/kv/remote_swap_space.hpp"

namespace troupe {

namespace {

struct kv_store_state {
  uint64_t capacity = 0;
  uint64_t used = 0;
  ucx::Settings settings;
  std::string self;
  struct Held {
    std::unique_ptr<KvRegion> region;
    uint64_t bytes = 0;
  };
  std::map<caf::actor_addr, Held> regions;  // by the executor that asked
  static inline const char* name = "troupe.kv_store";

  void release(const caf::actor_addr& owner) {
    auto it = regions.find(owner);
    if (it == regions.end()) return;
    used -= it->second.bytes;
    regions.erase(it);
    spdlog::info("{}: released a swap space; {} of {} bytes in use", self, used, capacity);
  }
};

kv_store_actor::behavior_type kv_store_behavior(
    kv_store_actor::stateful_pointer<kv_store_state> self, uint64_t capacity,
    ucx::Settings settings, std::string self_description) {
  self->state.capacity = capacity;
  self->state.settings = std::move(settings);
  self->state.self = std::move(self_description);
  self->set_down_handler([self](const caf::down_msg& m) { self->state.release(m.source); });
  return {
      [self](kv_region_atom, const caf::actor& owner, uint64_t num_blocks,
             uint64_t block_bytes) -> caf::result<std::vector<uint8_t>> {
        auto& st = self->state;
        if (!owner) return make_troupe_error(st.self + ": a swap-space request with no owner");
        try {
          st.release(owner.address());  // a re-init replaces its region
          if (num_blocks == 0 || block_bytes == 0 || num_blocks > (uint64_t(1) << 40) / block_bytes)
            fail("{}: a swap space of {} blocks of {} bytes; allowed: 1 .. 2^40 bytes", st.self,
                 num_blocks, block_bytes);
          const uint64_t bytes = num_blocks * block_bytes;
          if (bytes > st.capacity - st.used)
            fail(
                "{}: a swap space of {} bytes ({} blocks of {}) does not fit: {} of its {} bytes "
                "(--kv-store) are in use; allowed: at most {} more",
                st.self, bytes, num_blocks, block_bytes, st.used, st.capacity,
                st.capacity - st.used);
          auto region = std::make_unique<KvRegion>(KvLayout::contiguous(num_blocks, block_bytes),
                                                   st.settings);
          std::vector<uint8_t> descriptor = region->descriptor();
          st.used += bytes;
          st.regions[owner.address()] = kv_store_state::Held{std::move(region), bytes};
          self->monitor(owner);
          spdlog::info("{}: a swap space of {} blocks of {} bytes; {} of {} bytes in use", st.self,
                       num_blocks, block_bytes, st.used, st.capacity);
          return descriptor;
        } catch (const std::exception& e) {
          return make_troupe_error(e.what());
        }
      },
  };
}

}  // namespace

kv_store_actor spawn_kv_store(caf::actor_system& sys, uint64_t capacity_bytes,
                              ucx::Settings settings, std::string self_description) {
  return sys.spawn(kv_store_behavior, capacity_bytes, std::move(settings),
                   std::move(self_description));
}

namespace {

// The swap space and its lease: a small actor that the memory node monitors in place of the
// executor, ended with the swap space. (Handing the node the detached executor itself left the
// engine's actor system waiting at exit, at times, for an executor the middleman still held.)
class LeasedSwapSpace final : public RemoteSwapSpace {
 public:
  LeasedSwapSpace(std::unique_ptr<KvRemoteSwapSpace> inner, caf::actor lease)
      : inner_(std::move(inner)), lease_(std::move(lease)) {}
  ~LeasedSwapSpace() override {
    inner_.reset();  // disconnected before the node frees the region
    caf::anon_send_exit(lease_, caf::exit_reason::user_shutdown);
  }
  LeasedSwapSpace(const LeasedSwapSpace&) = delete;
  LeasedSwapSpace& operator=(const LeasedSwapSpace&) = delete;
  void write(std::span<const RemoteSwapMove> moves) override { inner_->write(moves); }
  void read(std::span<const RemoteSwapMove> moves) override { inner_->read(moves); }

 private:
  std::unique_ptr<KvRemoteSwapSpace> inner_;
  caf::actor lease_;
};

caf::behavior lease_behavior(caf::event_based_actor*) {
  return {[](const std::string&) {}};  // answers nothing: it only lives
}

}  // namespace

RemoteSwapConnector remote_swap_connector(caf::actor_system& sys, std::string node,
                                          ucx::Settings settings) {
  return
      [&sys, node = std::move(node), settings = std::move(settings)](const RemoteSwapRequest& r) {
        const auto [host, port] = parse_endpoint(node, "swap_space_remote");
        auto store = sys.middleman().remote_actor<kv_store_actor>(host, port);
        if (!store)
          fail("swap_space_remote = '{}': cannot reach the memory node: {}", node,
               error_text(store.error()));
        caf::actor lease = sys.spawn(lease_behavior);
        std::vector<uint8_t> descriptor;
        caf::error refused;  // thrown after receive(), not from inside CAF's handler
        {
          caf::scoped_actor self{sys};
          self->request(*store, settings.timeout, kv_region_atom::value, lease,
                        uint64_t(r.num_blocks), uint64_t(r.block_bytes))
              .receive([&](std::vector<uint8_t>& d) { descriptor = std::move(d); },
                       [&](caf::error& e) { refused = std::move(e); });
        }
        if (refused) {
          caf::anon_send_exit(lease, caf::exit_reason::user_shutdown);
          fail("swap_space_remote = '{}': the memory node refused a swap space of {} blocks: {}",
               node, r.num_blocks, error_text(refused));
        }
        KvSettings kv;
        kv.ucx = settings;
        std::unique_ptr<KvRemoteSwapSpace> inner;
        try {
          inner = std::make_unique<KvRemoteSwapSpace>(descriptor, r, kv, node);
        } catch (...) {
          caf::anon_send_exit(lease, caf::exit_reason::user_shutdown);
          throw;
        }
        return std::unique_ptr<RemoteSwapSpace>(
            std::make_unique<LeasedSwapSpace>(std::move(inner), std::move(lease)));
      };
}

}  // namespace troupe
