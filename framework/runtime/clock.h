// The host clock of every host timestamp in minidp (hooks, launches, comm-thread work, the step timer).
#pragma once

#include <chrono>

namespace minidp::runtime {

/// Milliseconds on the host's steady clock since its epoch.
inline double hostNowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace minidp::runtime
