#include "framework/distributed/job/comm_thread.h"

namespace minidp::distributed {

CpuWork::CpuWork(std::string tag, size_t bytes, std::function<void()> task)
    : Work(std::move(tag), bytes), task_(std::move(task)) {
  timing_.launchedMs = hostNowMs();
}

void CpuWork::run() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    started_ = true;
    timing_.startedMs = hostNowMs();
  }
  std::exception_ptr error;
  try {
    task_();
  } catch (...) {
    error = std::current_exception();
  }
  task_ = nullptr;  // releases the captured tensors on the comm thread, before waiters resume
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
    error_ = error;
    timing_.finishedMs = hostNowMs();
  }
  done_.notify_all();
}

void CpuWork::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return finished_; });
  if (error_) std::rethrow_exception(error_);
}

bool CpuWork::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

double CpuWork::runningSinceMs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return started_ && !finished_ ? timing_.startedMs : -1;
}

WorkTiming CpuWork::timing(cudaEvent_t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timing_;
}

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  queue_.stop();
  thread_.join();
}

std::shared_ptr<CpuWork> CommThread::post(std::function<void()> task, std::string tag, size_t bytes) {
  auto work = std::make_shared<CpuWork>(std::move(tag), bytes, std::move(task));
  queue_.post(work);
  return work;
}

void CommThread::execute(std::function<void()> task, std::string tag) {
  post(std::move(task), std::move(tag), 0)->wait();
}

void CommThread::loop() {
  // Until stopped with everything posted run.
  for (std::shared_ptr<CpuWork> work; queue_.takeOne(work);) work->run();
}

}  // namespace minidp::distributed
