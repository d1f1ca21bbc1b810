#include "train/stop_signal.h"

#include <csignal>
#include <cstdio>

#include "framework/distributed/comm/comm_thread.h"
#include "framework/distributed/job/mpi_environment.h"
#include "train/trainer.h"

namespace minidp::train {

namespace {

volatile std::sig_atomic_t gReceived = 0;
struct sigaction gPrevious[2];
constexpr int kSignals[2] = {SIGTERM, SIGINT};

extern "C" void onStopSignal(int signal) {
  if (gReceived == 0) {
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
  struct sigaction noted {};
  noted.sa_handler = onStopSignal;
  sigemptyset(&noted.sa_mask);
  noted.sa_flags = SA_RESTART;
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &noted, &gPrevious[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &gPrevious[i], nullptr);
}

int StopSignals::received() { return gReceived; }

std::string signalName(int signal) {
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGINT) return "SIGINT";
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

int endStoppedRun(Trainer& trainer, const Options& opts, int rank, int64_t step, int64_t savedStep, int signal,
                  const std::string& program) {
  if (!opts.save.empty() && savedStep != step) trainer.saveState(opts.save, step);
  if (rank == 0) {
    const std::string saved = opts.save.empty() ? "nothing saved (no --save)"
                                                : "the training state is saved in " + opts.save + " (--resume " +
                                                      opts.save + " continues the run)";
    std::fflush(stdout);
    std::fprintf(stderr, "%s: stopped by %s after step %lld of %lld; %s\n", program.c_str(), signalName(signal).c_str(),
                 static_cast<long long>(step), static_cast<long long>(opts.steps), saved.c_str());
    std::fflush(stderr);
  }
  return 128 + signal;
}

}  // namespace minidp::train
