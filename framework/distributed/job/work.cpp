#include "framework/distributed/job/work.h"

#include <algorithm>
#include <utility>

#include "base/check.h"

namespace minidp::distributed {

CompletedWork::CompletedWork(std::string tag, size_t bytes) : Work(std::move(tag), bytes), launchedMs_(hostNowMs()) {}

WorkTiming CompletedWork::timing(cudaEvent_t reference) const {
  WorkTiming t;
  t.launchedMs = launchedMs_;
  // On the host the collective took no time; on the GPU there is no event to place it.
  if (!reference) t.startedMs = t.finishedMs = launchedMs_;
  return t;
}

WorkChain::WorkChain(std::string tag, size_t bytes, std::vector<std::shared_ptr<Work>> works)
    : Work(std::move(tag), bytes), works_(std::move(works)) {
  MINIDP_CHECK(!works_.empty() && std::all_of(works_.begin(), works_.end(), [](const auto& w) { return w != nullptr; }),
               "work chain '" << this->tag() << "' without works");
}

void WorkChain::wait() {
  for (const std::shared_ptr<Work>& work : works_) work->wait();
}

bool WorkChain::completed() const {
  return std::all_of(works_.begin(), works_.end(), [](const auto& w) { return w->completed(); });
}

double WorkChain::runningSinceMs() const {
  for (const std::shared_ptr<Work>& work : works_) {
    if (!work->completed()) return work->runningSinceMs();
  }
  return -1;
}

WorkTiming WorkChain::timing(cudaEvent_t reference) const {
  WorkTiming t = works_.front()->timing(reference);
  t.finishedMs = works_.back()->timing(reference).finishedMs;
  return t;
}

}  // namespace minidp::distributed
