// Mailbox: what one background thread of the distributed layer is handed by others (the comm thread's
// tasks, the watchdog's new works), a stop flag, and the mutex and condition variable guarding both.
// The mutex guards the mailbox only, never the thread's own work: post() never waits for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <mutex>
#include <vector>

namespace minidp::distributed {

/// A FIFO of items posted by any thread and taken by one reader thread, with a stop request.
template <typename T>
class Mailbox {
 public:
  /// Appends `item`; `wake`: wakes a reader blocked in takeOne (a polling reader does not need it).
  void post(T item, bool wake = true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.push_back(std::move(item));
    }
    if (wake) wake_.notify_one();
  }

  /// Blocks until an item is posted or stop() was called; takes the oldest item into `out`. Returns false
  /// once stopped and empty: items posted before stop() are all taken first.
  bool takeOne(T& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || !items_.empty(); });
    if (items_.empty()) return false;
    out = std::move(items_.front());
    items_.pop_front();
    return true;
  }

  /// Sleeps for `period` unless stop() is called; then moves every posted item to the end of `out`.
  /// Returns false, taking nothing, once stopped.
  template <typename Rep, typename Period>
  bool takeAllAfter(std::chrono::duration<Rep, Period> period, std::vector<T>& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, period, [&] { return stopping_; })) return false;
    out.insert(out.end(), std::make_move_iterator(items_.begin()), std::make_move_iterator(items_.end()));
    items_.clear();
    return true;
  }

  /// Asks the reader to stop and wakes it (the owner joins the reader thread next).
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<T> items_;
  bool stopping_ = false;
};

}  // namespace minidp::distributed
