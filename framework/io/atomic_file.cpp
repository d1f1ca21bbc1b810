#include "framework/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/check.h"

namespace minidp {

namespace {

namespace fs = std::filesystem;

// The folder of `path` ("." for a bare name).
fs::path folderOf(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// fsync of a file or folder by name (a read-only descriptor suffices on Linux).
bool syncPath(const std::string& path, bool folder) {
  const int fd = ::open(path.c_str(), folder ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  static std::atomic<int> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MINIDP_CHECK(out, "cannot create " << tmp);
    write(out);
    out.close();
    MINIDP_CHECK(out, "writing " << tmp << " failed");
    MINIDP_CHECK(syncPath(tmp, false), "flushing " << tmp << " to disk failed");
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throwError("cannot rename " + tmp + " to " + path, __FILE__, __LINE__);
  }
  // The rename is durable once the folder's entry is on disk.
  MINIDP_CHECK(syncPath(folderOf(path).string(), true), "flushing the folder of " << path << " to disk failed");
}

void writeFileAtomically(const std::string& path, const std::string& contents) {
  writeFileAtomically(
      path, [&](std::ostream& out) { out.write(contents.data(), static_cast<std::streamsize>(contents.size())); });
}

int removeStrayTemporaries(const std::string& path) {
  const std::string prefix = fs::path(path).filename().string() + ".tmp.";
  std::error_code ignored;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(folderOf(path), ignored)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) == 0 && entry.is_regular_file(ignored)) {
      removed += fs::remove(entry.path(), ignored) ? 1 : 0;
    }
  }
  return removed;
}

}  // namespace minidp
