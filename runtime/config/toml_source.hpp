// Internal to runtime/config: what the TOML loaders (engine and cluster files) share to point
// an error at its place in the file.
#pragma once

#include <toml++/toml.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::config_detail {

/// "<source>:<line>:<column>" of a region.
[[nodiscard]] std::string where(std::string_view source, const toml::source_region& r);

/// The entries of `t` in the order they are written (toml::table is sorted by key), so the
/// first error reported is the first in the file and notices come in file order.
[[nodiscard]] std::vector<std::pair<const toml::key*, const toml::node*>> in_file_order(
    const toml::table& t);

/// Parses TOML text; a syntax error becomes troupe::Error "<source>:<line>:<column>: TOML
/// parse error: ...".
[[nodiscard]] toml::table parse_toml(std::string_view text, std::string_view source);

/// The whole file as text; troupe::Error "<path>: cannot open the <what>" when it cannot be
/// read.
[[nodiscard]] std::string read_text_file(const std::filesystem::path& path, std::string_view what);

}  // namespace troupe::config_detail
