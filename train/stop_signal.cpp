#include "train/stop_signal.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>

#include "framework/distributed/job/comm_thread.h"
#include "framework/distributed/job/mpi_environment.h"
#include "train/trainer.h"

namespace minidp::train {

namespace {

volatile std::sig_atomic_t gReceived = 0;
volatile pid_t gSender = 0;  // who sent the first signal (siginfo's si_pid)
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
constexpr int kCount = sizeof(kSignals) / sizeof(kSignals[0]);
struct sigaction gPrevious[kCount];

extern "C" void onStopSignal(int signal, siginfo_t* info, void*) {
  if (gReceived == 0) {
    gSender = info != nullptr ? info->si_pid : 0;
    gReceived = signal;
    return;
  }
  // A second signal: its default action, now (async-signal-safe calls only).
  struct sigaction byDefault {};
  byDefault.sa_handler = SIG_DFL;
  sigemptyset(&byDefault.sa_mask);
  sigaction(signal, &byDefault, nullptr);
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, signal);
  sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
  raise(signal);
}

}  // namespace

StopSignals::StopSignals() {
  gReceived = 0;
  gSender = 0;
  struct sigaction noted {};
  noted.sa_sigaction = onStopSignal;
  sigemptyset(&noted.sa_mask);
  noted.sa_flags = SA_RESTART | SA_SIGINFO;
  for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &noted, &gPrevious[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &gPrevious[i], nullptr);
}

int StopSignals::received() { return gReceived; }

std::string StopSignals::sender() {
  const pid_t pid = gSender;
  if (pid <= 0 || pid != ::getppid()) return {};
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  for (const char* launcher : {"mpirun", "mpiexec", "orterun", "prterun", "orted", "prted"}) {
    if (name == launcher) return name;
  }
  return {};
}

std::string signalName(int signal) {
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGHUP) return "SIGHUP";
  return "signal " + std::to_string(signal);
}

StopAgreement::StopAgreement(distributed::MpiEnvironment* mpi) : mpi_(mpi && mpi->worldSize() > 1 ? mpi : nullptr) {}

StopAgreement::~StopAgreement() = default;

int StopAgreement::atStepEnd(bool last) {
  if (!mpi_) return StopSignals::received();
  int agreed = 0;
  if (pending_) {
    pending_->wait();
    agreed = *result_;
    pending_.reset();
  }
  if (agreed != 0) return agreed;
  result_ = std::make_shared<int>(0);
  pending_ = mpi_->allReduceMax(StopSignals::received(), result_, "the stop-signal agreement");
  if (last) {
    pending_->wait();
    agreed = *result_;
    pending_.reset();
  }
  return agreed;
}

int endBeforeFirstStep(const Options& opts, int rank, int64_t step, int signal, const std::string& program) {
  if (rank == 0) {
    const std::string resumed =
        step > 0 ? " (resumed after step " + std::to_string(step) + ", " + opts.resume + " as it was)" : "";
    std::fflush(stdout);
    std::fprintf(stderr, "%s: stopped by %s before the first step%s; nothing saved\n", program.c_str(),
                 signalFrom(signal).c_str(), resumed.c_str());
    std::fflush(stderr);
  }
  return 128 + signal;
}

std::string signalFrom(int signal) {
  const std::string launcher = signal == StopSignals::received() ? StopSignals::sender() : std::string();
  if (launcher.empty() || signal != SIGTERM) return signalName(signal);
  // Open MPI's mpirun turns a Ctrl-C (SIGINT), SIGTERM or SIGHUP of its own into SIGTERM to every rank.
  return "SIGTERM from " + launcher + " (its answer to Ctrl-C, SIGTERM or SIGHUP alike)";
}

std::string lateSignalNote(int signal) {
  return signal == 0 ? std::string() : signalName(signal) + " came after the last step: the run finished";
}

int endStoppedRun(Trainer& trainer, const Options& opts, int rank, int64_t step, int64_t savedStep, int signal,
                  const std::string& program) {
  if (!opts.save.empty() && savedStep != step) trainer.saveState(opts.save, step);
  if (rank == 0) {
    const std::string saved = opts.save.empty() ? "nothing saved (no --save)"
                                                : "the training state is saved in " + opts.save + " (--resume " +
                                                      opts.save + " continues the run)";
    std::fflush(stdout);
    std::fprintf(stderr, "%s: stopped by %s after step %lld of %lld; %s\n", program.c_str(), signalFrom(signal).c_str(),
                 static_cast<long long>(step), static_cast<long long>(opts.steps), saved.c_str());
    std::fflush(stderr);
  }
  return 128 + signal;
}

}  // namespace minidp::train
