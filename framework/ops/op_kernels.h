// The kernels of an op added outside minidp's kernel families (a user's fused op): a CPU kernel, and a
// CUDA kernel when there is one. CUDA is optional per op: an op with a CPU kernel alone builds and runs on
// the CPU in any build, and on a CUDA tensor it fails with an error naming the op, not at link time.
// docs/extending.md shows a whole op built on it.
#pragma once

#include <utility>

#include "framework/runtime/device.h"
#include "framework/tensor/tensor.h"

namespace minidp::ops {

/// The launchers of one op for one argument list `Args`: `cpu(args...)` and, optionally,
/// `cuda(args..., stream)` (the llm.c launcher shape of kernels/, taking the compute stream last).
template <typename... Args>
struct OpKernels {
  using CpuKernel = void (*)(Args...);
  using CudaKernel = void (*)(Args..., cudaStream_t);

  const char* name;           // the op, as errors name it
  CpuKernel cpu;              // required
  CudaKernel cuda = nullptr;  // null: this op has no CUDA kernel

  /// Runs the kernel of `device`: the CUDA one on the compute stream, or the CPU one.
  void launch(Device device, Args... args) const {
    if (device == Device::CUDA) {
      MINIDP_CHECK(cuda != nullptr, "op '" << name
                                           << "' has no CUDA kernel (CPU only); run it on the CPU or "
                                              "give it a CUDA launcher");
      cuda(std::forward<Args>(args)..., runtime::computeStream());
    } else {
      MINIDP_CHECK(cpu != nullptr, "op '" << name << "' has no CPU kernel");
      cpu(std::forward<Args>(args)...);
    }
  }
};

}  // namespace minidp::ops
