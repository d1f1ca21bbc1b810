#include "framework/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <streambuf>

#include "base/check.h"

namespace minidp {

namespace {

namespace fs = std::filesystem;

// The folder of `path` ("." for a bare name).
fs::path folderOf(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  std::string host = name;
  std::replace(host.begin(), host.end(), '/', '_');
  return host;
}

// A name of its own beside `path` for this process: "<path>.tmp.<host>.<pid>.<n>".
std::string temporaryName(const std::string& path) {
  static std::atomic<int> counter{0};
  return path + ".tmp." + hostName() + "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

// fsync of a folder by name (a read-only descriptor suffices on Linux); 0 or the errno.
int syncFolder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int error = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return error;
}

// A stream buffer over a file descriptor that keeps the errno of the first failed write.
class FdBuffer : public std::streambuf {
 public:
  explicit FdBuffer(int fd) : fd_(fd) { setp(buffer_, buffer_ + sizeof buffer_); }
  int error() const { return error_; }

 protected:
  int sync() override {
    if (!drain(pbase(), pptr() - pbase())) return -1;
    setp(buffer_, buffer_ + sizeof buffer_);
    return 0;
  }
  int_type overflow(int_type c) override {
    if (sync() != 0) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* data, std::streamsize n) override {
    if (n < static_cast<std::streamsize>(sizeof buffer_)) return std::streambuf::xsputn(data, n);
    return sync() == 0 && drain(data, n) ? n : 0;  // large blocks go straight to the file
  }

 private:
  bool drain(const char* data, std::streamsize n) {
    while (n > 0 && error_ == 0) {
      const ssize_t written = ::write(fd_, data, static_cast<size_t>(n));
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {
        error_ = written < 0 ? errno : EIO;
        break;
      }
      data += written;
      n -= written;
    }
    return error_ == 0;
  }
  int fd_;
  int error_ = 0;
  char buffer_[1 << 16];
};

// Throws unless `path` is absent or a regular file.
void checkTarget(const std::string& path) {
  const std::string kind = notARegularFile(path);
  MINIDP_CHECK(kind.empty(), path << " is " << kind
                                  << ", not a regular file; only a regular file (or a new one) is "
                                     "written, give another path");
}

}  // namespace

std::string errnoText(int error) {
  std::string text = std::strerror(error);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

std::string notARegularFile(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "";  // nothing there (or nothing this process can see)
  if (S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "a special file";
}

void checkWritableFile(const std::string& path) {
  MINIDP_CHECK(!path.empty(), "no file name given");
  checkTarget(path);
  const fs::path folder = folderOf(path);
  const std::string kind = notARegularFile(folder.string());  // empty for a regular file
  MINIDP_CHECK(fs::is_directory(folder) || !fs::exists(folder), path << ": " << folder.string() << " is "
                                                                     << (kind.empty() ? "a file" : kind)
                                                                     << ", not a folder; choose another path");
  MINIDP_CHECK(fs::exists(folder),
               path << ": the folder " << folder.string() << " does not exist; create it or choose another path");
  const std::string probe = temporaryName(path);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  const int error = fd < 0 ? errno : 0;
  MINIDP_CHECK(fd >= 0, path << ": cannot create files in " << folder.string() << " (" << errnoText(error)
                             << "); choose a writable folder");
  ::close(fd);
  ::unlink(probe.c_str());
}

void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  checkTarget(path);
  const std::string tmp = temporaryName(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  int error = fd < 0 ? errno : 0;
  MINIDP_CHECK(fd >= 0, "cannot write " << path << ": cannot create a file in " << folderOf(path).string() << " ("
                                        << errnoText(error) << ")");
  try {
    FdBuffer buffer(fd);
    std::ostream out(&buffer);
    write(out);
    out.flush();
    error = buffer.error();
    if (error == 0 && !out) error = EIO;
    if (error == 0 && ::fsync(fd) != 0) error = errno;
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0 && error == 0) error = errno;  // NFS reports a full disk as late as this
  if (error != 0) {
    ::unlink(tmp.c_str());
    throwError("cannot write " + path + ": " + errnoText(error), __FILE__, __LINE__);
  }
  // Checked again just before the rename: a FIFO or device that appeared meanwhile is not replaced either.
  try {
    checkTarget(path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = errno;
    ::unlink(tmp.c_str());
    throwError("cannot write " + path + ": renaming " + tmp + " to it failed: " + errnoText(error), __FILE__, __LINE__);
  }
  // The rename is durable once the folder's entry is on disk.
  error = syncFolder(folderOf(path).string());
  MINIDP_CHECK(error == 0, "cannot write " << path << ": flushing its folder to disk failed: " << errnoText(error));
}

void writeFileAtomically(const std::string& path, const std::string& contents) {
  writeFileAtomically(
      path, [&](std::ostream& out) { out.write(contents.data(), static_cast<std::streamsize>(contents.size())); });
}

namespace {

/// Whether `rest`, what follows ".tmp." in a temporary's name ("<host>.<pid>.<n>", or "<pid>.<n>" as earlier
/// versions named them, when `bare` is allowed), names a writer on this host that no longer runs.
bool writerGone(const std::string& rest, bool bare) {
  const auto number = [](const std::string& text) {
    return !text.empty() && text.size() < 12 && std::all_of(text.begin(), text.end(), ::isdigit);
  };
  const size_t last = rest.rfind('.');
  if (last == std::string::npos || !number(rest.substr(last + 1))) return false;
  const std::string writer = rest.substr(0, last);
  const size_t dot = writer.rfind('.');
  if (dot == std::string::npos && !bare) return false;
  const std::string pidText = dot == std::string::npos ? writer : writer.substr(dot + 1);
  const std::string writerHost = dot == std::string::npos ? hostName() : writer.substr(0, dot);
  if (!number(pidText) || writerHost != hostName()) return false;
  const long pid = std::stol(pidText);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

/// Deletes the regular files of `folder` for which `rest` gives the part after ".tmp." (empty: not a
/// temporary considered) and whose writer is gone; returns how many.
int removeGoneWriters(const std::string& folder, const std::function<std::string(const std::string&)>& rest,
                      bool bare) {
  std::error_code ignored;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(folder, ignored)) {
    const std::string after = rest(entry.path().filename().string());
    if (after.empty() || !entry.is_regular_file(ignored) || !writerGone(after, bare)) continue;
    removed += fs::remove(entry.path(), ignored) ? 1 : 0;
  }
  return removed;
}

}  // namespace

int removeStrayTemporaries(const std::string& path) {
  const std::string prefix = fs::path(path).filename().string() + ".tmp.";
  return removeGoneWriters(
      folderOf(path),
      [&prefix](const std::string& name) {
        return name.compare(0, prefix.size(), prefix) == 0 ? name.substr(prefix.size()) : std::string();
      },
      true);
}

int removeStrayTemporariesIn(const std::string& folder) {
  return removeGoneWriters(
      folder,
      [](const std::string& name) {
        // "<target>.tmp.<host>.<pid>.<n>"; writerGone checks the rest is this host's.
        const size_t at = name.rfind(".tmp.");
        return at == std::string::npos || at == 0 ? std::string() : name.substr(at + 5);
      },
      false);
}

}  // namespace minidp
