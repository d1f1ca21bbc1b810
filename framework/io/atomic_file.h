// Files that are either complete or absent: written to `path + ".tmp"`, then renamed over `path`.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace minidp {

/// Calls `write` on a stream to `path + ".tmp"`, then renames it to `path`; on any failure removes the
/// temporary and throws minidp::Error naming the file, so no half-written file is ever left at `path`.
void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write);

/// writeFileAtomically of a whole string.
void writeFileAtomically(const std::string& path, const std::string& contents);

}  // namespace minidp
