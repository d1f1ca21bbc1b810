// No output lands on an input: what a run writes (--save, --metrics, --trace, minidp-bench's --json) against what
// it reads (--load, --resume, --llmc-train, --llmc-val, the dataset folder's files) and against each other, by
// device and inode, so links, hard links and other spellings of one file are caught.
#pragma once

#include <string>
#include <vector>

#include "train/options.h"

namespace minidp::train {

/// An output that is one of the run's inputs or another output (the same device and inode), as one line naming
/// both flags and the path; empty when there is none. Outputs that do not exist yet clash with nothing here
/// (usageProblem compares their names).
std::string outputClashProblem(const Options& opts, const std::vector<OutputFile>& more = {});

}  // namespace minidp::train
