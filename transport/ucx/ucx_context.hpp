// UCX (UCP 1.13) as troupe uses it: a context chosen by a Settings struct, RAII throughout.
//
// Settings pick the transports ("tcp", "sm", or "auto" for UCX's own choice) and the network
// devices; a UCX_* variable set in the environment wins over the matching setting (as it does
// for every UCX tool), so an operator can retarget a deployment without editing its files.
// Every context asks for active messages, RMA and wakeup (so waits can sleep on the worker's
// event fd instead of spinning), and turns on two things troupe needs that UCX 1.13 leaves off:
// - shared-memory peer failure handling (UCX_MM_ERROR_HANDLING, i.e. POSIX/SYSV_ERROR_HANDLING):
//   without it an endpoint with UCP_ERR_HANDLING_MODE_PEER cannot use shared memory at all
//   ("no peer failure handler"), and with it a dead peer on shared memory is reported;
// - a keepalive interval of Settings::keepalive (UCX's default is 20 s), so a peer that died
//   without closing its connection is noticed within about that time.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <string>
#include <string_view>

namespace troupe::ucx {

using Clock = std::chrono::steady_clock;

struct Settings {
  /// "auto" (UCX's choice, or UCX_TLS), "tcp" (TCP sockets, also across hosts) or "sm" (shared
  /// memory between processes of one host: sysv/posix for messages, cma for RMA where allowed).
  std::string tls = "auto";
  /// Network devices for tcp, e.g. "lo" or "eth0" (UCX_NET_DEVICES syntax); "" = UCX's choice.
  std::string net_devices;
  /// Every wait on a peer ends after this long with a troupe::Error naming the peer.
  std::chrono::milliseconds timeout{30000};
  /// UCX keepalive interval: how soon a silently dead peer is noticed (0 = UCX's default).
  std::chrono::milliseconds keepalive{1000};

  /// Throws troupe::Error naming the field, the value and what is allowed.
  void validate() const;
};

/// One ucp_context. Not copyable or movable (workers and registrations point into it).
class Context {
 public:
  explicit Context(const Settings& settings, std::string_view name = "troupe");
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  [[nodiscard]] ucp_context_h get() const { return ctx_; }
  [[nodiscard]] const Settings& settings() const { return settings_; }
  /// The transports in force and where that came from, e.g. "tcp (settings)", "sm (UCX_TLS)".
  [[nodiscard]] const std::string& tls_in_force() const { return tls_in_force_; }

 private:
  ucp_context_h ctx_ = nullptr;
  Settings settings_;
  std::string tls_in_force_;
};

/// "Destination is unreachable" etc. for a status.
[[nodiscard]] std::string status_text(ucs_status_t s);

}  // namespace troupe::ucx
