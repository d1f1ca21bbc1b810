// The training loop of minidp-train as a public API: a program that registers its own model
// (models/registry.h) calls runTraining with its command line and gets minidp-train's flags, logging,
// evaluation, checkpoints and Chrome trace for it.
#pragma once

#include <string>

namespace minidp::train {

/// Parses minidp-train's flags from argv, trains the --model of the registry data-parallel over the ranks
/// mpirun started (or alone), evaluates it and prints the one-line JSON summary on rank 0. Returns the
/// process exit code: 0, or 1 after an error (printed on one line, every rank aborted); `--help` prints the
/// flags and returns 0. `program` names the program in messages.
int runTraining(int argc, char** argv, const std::string& program = "minidp-train");

}  // namespace minidp::train
