#include "framework/runtime/device.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/check.h"

#if MINIDP_WITH_CUDA
#include "base/cuda_check.h"
#endif

namespace minidp::runtime {

#if MINIDP_WITH_CUDA

namespace {

struct Context {
  int device = 0;
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  // Caching allocator: rounded size -> free blocks.
  std::mutex mutex;
  std::multimap<size_t, void*> freeBlocks;
  AllocatorStats stats;
  // CUDA graphs' private pools: their free blocks, each block's pool, the pool capturing now (-1: none).
  std::map<int, std::multimap<size_t, void*>> poolFree;
  std::unordered_map<void*, int> poolOf;
  int capturing = -1;
  int nextPool = 0;
};

Context& context() {
  static Context* ctx = new Context();  // never destroyed: CUDA may be torn down before static dtors
  return *ctx;
}

// Small blocks round to 512 B, large ones to 2 MiB, so that shapes that vary a little share blocks.
size_t roundSize(size_t bytes) {
  const size_t small = 512, large = size_t(2) << 20;
  if (bytes < (size_t(1) << 20)) return (bytes + small - 1) / small * small;
  return (bytes + large - 1) / large * large;
}

void noteAllocated(AllocatorStats& stats, size_t size) {
  stats.allocatedBytes += size;
  stats.peakAllocatedBytes = std::max(stats.peakAllocatedBytes, stats.allocatedBytes);
}

}  // namespace

bool cudaAvailable() { return cudaDeviceCount() > 0; }

int cudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

void setDevice(int device) {
  Context& ctx = context();
  MINIDP_CHECK(ctx.compute == nullptr || ctx.device == device,
               "setDevice(" << device << ") after the CUDA context was created on device " << ctx.device);
  CUDA_CHECK(cudaSetDevice(device));
  ctx.device = device;
}

int currentDevice() { return context().device; }

cudaStream_t computeStream() {
  Context& ctx = context();
  if (!ctx.compute) {
    CUDA_CHECK(cudaSetDevice(ctx.device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.compute, cudaStreamNonBlocking));
  }
  return ctx.compute;
}

cudaStream_t copyStream() {
  Context& ctx = context();
  if (!ctx.copy) {
    computeStream();
    CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.copy, cudaStreamNonBlocking));
  }
  return ctx.copy;
}

void synchronize() { CUDA_CHECK(cudaStreamSynchronize(computeStream())); }

void* deviceAllocate(size_t bytes) {
  Context& ctx = context();
  computeStream();
  const size_t size = roundSize(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(ctx.mutex);
  // A capture takes its pool's free blocks first, then the cache's (which join the pool).
  for (std::multimap<size_t, void*>* blocks :
       {ctx.capturing >= 0 ? &ctx.poolFree[ctx.capturing] : nullptr, &ctx.freeBlocks}) {
    if (!blocks) continue;
    auto it = blocks->find(size);
    if (it == blocks->end()) continue;
    void* ptr = it->second;
    blocks->erase(it);
    if (ctx.capturing >= 0) ctx.poolOf[ptr] = ctx.capturing;
    ctx.stats.cachedBytes -= size;
    noteAllocated(ctx.stats, size);
    return ptr;
  }
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, size);
  if (err == cudaErrorMemoryAllocation && ctx.capturing < 0) {  // cudaFree is illegal in a capture
    // Give the cache (not the graphs' pools) back to the driver once, then retry.
    cudaGetLastError();
    for (auto& block : ctx.freeBlocks) {
      cudaFree(block.second);
      ctx.stats.cachedBytes -= block.first;
    }
    ctx.freeBlocks.clear();
    err = cudaMalloc(&ptr, size);
  }
  CUDA_CHECK(err);
  ++ctx.stats.mallocCalls;
  if (ctx.capturing >= 0) ctx.poolOf[ptr] = ctx.capturing;
  noteAllocated(ctx.stats, size);
  return ptr;
}

void deviceRelease(void* ptr, size_t bytes) {
  Context& ctx = context();
  const size_t size = roundSize(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(ctx.mutex);
  // A block a capture released may be read by the graph (allocated before it, read in it): it joins the pool.
  auto owner = ctx.poolOf.find(ptr);
  if (owner == ctx.poolOf.end() && ctx.capturing >= 0) owner = ctx.poolOf.emplace(ptr, ctx.capturing).first;
  (owner == ctx.poolOf.end() ? ctx.freeBlocks : ctx.poolFree[owner->second]).emplace(size, ptr);
  ctx.stats.cachedBytes += size;
  ctx.stats.allocatedBytes -= size;
}

void* pinnedAllocate(size_t bytes) {
  void* ptr = nullptr;
  CUDA_CHECK(cudaMallocHost(&ptr, bytes == 0 ? 1 : bytes));
  return ptr;
}

void pinnedRelease(void* ptr) {
  const cudaError_t status = cudaFreeHost(ptr);
  if (status != cudaSuccess) std::fprintf(stderr, "minidp: cudaFreeHost failed: %s\n", cudaGetErrorString(status));
}

AllocatorStats allocatorStats() {
  std::lock_guard<std::mutex> lock(context().mutex);
  return context().stats;
}

void resetPeakMemory() {
  std::lock_guard<std::mutex> lock(context().mutex);
  context().stats.peakAllocatedBytes = context().stats.allocatedBytes;
}

size_t deviceFreeBytes() {
  size_t freeBytes = 0, totalBytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
  return freeBytes;
}

int beginGraphPool() {
  Context& ctx = context();
  std::lock_guard<std::mutex> lock(ctx.mutex);
  MINIDP_CHECK(ctx.capturing < 0, "beginGraphPool() during the capture of pool " << ctx.capturing);
  ctx.capturing = ctx.nextPool++;
  ctx.poolFree[ctx.capturing];
  return ctx.capturing;
}

void endGraphPool() {
  std::lock_guard<std::mutex> lock(context().mutex);
  context().capturing = -1;
}

void releaseGraphPool(int id) {
  Context& ctx = context();
  std::lock_guard<std::mutex> lock(ctx.mutex);
  auto pool = ctx.poolFree.find(id);
  if (pool == ctx.poolFree.end()) return;
  ctx.freeBlocks.insert(pool->second.begin(), pool->second.end());
  ctx.poolFree.erase(pool);
  for (auto it = ctx.poolOf.begin(); it != ctx.poolOf.end();)
    it = it->second == id ? ctx.poolOf.erase(it) : std::next(it);
}

#else  // CPU-only build

namespace {
[[noreturn]] void noCuda(const char* what) {
  throwError(std::string(what) + ": minidp was built without CUDA", __FILE__, __LINE__);
}
}  // namespace

bool cudaAvailable() { return false; }
int cudaDeviceCount() { return 0; }
void setDevice(int) { noCuda("setDevice"); }
int currentDevice() { return 0; }
cudaStream_t computeStream() { return nullptr; }
cudaStream_t copyStream() { return nullptr; }
void synchronize() {}
void* deviceAllocate(size_t) { noCuda("deviceAllocate"); }
void deviceRelease(void*, size_t) {}
void* pinnedAllocate(size_t bytes) { return std::malloc(bytes == 0 ? 1 : bytes); }
void pinnedRelease(void* ptr) { std::free(ptr); }
AllocatorStats allocatorStats() { return {}; }
void resetPeakMemory() {}
size_t deviceFreeBytes() { noCuda("deviceFreeBytes"); }
int beginGraphPool() { noCuda("beginGraphPool"); }
void endGraphPool() {}
void releaseGraphPool(int) {}

#endif

}  // namespace minidp::runtime
