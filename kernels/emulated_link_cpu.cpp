// CPU emulated link: copy each chunk out and back (reads and writes every byte), then sleep; the sum of
// identical copies.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>

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

namespace minidp::kernels::cpu {

template <typename T>
void sumOfCopies(T* x, int copies, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bf16>) {
      x[i] = floatToBf16(bf16ToFloat(x[i]) * static_cast<float>(copies));
    } else if constexpr (std::is_same_v<T, fp16>) {
      x[i] = floatToFp16(fp16ToFloat(x[i]) * static_cast<float>(copies));
    } else {
      x[i] = timesCopies(x[i], copies);
    }
  }
}

template void sumOfCopies<float>(float*, int, int64_t);
template void sumOfCopies<double>(double*, int, int64_t);
template void sumOfCopies<int32_t>(int32_t*, int, int64_t);
template void sumOfCopies<int8_t>(int8_t*, int, int64_t);
template void sumOfCopies<uint8_t>(uint8_t*, int, int64_t);
template void sumOfCopies<bf16>(bf16*, int, int64_t);
template void sumOfCopies<fp16>(fp16*, int, int64_t);

}  // namespace minidp::kernels::cpu
