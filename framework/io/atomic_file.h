// Files that are either complete or absent: written to a temporary of their own beside `path`, named
// "<path>.tmp.<host>.<pid>.<n>" after the host and process writing it, flushed to disk (the file, then
// after the rename its folder), then renamed over `path`. Only a regular file (or nothing) at `path` is
// replaced: a folder, a symbolic link, a device, a FIFO or a socket there is refused and left as it is.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace minidp {

/// strerror's text of `error` for the middle of a sentence: "no space left on device".
std::string errnoText(int error);

/// What is at `path` when that is neither nothing nor a regular file ("a folder", "a symbolic link", "a
/// character device", "a FIFO", ...), without following a link; empty when `path` is absent or a regular file.
std::string notARegularFile(const std::string& path);

/// Checks that `path` can be written now: nothing, or a regular file, is there, in an existing folder that
/// takes a new file (a temporary is created and removed). Throws minidp::Error that starts with `path` and
/// says what is wrong ("... is a character device, not a regular file").
void checkWritableFile(const std::string& path);

/// Calls `write` on a stream to a temporary of its own beside `path`, fsyncs it, renames it to `path` and
/// fsyncs the folder; on any failure removes the temporary and throws minidp::Error naming `path` and the
/// cause ("cannot write ckpt.safetensors: no space left on device"), so no half-written file is ever left
/// at `path`; what is at `path` is replaced only when it is a regular file. A process killed meanwhile
/// leaves only the temporary, which removeStrayTemporaries deletes once that process is gone.
void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write);

/// writeFileAtomically of a whole string.
void writeFileAtomically(const std::string& path, const std::string& contents);

/// Deletes the temporaries beside `path` whose writer is gone: written on this host by a process that no
/// longer runs (a save killed midway). A live writer's temporary (another run saving to the same `path`)
/// and another host's are left alone. Returns how many it deleted.
int removeStrayTemporaries(const std::string& path);

/// Deletes every temporary "<name>.tmp.<host>.<pid>.<n>" in `folder` whose writer is gone (this host, a
/// process that no longer runs), whatever file it was to become: what a run starting in that folder clears.
/// Returns how many it deleted.
int removeStrayTemporariesIn(const std::string& folder);

}  // namespace minidp
