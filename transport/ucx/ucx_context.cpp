#include "transport/ucx/ucx_context.hpp"

#include <cstdlib>

#include "runtime/error.hpp"

namespace troupe::ucx {

namespace {

bool env_set(const char* name) {
  return std::getenv(name) != nullptr;
}

// Applies `value` to UCX key `key` unless the environment already says it (env wins).
void modify(ucp_config_t* cfg, const char* key, const std::string& value,
            std::initializer_list<const char*> env_names) {
  for (const char* e : env_names)
    if (env_set(e)) return;
  const ucs_status_t st = ucp_config_modify(cfg, key, value.c_str());
  if (st != UCS_OK) fail("ucx: cannot set {}={}: {}", key, value, status_text(st));
}

// Whether UCX will load its shared-memory transports (setting their options otherwise makes
// UCX warn "invalid configuration").
bool may_use_shared_memory(const std::string& tls) {
  if (const char* env = std::getenv("UCX_TLS")) {
    const std::string e = env;
    for (const char* name : {"sm", "posix", "sysv", "all", "^"})
      if (e.find(name) != std::string::npos) return true;
    return false;
  }
  return tls != "tcp";
}

}  // namespace

std::string status_text(ucs_status_t s) {
  return ucs_status_string(s);
}

void Settings::validate() const {
  if (tls != "auto" && tls != "tcp" && tls != "sm")
    fail(
        "ucx settings: tls \"{}\" is not supported; allowed: \"auto\", \"tcp\", \"sm\" (other "
        "UCX transport lists go through the UCX_TLS environment variable with tls \"auto\")",
        tls);
  if (timeout.count() <= 0)
    fail("ucx settings: timeout {} ms must be positive (every wait on a peer is bounded)",
         timeout.count());
  if (keepalive.count() < 0)
    fail("ucx settings: keepalive {} ms must be >= 0 (0 = UCX's default)", keepalive.count());
  if (net_devices.find_first_of(" \t\n") != std::string::npos)
    fail("ucx settings: net_devices \"{}\" must be a comma-separated list without spaces",
         net_devices);
}

Context::Context(const Settings& settings, std::string_view name) : settings_(settings) {
  settings_.validate();
  ucp_config_t* cfg = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &cfg);  // UCX_* environment
  if (st != UCS_OK) fail("ucx: ucp_config_read failed: {}", status_text(st));
  try {
    if (env_set("UCX_TLS")) {
      tls_in_force_ = fmt::format("{} (UCX_TLS)", std::getenv("UCX_TLS"));
    } else if (settings_.tls != "auto") {
      modify(cfg, "TLS", settings_.tls, {});
      tls_in_force_ = fmt::format("{} (settings)", settings_.tls);
    } else {
      tls_in_force_ = "auto";
    }
    if (!settings_.net_devices.empty())
      modify(cfg, "NET_DEVICES", settings_.net_devices, {"UCX_NET_DEVICES"});
    if (may_use_shared_memory(settings_.tls))
      modify(cfg, "MM_ERROR_HANDLING", "y",
             {"UCX_MM_ERROR_HANDLING", "UCX_POSIX_ERROR_HANDLING", "UCX_SYSV_ERROR_HANDLING"});
    if (settings_.keepalive.count() > 0)
      modify(cfg, "KEEPALIVE_INTERVAL", fmt::format("{}ms", settings_.keepalive.count()),
             {"UCX_KEEPALIVE_INTERVAL"});
  } catch (...) {
    ucp_config_release(cfg);
    throw;
  }
  const std::string ctx_name(name);
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  p.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  p.name = ctx_name.c_str();
  st = ucp_init(&p, cfg, &ctx_);
  ucp_config_release(cfg);
  if (st != UCS_OK) fail("ucx: ucp_init failed with tls {}: {}", tls_in_force_, status_text(st));
}

Context::~Context() {
  if (ctx_ != nullptr) ucp_cleanup(ctx_);
}

}  // namespace troupe::ucx
