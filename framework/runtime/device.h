// The per-process CUDA context: the device this rank drives, its compute and copy streams, memory.
#pragma once

#include <cstddef>

#include "base/stream.h"

namespace minidp::runtime {

/// True when minidp was built with CUDA and at least one device is visible.
bool cudaAvailable();
/// Number of visible CUDA devices (0 without CUDA).
int cudaDeviceCount();
/// Selects the device this process uses; call before any CUDA tensor exists (re-selecting the current
/// device is allowed at any time).
void setDevice(int device);
/// The device selected by setDevice (0 by default).
int currentDevice();
/// The stream every forward, backward and optimizer kernel runs on (non-default, created lazily).
cudaStream_t computeStream();
/// The stream host-to-device batch copies run on.
cudaStream_t copyStream();
/// Blocks the host until the compute stream has drained (logging, tests, end of run).
void synchronize();

/// Device memory from the caching allocator: freed blocks are kept by size and reused, so steady-state
/// training makes no cudaMalloc. Blocks are reused in compute-stream order; memory another stream
/// reads must be owned by that stream's user for as long as it reads it (see reducer buckets).
void* deviceAllocate(size_t bytes);
/// Returns a block obtained from deviceAllocate.
void deviceRelease(void* ptr, size_t bytes);
/// Pinned host memory for asynchronous copies.
void* pinnedAllocate(size_t bytes);
/// Returns pinned memory; called from destructors, so it logs failures instead of throwing.
void pinnedRelease(void* ptr);
/// Counters of the caching allocator: cudaMalloc calls, bytes cached (free), bytes held by tensors now
/// and at most since the last resetPeakMemory (block sizes as rounded by the allocator).
struct AllocatorStats {
  size_t mallocCalls = 0;
  size_t cachedBytes = 0;
  size_t allocatedBytes = 0;
  size_t peakAllocatedBytes = 0;
};
AllocatorStats allocatorStats();
/// Starts a new peak: peakAllocatedBytes = allocatedBytes (e.g. at the start of the steps measured).
void resetPeakMemory();
/// Free bytes of the selected device now (cudaMemGetInfo); the caching allocator's free blocks are not
/// counted. Throws without CUDA.
size_t deviceFreeBytes();

/// CUDA graphs: a graph replays the addresses it was captured with, so from beginGraphPool() to
/// endGraphPool() every block allocated or released joins a private pool. Its released blocks are reused
/// only by that capture and stay out of the cache until releaseGraphPool(id) (the graph is destroyed);
/// blocks of the pool still held by tensors then become ordinary blocks. One capture at a time.
int beginGraphPool();
void endGraphPool();
void releaseGraphPool(int id);

}  // namespace minidp::runtime
