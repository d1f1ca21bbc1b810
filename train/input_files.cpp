#include "train/input_files.h"

#include <limits.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

#include "framework/io/atomic_file.h"

namespace minidp::train {

namespace {

/// What kind of thing `mode` is, for a message.
std::string kindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISREG(mode)) return "a file";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "neither a file nor a folder";
}

/// `path` of `flag` as what it must be (a regular file, or a folder when `folder`); throws naming both.
void checkInput(const std::string& flag, const std::string& path, bool folder) {
  if (path.empty()) return;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT) return;  // the reader says it does not exist, in its words
    throw Error(flag + " " + shownPath(path) + ": " +
                (error == ELOOP ? std::string("a loop of symbolic links (or more than the system follows)")
                                : "cannot be looked at: " + errnoText(error)));
  }
  if (folder ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) return;
  throw Error(flag + " " + shownPath(path) + " is " + kindOf(st.st_mode) + ", not " + (folder ? "a folder" : "a file") +
              "; give the " + (folder ? "folder" : "file") + " itself");
}

}  // namespace

std::string pathTextProblem(const std::string& path) {
  if (path.empty()) return "needs a path, got an empty string";
  for (size_t i = 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (c < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", c);
      return "the path " + shownPath(path) + " holds " + (c == '\n' ? std::string("a newline") : "control character " + std::string(code)) +
             " at byte " + std::to_string(i) + ": give a path without control characters";
    }
  }
  if (path.size() >= PATH_MAX)
    return "the path is " + std::to_string(path.size()) + " bytes long: the system takes at most " +
           std::to_string(PATH_MAX - 1);
  for (size_t begin = 0; begin <= path.size();) {
    const size_t end = std::min(path.find('/', begin), path.size());
    if (end - begin > NAME_MAX)
      return "the path " + shownPath(path) + " has a name of " + std::to_string(end - begin) +
             " bytes: the system takes at most " + std::to_string(NAME_MAX) + " in one name";
    begin = end + 1;
  }
  return {};
}

std::string shownPath(const std::string& path) {
  std::string shown;
  for (char ch : path) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      shown += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "\\x%02x", c);
      shown += code;
    } else {
      shown += ch;
    }
  }
  constexpr size_t kShown = 120;
  if (shown.size() <= kShown) return shown;
  return shown.substr(0, kShown / 2) + "..." + shown.substr(shown.size() - kShown / 2 + 3);
}

void checkInputFiles(const Options& o) {
  checkInput("--load", o.load, false);
  checkInput("--resume", o.resume, false);
  checkInput("--llmc-train", o.llmcTrain, false);
  checkInput("--llmc-val", o.llmcVal, false);
  checkInput("--data-dir", o.dataDir, true);
}

}  // namespace minidp::train
