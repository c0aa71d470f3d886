// troupe_transport_peer: one rank process of a transport test (see ../process_group.hpp for
// the line protocol). Scenarios live in peer_*.cpp; each returns normally (DONE) or throws
// (ERROR <message>).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "transport/bootstrap.hpp"

namespace troupe::peer {

struct Args {
  std::map<std::string, std::string> kv;
  [[nodiscard]] std::string str(const std::string& k, const std::string& def = "") const;
  [[nodiscard]] int64_t num(const std::string& k, int64_t def = 0) const;
  [[nodiscard]] std::vector<int64_t> nums(const std::string& k) const;  // "1,2,3"
};

/// Prints one protocol line and flushes.
void say(const std::string& line);
/// Phase 1 and 2: prints BLOB, returns the BLOBS the test sends back (within 30 s).
std::vector<Blob> bootstrap(const Blob& mine);
/// Waits for a line "GO" from the test (within 30 s): lets a test act between two steps.
void wait_go();

/// Deterministic test data for (rank, n, salt): floats in [-1, 1).
std::vector<float> data_for(int64_t rank, size_t n, uint64_t salt);
/// FNV-1a of bytes, as hex.
std::string hash_hex(const void* p, size_t bytes);

using Scenario = void (*)(const Args&);
void scenario_collectives(const Args& a);
void scenario_collectives_fault(const Args& a);
void scenario_ucx_pair(const Args& a);
void scenario_ucx_stream(const Args& a);
void scenario_stage_link(const Args& a);
void scenario_kv(const Args& a);
#ifdef TROUPE_PEER_NCCL
void scenario_nccl(const Args& a);
void scenario_custom_ar(const Args& a);
#endif

}  // namespace troupe::peer
