// The emulated interconnect's "collective": reads and writes a bucket in place without changing its bits
// (the average of N identical copies is the copy), then holds its CTAs (GPU) or the comm thread (CPU)
// until the modelled transfer time has passed since it started.
#pragma once

#include <cstdint>
#include <type_traits>

#include "base/bf16.h"
#include "base/fp16.h"
#include "base/stream.h"

namespace minidp::kernels {

/// The emulated link's sum over `copies` identical ranks: x[i] = copies * x[i] for i in [0, n), as the type
/// adds (integers wrap: int8 two's complement, uint8 modulo 256; bf16 and fp16 computed in float, rounded
/// once). T: float, double, int32_t, int8_t, uint8_t, bf16, fp16.
#define MINIDP_SUM_OF_COPIES_DECLARATION(...) \
  template <typename T>                       \
  void sumOfCopies(T* x, int copies, int64_t n __VA_ARGS__);

namespace cpu {
MINIDP_SUM_OF_COPIES_DECLARATION()
/// Touches `bytes` bytes at `buffer` (multiple of 4), then sleeps until `seconds` after the call began.
/// `ctas` is ignored: the CPU link occupies the calling thread.
void emulatedLink(void* buffer, int64_t bytes, double seconds, int ctas);
}  // namespace cpu
namespace cuda {
MINIDP_SUM_OF_COPIES_DECLARATION(, cudaStream_t stream)
/// `ctas` blocks touch the buffer and spin on %globaltimer until `seconds` after each block started, so
/// the link occupies at most `ctas` SMs, as NCCL's CTAs do.
void emulatedLink(void* buffer, int64_t bytes, double seconds, int ctas, cudaStream_t stream);
}  // namespace cuda

#undef MINIDP_SUM_OF_COPIES_DECLARATION

/// copies * v as T adds it (host and device).
template <typename T>
MINIDP_HOST_DEVICE inline T timesCopies(T v, int copies) {
  if constexpr (std::is_integral_v<T>) {
    // Modular: the product's low bits, as `copies` wrapping adds leave them.
    return static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(v)) * static_cast<uint64_t>(copies));
  } else {
    return static_cast<T>(v * static_cast<T>(copies));
  }
}

}  // namespace minidp::kernels
