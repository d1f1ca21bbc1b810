#include "train/input_files.h"

#include <sys/stat.h>

#include <cerrno>

#include "framework/io/atomic_file.h"
#include "train/path_text.h"

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

void checkInputFiles(const Options& o) {
  checkInput("--load", o.load, false);
  checkInput("--resume", o.resume, false);
  checkInput("--llmc-train", o.llmcTrain, false);
  checkInput("--llmc-val", o.llmcVal, false);
  checkInput("--data-dir", o.dataDir, true);
}

}  // namespace minidp::train
