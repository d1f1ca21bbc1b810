// The host side of kernels/cuda_utils.cuh: per-kernel, per-device launch attributes, set or queried once.
#include <cuda_runtime.h>

#include <climits>
#include <map>
#include <mutex>
#include <utility>

#include "base/check.h"
#include "kernels/cuda_utils.cuh"

namespace minidp::kernels::cuda {

namespace {

using Key = std::pair<const void*, int>;  // kernel, device

std::mutex gMutex;
std::map<Key, int64_t> gAllowed;  // the dynamic shared bytes each kernel was allowed
std::map<Key, int64_t> gLimits;   // dynamicSharedBytesLimit's answers

Key keyOf(const void* kernel) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return {kernel, device};
}

}  // namespace

void allowDynamicSharedBytes(const void* kernel, int64_t bytes) {
  const Key key = keyOf(kernel);
  const std::lock_guard<std::mutex> lock(gMutex);
  const auto it = gAllowed.find(key);
  if (it != gAllowed.end() && it->second >= bytes) return;
  MINIDP_CHECK(bytes <= INT_MAX, "dynamic shared memory of " << bytes << " bytes");
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  gAllowed[key] = bytes;
}

int64_t dynamicSharedBytesLimit(const void* kernel) {
  const Key key = keyOf(kernel);
  const std::lock_guard<std::mutex> lock(gMutex);
  const auto it = gLimits.find(key);
  if (it != gLimits.end()) return it->second;
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, key.second));
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return gLimits[key] = int64_t(optin) - int64_t(attributes.sharedSizeBytes);
}

}  // namespace minidp::kernels::cuda
