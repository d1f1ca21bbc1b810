// minidp-bench as a public API: a program that registers its own model (models/registry.h) calls runBench
// with its command line and times that model's data-parallel step with all-reduce overlap off and on.
#pragma once

#include <string>

namespace minidp::train {

/// Parses minidp-bench's flags from argv (minidp-train's, the --model's own, and the sweep flags), then for
/// each communicator setting, bucket size and repeat trains the --model from the same seed with overlap off
/// and on, timing every step, and prints a table row per run on rank 0 (--json, --trace write files).
/// Returns the process exit code as runTraining does. `program` names the program in messages and output.
int runBench(int argc, char** argv, const std::string& program = "minidp-bench");

}  // namespace minidp::train
