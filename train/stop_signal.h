// Stopping a run on SIGTERM, SIGINT or SIGHUP (a scheduler's preemption, Ctrl-C, a closed terminal): the first
// signal is noted; the ranks agree at a step boundary to stop there, all at the same step; the training loop then
// writes the training state to --save, says so in one line and exits 128 + the signal (143, 130, 129). A signal
// during start-up ends the run before its first step (one line, nothing saved); one after the last step is named
// in the closing line. A second signal ends the process at once.
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

/// Handlers of SIGTERM, SIGINT and SIGHUP while the object lives (the previous ones are restored after): the first
/// signal is noted, a second one (either) ends the process at once by its default action.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  /// The signal this process noted (SIGTERM, SIGINT or SIGHUP); 0 while none came.
  static int received();
  /// The launcher that sent it when that was this process's parent (mpirun, orted, ...); else empty.
  static std::string sender();
};

/// "SIGTERM", "SIGINT", "SIGHUP", or "signal N".
std::string signalName(int signal);
/// signalName, and when this process noted it from its launcher, that ("SIGTERM from mpirun (its answer to
/// Ctrl-C, SIGTERM or SIGHUP alike)"): mpirun forwards none of those as they came.
std::string signalFrom(int signal);

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

/// The end of a run that a signal reached before its first step (`step`: the step it resumed at, else 0): one line
/// from rank 0, nothing saved (a --resume file stays as it was), the exit status 128 + `signal`.
int endBeforeFirstStep(const Options& opts, int rank, int64_t step, int signal, const std::string& program);

/// What the closing line says of a `signal` that came after the last step ("SIGTERM came after the last step:
/// the run finished"); empty for 0.
std::string lateSignalNote(int signal);

/// The end of a run that stopped for `signal` after `step`: the training state written to --save (unless
/// `savedStep`, the step last saved, is `step` already), one line from rank 0 on stderr, and the exit
/// status 128 + `signal`. Every rank calls it (saving is a collective).
int endStoppedRun(Trainer& trainer, const Options& opts, int rank, int64_t step, int64_t savedStep, int signal,
                  const std::string& program);

}  // namespace minidp::train
