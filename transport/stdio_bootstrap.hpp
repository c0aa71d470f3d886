// The child's side of a bootstrap over its own stdin/stdout, for processes a parent starts with
// pipes (the transport tests' rank processes, troupe_transport_bench's helpers): the same two
// phases the actors run over CAF, in text lines.
//   child -> parent  "BLOB <hex>"               (phase 1)
//   parent -> child  "BLOBS <hex> <hex> ..."    every rank's blob, in rank order (phase 2)
// Other lines are the caller's ("RESULT ...", "GO", ...).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "transport/bootstrap.hpp"

namespace troupe {

/// Writes one line to stdout and flushes.
void stdio_say(const std::string& line);
/// The next line from stdin; throws troupe::Error after `timeout` or at EOF.
[[nodiscard]] std::string stdio_read_line(std::chrono::milliseconds timeout);
/// Says BLOB, returns the BLOBS that come back (within `timeout`).
[[nodiscard]] std::vector<Blob> stdio_bootstrap(const Blob& mine,
                                                std::chrono::milliseconds timeout);

}  // namespace troupe
