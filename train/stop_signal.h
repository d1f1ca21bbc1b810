// Stopping a run on SIGTERM or SIGINT (a scheduler's preemption, Ctrl-C): the first signal is noted; the
// ranks agree at a step boundary to stop there, all at the same step; the training loop then writes the
// training state to --save, says so in one line and exits 128 + the signal (143, 130). A second signal
// ends the process at once.
#pragma once

#include <memory>
#include <string>

namespace minidp::distributed {
class CpuWork;
class MpiEnvironment;
}  // namespace minidp::distributed

namespace minidp::train {

class Trainer;
struct Options;

/// Handlers of SIGTERM and SIGINT while the object lives (the previous ones are restored after): the first
/// signal is noted, a second one (either) ends the process at once by its default action.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  /// The signal this process noted (SIGTERM or SIGINT); 0 while none came.
  static int received();
};

/// "SIGTERM", "SIGINT", or "signal N".
std::string signalName(int signal);

/// Whether to stop, agreed at step boundaries: every rank calls atStepEnd after every step and gets the
/// same answer at the same step. Under mpirun, each call reads the greatest signal any rank had noted when
/// the previous step ended (reduced on the MPI thread meanwhile, behind that step's collectives, so the
/// step waits for nothing) and starts the reduction of this rank's signal now; the last step waits for
/// one reduction of its own. Alone, it reads this process's signal.
class StopAgreement {
 public:
  /// `mpi`: the job's environment; null alone.
  explicit StopAgreement(distributed::MpiEnvironment* mpi);
  ~StopAgreement();
  /// After a step (`last`: the run's last): the signal every rank stops for, 0 to go on.
  int atStepEnd(bool last);

 private:
  distributed::MpiEnvironment* mpi_;
  std::shared_ptr<distributed::CpuWork> pending_;  // the reduction started after the previous step
  std::shared_ptr<int> result_;
};

/// The end of a run that stopped for `signal` after `step`: the training state written to --save (unless
/// `savedStep`, the step last saved, is `step` already), one line from rank 0 on stderr, and the exit
/// status 128 + `signal`. Every rank calls it (saving is a collective).
int endStoppedRun(Trainer& trainer, const Options& opts, int rank, int64_t step, int64_t savedStep, int signal,
                  const std::string& program);

}  // namespace minidp::train
