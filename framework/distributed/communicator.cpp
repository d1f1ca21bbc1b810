#include "framework/distributed/communicator.h"

#include <algorithm>
#include <utility>

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

int64_t paddedNumel(int64_t numel, int world) { return (numel + world - 1) / world * world; }

void checkReduction(const Tensor& buffer, bool scatter, int world) {
  MINIDP_CHECK(buffer.defined() && buffer.dtype() != DType::I32, "a reduction needs a float tensor");
  MINIDP_CHECK(!scatter || buffer.numel() % world == 0,
               "reduce-scatter of " << buffer.numel() << " elements over " << world << " ranks: pad the buffer");
}

void checkAllGather(const Tensor& input, const Tensor& output, int world) {
  MINIDP_CHECK(input.defined() && output.defined() && input.dtype() == output.dtype() &&
                   input.device() == output.device() && output.numel() == input.numel() * world,
               "all-gather of " << input.numel() << " elements over " << world << " ranks into " << output.numel()
                                << ": the output must hold world x input elements of its dtype on its device");
}

bool Communicator::allAgree(bool ok) {
  for (const std::string& vote : allGather(ok ? "1" : "0")) {
    if (vote != "1") return false;
  }
  return true;
}

}  // namespace minidp::distributed
