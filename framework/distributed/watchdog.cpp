#include "framework/distributed/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

namespace minidp::distributed {

Watchdog::Watchdog(double timeoutSeconds, int rank, std::function<void()> onTimeout,
                   std::function<void()> threadInit, std::function<std::string()> healthCheck)
    : timeoutMs_(timeoutSeconds * 1000.0),
      rank_(rank),
      onTimeout_(std::move(onTimeout)),
      healthCheck_(std::move(healthCheck)),
      thread_([this, init = std::move(threadInit)] { loop(init); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::watch(const std::shared_ptr<Work>& work) {
  std::lock_guard<std::mutex> lock(mutex_);
  watched_.push_back(work);
}

std::string Watchdog::describeTimeout(const Work& work, int rank, double ageSeconds) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << "minidp watchdog: rank " << rank << ": collective '" << work.tag() << "' (" << work.bytes()
     << " bytes) has not completed after " << ageSeconds
     << " s (a rank died, or ranks issued different collectives); aborting every rank";
  return os.str();
}

void Watchdog::fail(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  onTimeout_();
}

void Watchdog::loop(const std::function<void()>& threadInit) {
  if (threadInit) threadInit();
  // Poll a few times per timeout, at least once a second: the check costs one event query per work.
  const auto period = std::chrono::duration<double, std::milli>(timeoutMs_ > 0 ? std::min(1000.0, timeoutMs_ / 4)
                                                                               : 1000.0);
  bool unhealthy = false;  // the health check failed and onTimeout returned: do not report it again
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period, [&] { return stopping_; })) {
    if (healthCheck_ && !unhealthy) {
      const std::string failure = healthCheck_();
      if (!failure.empty()) {
        unhealthy = true;
        fail(failure);
      }
    }
    const double now = hostNowMs();
    for (auto it = watched_.begin(); it != watched_.end();) {
      Work& work = **it;
      std::string failure;
      try {
        if (work.completed()) {
          it = watched_.erase(it);  // the last holder may be us: releases its events and buffer
          continue;
        }
        const double since = work.runningSinceMs();
        if (timeoutMs_ > 0 && since >= 0 && now - since > timeoutMs_) {
          failure = describeTimeout(work, rank_, (now - since) / 1000.0);
        }
      } catch (const std::exception& e) {
        failure = "minidp watchdog: rank " + std::to_string(rank_) + ": collective '" + work.tag() +
                  "' failed: " + e.what() + "; aborting every rank";
      }
      if (!failure.empty()) {
        fail(failure);
        it = watched_.erase(it);  // onTimeout returned: do not report this work again
        continue;
      }
      ++it;
    }
  }
}

}  // namespace minidp::distributed
