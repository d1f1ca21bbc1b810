// Dtype and device dispatch used by every op: one switch, one place that knows CUDA may be absent.
#pragma once

#include <type_traits>

#include "framework/runtime/device.h"
#include "framework/tensor/tensor.h"

/// One case of a dtype switch: runs the block with `T` bound to `type` (helper of the dispatch macros).
#define MINIDP_DISPATCH_CASE_(enumerator, type, T, ...) \
  case ::minidp::DType::enumerator: {                   \
    using T = type;                                     \
    __VA_ARGS__;                                        \
    break;                                              \
  }

/// The error of a dtype switch that has no case for `dtype`.
#define MINIDP_DISPATCH_DEFAULT_(dtype) \
  default:                              \
    ::minidp::throwError(std::string("expected a float tensor, got ") + ::minidp::dtypeName(dtype), __FILE__, __LINE__)

/// Runs the block with `T` bound to float or double according to `dtype`.
#define MINIDP_DISPATCH_FLOAT(dtype, T, ...)             \
  do {                                                   \
    switch (dtype) {                                     \
      MINIDP_DISPATCH_CASE_(F32, float, T, __VA_ARGS__)  \
      MINIDP_DISPATCH_CASE_(F64, double, T, __VA_ARGS__) \
      MINIDP_DISPATCH_DEFAULT_(dtype);                   \
    }                                                    \
  } while (0)

/// Like MINIDP_DISPATCH_FLOAT, also binding `T` to bf16 for BF16 tensors (mixed-precision activations).
#define MINIDP_DISPATCH_ACTIVATION(dtype, T, ...)                 \
  do {                                                            \
    switch (dtype) {                                              \
      MINIDP_DISPATCH_CASE_(F32, float, T, __VA_ARGS__)           \
      MINIDP_DISPATCH_CASE_(F64, double, T, __VA_ARGS__)          \
      MINIDP_DISPATCH_CASE_(BF16, ::minidp::bf16, T, __VA_ARGS__) \
      MINIDP_DISPATCH_DEFAULT_(dtype);                            \
    }                                                             \
  } while (0)

/// Runs the block with `T` bound to float or bf16 according to `dtype` (the element types of the CUDA flash
/// attention kernels).
#define MINIDP_DISPATCH_F32_BF16(dtype, T, ...)                   \
  do {                                                            \
    switch (dtype) {                                              \
      MINIDP_DISPATCH_CASE_(F32, float, T, __VA_ARGS__)           \
      MINIDP_DISPATCH_CASE_(BF16, ::minidp::bf16, T, __VA_ARGS__) \
      MINIDP_DISPATCH_DEFAULT_(dtype);                            \
    }                                                             \
  } while (0)

#if MINIDP_WITH_CUDA
/// The statement, in a CUDA build; otherwise an error saying that minidp was built without CUDA.
#define MINIDP_ON_CUDA(...) __VA_ARGS__
#else
#define MINIDP_ON_CUDA(...) ::minidp::throwError("minidp was built without CUDA", __FILE__, __LINE__)
#endif

namespace minidp::ops {

/// Checks that all tensors share device and dtype with the first, naming the op.
void checkSame(const char* op, const Tensor& a, const Tensor& b);
/// Checks that x is an activation the float ops run: F32 or F64 on either device, BF16 on CUDA; otherwise
/// a one-line error naming the op, the dtype and the device.
void checkActivation(const char* op, const Tensor& x);

}  // namespace minidp::ops

/// Calls kernels::cuda::kernel(args..., computeStream()) for a CUDA tensor, kernels::cpu::kernel(args...)
/// otherwise. `kernel` may carry template arguments.
#define MINIDP_LAUNCH(tensor, kernel, ...)                                                              \
  do {                                                                                                  \
    if ((tensor).isCuda()) {                                                                            \
      MINIDP_ON_CUDA(::minidp::kernels::cuda::kernel(__VA_ARGS__, ::minidp::runtime::computeStream())); \
    } else {                                                                                            \
      ::minidp::kernels::cpu::kernel(__VA_ARGS__);                                                      \
    }                                                                                                   \
  } while (0)

/// MINIDP_LAUNCH on an explicit stream: a comm hook's work on the comm stream (the CPU twin ignores it).
#define MINIDP_LAUNCH_ON(stream, tensor, kernel, ...)                          \
  do {                                                                         \
    if ((tensor).isCuda()) {                                                   \
      MINIDP_ON_CUDA(::minidp::kernels::cuda::kernel(__VA_ARGS__, (stream)));  \
    } else {                                                                   \
      ::minidp::kernels::cpu::kernel(__VA_ARGS__);                             \
    }                                                                          \
  } while (0)

/// MINIDP_LAUNCH for an activation kernel<T> that may be bf16: bf16 kernels exist on CUDA only (the CPU
/// keeps its fp32/fp64 twins), so a bf16 CPU tensor is an error naming the op.
#define MINIDP_LAUNCH_ACTIVATION_T(tensor, T, kernel, ...)                                                \
  do {                                                                                                    \
    if constexpr (std::is_same_v<T, ::minidp::bf16>) {                                                    \
      if ((tensor).isCuda()) {                                                                            \
        MINIDP_ON_CUDA(::minidp::kernels::cuda::kernel(__VA_ARGS__, ::minidp::runtime::computeStream())); \
      } else {                                                                                            \
        ::minidp::throwError("bf16 tensors are CUDA-only (" #kernel ")", __FILE__, __LINE__);             \
      }                                                                                                   \
    } else {                                                                                              \
      MINIDP_LAUNCH(tensor, kernel, __VA_ARGS__);                                                         \
    }                                                                                                     \
  } while (0)

/// MINIDP_LAUNCH of kernel<T> with T bound to float, double or bf16 by the dtype of `tensor`.
#define MINIDP_LAUNCH_ACTIVATION(tensor, T, kernel, ...) \
  MINIDP_DISPATCH_ACTIVATION((tensor).dtype(), T, MINIDP_LAUNCH_ACTIVATION_T(tensor, T, kernel<T>, __VA_ARGS__))

/// MINIDP_LAUNCH of kernel<T> with T bound by the float dtype of `tensor`.
#define MINIDP_LAUNCH_FLOAT(tensor, T, kernel, ...) \
  MINIDP_DISPATCH_FLOAT((tensor).dtype(), T, MINIDP_LAUNCH(tensor, kernel<T>, __VA_ARGS__))
