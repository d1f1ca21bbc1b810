// Files that are either complete or absent: written to a unique temporary beside `path`, flushed to disk
// (the file, then after the rename its folder), then renamed over `path`.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace minidp {

/// Calls `write` on a stream to a temporary `path + ".tmp.<pid>.<n>"`, fsyncs it, renames it to `path` and
/// fsyncs the folder; on any failure removes the temporary and throws minidp::Error naming the file, so
/// no half-written file is ever left at `path`. A process killed meanwhile leaves only the temporary,
/// which removeStrayTemporaries deletes.
void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write);

/// writeFileAtomically of a whole string.
void writeFileAtomically(const std::string& path, const std::string& contents);

/// Deletes the temporaries an interrupted writeFileAtomically(path) left beside `path`; returns how many.
int removeStrayTemporaries(const std::string& path);

}  // namespace minidp
