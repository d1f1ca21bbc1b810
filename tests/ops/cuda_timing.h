// What the kernel benchmarks share: a device buffer that frees itself and CUDA-event timing on one stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

#include "kernels/cuda_check.h"

namespace minidp::bench {

constexpr int kWarmup = 3, kRepeats = 20;

/// A device buffer of n elements of T, freed at scope exit.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

/// Mean milliseconds of one call of `f`, after kWarmup untimed calls.
inline double timeMs(const std::function<void()>& f, cudaStream_t stream) {
  for (int i = 0; i < kWarmup; ++i) f();
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < kRepeats; ++i) f();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms / kRepeats;
}

}  // namespace minidp::bench
