// CPU emulated link: copy each chunk out and back (reads and writes every byte), then sleep.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/check.h"
#include "kernels/emulated_link.h"

namespace minidp::kernels::cpu {

void emulatedLink(void* buffer, int64_t bytes, double seconds, int) {
  const auto start = std::chrono::steady_clock::now();
  MINIDP_CHECK(bytes >= 0 && bytes % 4 == 0, "emulated link of " << bytes << " bytes");
  constexpr int64_t kChunk = 64 * 1024;
  static thread_local char scratch[kChunk];
  char* p = static_cast<char*>(buffer);
  for (int64_t offset = 0; offset < bytes; offset += kChunk) {
    const size_t n = static_cast<size_t>(std::min(kChunk, bytes - offset));
    std::memcpy(scratch, p + offset, n);
    asm volatile("" ::: "memory");  // the compiler may not fold the round trip away
    std::memcpy(p + offset, scratch, n);
  }
  std::this_thread::sleep_until(start + std::chrono::duration<double>(seconds));
}

}  // namespace minidp::kernels::cpu
