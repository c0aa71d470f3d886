// Runs a CPU collectives scenario with real rank processes and checks what each rank reports.
#pragma once

#include <catch2/catch.hpp>

#include <map>
#include <sstream>

#include "process_group.hpp"

namespace troupe::test {

/// "RESULT k=v k=v" -> {k: v}.
inline std::map<std::string, std::string> parse_result(const std::string& line) {
  std::map<std::string, std::string> m;
  std::istringstream in(line.substr(7));
  std::string kv;
  while (in >> kv) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

struct RankOutcome {
  std::vector<std::map<std::string, std::string>> results;
  std::string end;   // "DONE" or "ERROR ..." or "" (nothing in time)
  double end_s = 0;  // when `end` came, seconds since the blobs went out
};

/// Starts `size` peers of `scenario` (args + rank=, size=), runs the bootstrap and reads each
/// rank's lines until DONE / ERROR / the deadline.
inline std::vector<RankOutcome> run_ranks(const std::string& scenario, int size,
                                          std::vector<std::string> args, double seconds,
                                          const std::string& shm = "") {
  ProcessGroup g(
      size,
      [&](int r) {
        std::vector<std::string> a{scenario, fmt::format("rank={}", r),
                                   fmt::format("size={}", size)};
        a.insert(a.end(), args.begin(), args.end());
        return a;
      },
      shm);
  const std::string err = g.exchange_blobs(20);
  INFO(err);
  REQUIRE(err.empty());
  const auto t0 = Clock::now();
  const auto deadline = after(seconds);
  std::vector<RankOutcome> out(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    while (auto line = g[r].read_line(deadline)) {
      if (line->rfind("RESULT ", 0) == 0) {
        out[size_t(r)].results.push_back(parse_result(*line));
        continue;
      }
      if (*line == "DONE" || line->rfind("ERROR", 0) == 0) {
        out[size_t(r)].end = *line;
        out[size_t(r)].end_s = std::chrono::duration<double>(Clock::now() - t0).count();
        break;
      }
    }
  }
  return out;
}

/// Every rank finished, every result is exact, within the float64 bound, and the same bits
/// (hash) on every rank.
inline void check_collectives(const std::vector<RankOutcome>& ranks, size_t expected_results) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    INFO("rank " << r << ": " << ranks[r].end);
    REQUIRE(ranks[r].end == "DONE");
    REQUIRE(ranks[r].results.size() == expected_results);
  }
  for (size_t i = 0; i < expected_results; ++i) {
    const auto& first = ranks[0].results[i];
    for (size_t r = 0; r < ranks.size(); ++r) {
      const auto& res = ranks[r].results[i];
      INFO("rank " << r << " " << res.at("op") << " n=" << res.at("n")
                   << " pass=" << res.at("pass"));
      CHECK(res.at("exact") == "1");
      CHECK(std::stod(res.at("err_ulps")) <= 1.0);
      CHECK(res.at("hash") == first.at("hash"));
    }
  }
}

}  // namespace troupe::test
