// The paths a run is given, checked for what they are before anything reads them: a path's text at parse time
// (empty, a control character, longer than the system takes) and, at start-up, what the input paths lead to (a
// loop of symbolic links, a FIFO or a device where a file is read), each as one line naming the flag and the path.
#pragma once

#include <string>

#include "train/trainer.h"

namespace minidp::train {

/// What is wrong with `path` as text, for a flag's validator ("needs a path, got an empty string", "holds a
/// newline at byte 3: give a path without control characters", "is 5000 bytes long: the system takes at most
/// 4095"); empty when nothing is.
std::string pathTextProblem(const std::string& path);

/// `path` as a message shows it: control characters escaped (\n), a path longer than 120 bytes cut in its middle.
std::string shownPath(const std::string& path);

/// Throws minidp::Error naming the flag and the path when an input (--load, --resume, --llmc-train, --llmc-val,
/// --data-dir) is a loop of symbolic links, cannot be looked at, or is a FIFO, device or socket where a file
/// (or for --data-dir a folder) is read. A path that does not exist is left to the reader's own message.
void checkInputFiles(const Options& opts);

}  // namespace minidp::train
