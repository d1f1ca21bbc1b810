#include "framework/distributed/job/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

namespace minidp::distributed {

Watchdog::Watchdog(double timeoutSeconds, int rank, std::function<void(const std::string&)> onFailure,
                   std::function<void()> threadInit, std::function<std::string()> healthCheck,
                   std::function<std::string(const std::string&)> census)
    : timeoutMs_(timeoutSeconds * 1000.0),
      rank_(rank),
      onFailure_(std::move(onFailure)),
      healthCheck_(std::move(healthCheck)),
      census_(std::move(census)),
      thread_([this, init = std::move(threadInit)] { loop(init); }) {}

Watchdog::~Watchdog() {
  incoming_.stop();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::watch(const std::shared_ptr<Work>& work) { incoming_.post(work, false); }

void Watchdog::runExclusive(const std::function<void()>& action) {
  std::lock_guard<std::mutex> lock(healthMutex_);
  healthStopped_ = true;
  action();
}

std::string Watchdog::describeTimeout(const Work& work, int rank, double ageSeconds, const std::string& missing) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << "minidp watchdog: rank " << rank << ": collective '" << work.tag() << "' (" << work.bytes()
     << " bytes) has not completed after " << ageSeconds << " s"
     << (missing.empty() ? " (a rank died, or ranks issued different collectives)" : ": " + missing)
     << "; aborting every rank";
  return os.str();
}

void Watchdog::fail(const std::string& line) { onFailure_(line); }

void Watchdog::scan(std::vector<std::shared_ptr<Work>>& works) {
  const double now = hostNowMs();
  size_t kept = 0;  // one pass: the survivors move to the front, the rest is dropped at the end
  for (size_t i = 0; i < works.size(); ++i) {
    Work& work = *works[i];
    std::string failure;
    try {
      if (work.completed()) continue;  // dropped below; the last holder may be us (events, buffer)
      // Time this process spent stopped does not count: a work gets its whole timeout again after a resume.
      const double since = work.runningSinceMs() >= 0 ? std::max(work.runningSinceMs(), resumedMs_) : -1;
      if (timeoutMs_ > 0 && since >= 0 && now - since > timeoutMs_) {
        failure = describeTimeout(work, rank_, (now - since) / 1000.0, census_ ? census_(work.tag()) : "");
      }
    } catch (const std::exception& e) {
      failure = "minidp watchdog: rank " + std::to_string(rank_) + ": collective '" + work.tag() +
                "' failed: " + e.what() + "; aborting every rank";
    }
    if (!failure.empty()) {
      fail(failure);
      continue;  // onFailure returned: do not report this work again
    }
    if (kept != i) works[kept] = std::move(works[i]);
    ++kept;
  }
  works.resize(kept);
}

void Watchdog::loop(const std::function<void()>& threadInit) {
  if (threadInit) threadInit();
  // Poll several times per timeout, at least 4 times a second: the check costs one event query per work.
  const double periodMs = timeoutMs_ > 0 ? std::min(250.0, timeoutMs_ / 8) : 250.0;
  const auto period = std::chrono::duration<double, std::milli>(periodMs);
  std::vector<std::shared_ptr<Work>> watched;  // only this thread touches it
  for (double last = hostNowMs(); incoming_.takeAllAfter(period, watched);) {
    // Woken a second or more after its period, this process was stopped (SIGSTOP, Ctrl-Z): on a resume (mpirun's
    // SIGCONT before it ends the job) its works are not the ones to blame.
    const double now = hostNowMs();
    if (now - last > periodMs + 1000.0) resumedMs_ = now;
    last = now;
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(healthMutex_);
      if (healthCheck_ && !healthStopped_) {
        failure = healthCheck_();
        healthStopped_ = !failure.empty();  // reported once; onFailure may return
      }
    }
    if (!failure.empty()) fail(failure);
    scan(watched);
  }
}

Deadline::Deadline(double seconds, std::string line, std::function<void()> onExpire)
    : thread_([this, seconds, line = std::move(line), expire = std::move(onExpire)] {
        std::unique_lock<std::mutex> lock(mutex_);
        if (seconds <= 0) {
          done_.wait(lock, [&] { return closed_; });
          return;
        }
        using Clock = std::chrono::steady_clock;
        const auto span = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
        for (auto end = Clock::now() + span;; end = Clock::now() + span) {
          if (done_.wait_until(lock, end, [&] { return closed_; })) return;
          // Woken long after the deadline, this process was stopped meanwhile (SIGSTOP, Ctrl-Z): not the call's
          // fault, and on mpirun's SIGCONT before it ends a job it would be a wrong line. The call gets its time
          // again.
          if (Clock::now() - end < std::chrono::seconds(1)) break;
        }
        if (!line.empty()) {
          std::fprintf(stderr, "%s\n", line.c_str());
          std::fflush(stderr);
        }
        expire();
      }) {}

Deadline::~Deadline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  done_.notify_all();
  thread_.join();
}

}  // namespace minidp::distributed
