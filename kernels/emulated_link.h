// The emulated interconnect's "collective": reads and writes a bucket in place without changing its bits
// (the average of N identical copies is the copy), then holds its CTAs (GPU) or the comm thread (CPU)
// until the modelled transfer time has passed since it started.
#pragma once

#include <cstdint>

#include "base/stream.h"

namespace minidp::kernels {
namespace cpu {
/// Touches `bytes` bytes at `buffer` (multiple of 4), then sleeps until `seconds` after the call began.
/// `ctas` is ignored: the CPU link occupies the calling thread.
void emulatedLink(void* buffer, int64_t bytes, double seconds, int ctas);
}  // namespace cpu
namespace cuda {
/// `ctas` blocks touch the buffer and spin on %globaltimer until `seconds` after each block started, so
/// the link occupies at most `ctas` SMs, as NCCL's CTAs do.
void emulatedLink(void* buffer, int64_t bytes, double seconds, int ctas, cudaStream_t stream);
}  // namespace cuda
}  // namespace minidp::kernels
