// Everything a run checks before work starts, and how failures reach the user: value ranges at parse
// time (usage errors, exit 2), output paths, data and resume files on every rank, agreed across ranks
// (runtime errors, exit 1), each as one line that names the flag or file and what to do.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "train/errors.h"
#include "train/options.h"
#include "train/session.h"

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace minidp::train {

/// Parses the command line into the options `app` registers on `opts` and records what it read
/// (recordParsedFlags). Returns -1 to go on, else the exit status: 0 after --help, kUsageExit after one line
/// on stderr (printed by the first rank only under mpirun) naming the flag.
int parseCommandLine(CLI::App& app, Options& opts, int argc, char** argv, const char* program);
/// After parsing: prints "<program>: usage error: <problem>" (usageProblem, train/usage_rules.h) to stderr (the
/// first rank only, under mpirun) and returns 2 when there is a problem, else 0. openSession and the Trainer
/// refuse the same problems (an Error), for programs that build them from Options of their own.
int checkUsage(const Options& opts, const std::string& program, const std::vector<OutputFile>& more = {});

/// Runs `check` on every rank, then agrees: if it threw anywhere, every rank throws AgreedError with the
/// first failing rank's message (prefixed with that rank when only some failed).
void agreeOnChecks(distributed::Communicator& comm, const std::function<void()>& check);

/// An upper bound of the memory one rank's training run takes, by parts (bytes).
struct MemoryEstimate {
  int64_t parameters = 0;  // the model's parameter count
  double stateBytes = 0;   // parameters, gradient buckets, optimizer state and copies of them
  double activationBytes = 0;  // one micro-batch's forward activations, kept for backward, and backward's
  std::vector<std::string> flagsToLower;  // the model's flags that lower it, besides --batch-size
  double total() const { return stateBytes + activationBytes; }
};
/// The run's memory from its flags alone, before anything is allocated; `vocab`: the token data's
/// vocabulary (token models); `world`: the ranks the ZeRO stages (--zero) shard over. The formula is in
/// run_checks.cpp, the model's part in its registry entry.
MemoryEstimate estimateMemory(const Options& opts, int64_t vocab, Device device, DType dtype, DType compute,
                              int world = 1);

/// The checks of minidp-train and minidp-bench before the model is built: output paths (outputFiles(opts,
/// more)) writable (created and removed; stray temporaries of an interrupted save removed), the data folder
/// and files, their lengths against context, batch and grad-accum, the --resume and --load files, the memory
/// estimate against the memory there is (host memory shared by the node's ranks, or the GPU's free memory).
/// Agreed across ranks (agreeOnChecks).
void checkTrainingRun(const Options& opts, Session& session, const std::vector<OutputFile>& more = {});

}  // namespace minidp::train
