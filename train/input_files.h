// The input paths a run is given, checked at start-up for what they lead to before anything reads them (a loop
// of symbolic links, a FIFO or a device where a file is read), each as one line naming the flag and the path.
// Their text is checked at parse time (train/path_text.h).
#pragma once

#include "train/options.h"

namespace minidp::train {

/// Throws minidp::Error naming the flag and the path when an input (--load, --resume, --llmc-train, --llmc-val,
/// --data-dir) is a loop of symbolic links, cannot be looked at, or is a FIFO, device or socket where a file
/// (or for --data-dir a folder) is read. A path that does not exist is left to the reader's own message.
void checkInputFiles(const Options& opts);

}  // namespace minidp::train
