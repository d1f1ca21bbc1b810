#include "framework/distributed/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

namespace minidp::distributed {

Watchdog::Watchdog(double timeoutSeconds, int rank, std::function<void()> onTimeout,
                   std::function<void()> threadInit)
    : timeoutMs_(timeoutSeconds * 1000.0), rank_(rank), onTimeout_(std::move(onTimeout)) {
  if (timeoutMs_ > 0) thread_ = std::thread([this, init = std::move(threadInit)] { loop(init); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::watch(const std::shared_ptr<Work>& work) {
  if (timeoutMs_ <= 0) return;
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

void Watchdog::loop(const std::function<void()>& threadInit) {
  if (threadInit) threadInit();
  // Poll a few times per timeout, at least once a second: the check costs one event query per work.
  const auto period = std::chrono::duration<double, std::milli>(std::min(1000.0, timeoutMs_ / 4));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period, [&] { return stopping_; })) {
    const double now = hostNowMs();
    for (auto it = watched_.begin(); it != watched_.end();) {
      std::shared_ptr<Work> work = it->lock();
      std::string failure;
      try {
        if (!work || work->completed()) {
          it = watched_.erase(it);
          continue;
        }
        const double since = work->runningSinceMs();
        if (since >= 0 && now - since > timeoutMs_) failure = describeTimeout(*work, rank_, (now - since) / 1000.0);
      } catch (const std::exception& e) {
        failure = "minidp watchdog: rank " + std::to_string(rank_) + ": collective '" + work->tag() +
                  "' failed: " + e.what() + "; aborting every rank";
      }
      if (!failure.empty()) {
        std::fprintf(stderr, "%s\n", failure.c_str());
        std::fflush(stderr);
        onTimeout_();
        it = watched_.erase(it);  // onTimeout returned: do not report this work again
        continue;
      }
      ++it;
    }
  }
}

}  // namespace minidp::distributed
