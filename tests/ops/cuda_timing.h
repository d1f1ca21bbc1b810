// What the kernel benchmarks share: a device buffer that frees itself, CUDA-event timing on one stream and
// the program's main.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>

#include "base/cuda_check.h"

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

/// A benchmark program's main: runs `body` on a new non-blocking stream of device 0 with the device's
/// properties; an exception is printed on one line under `program`'s name and gives exit status 1.
inline int runOnStream(const char* program, const std::function<void(cudaStream_t, const cudaDeviceProp&)>& body) {
  try {
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    body(stream, prop);
    CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
  return 0;
}

}  // namespace minidp::bench
