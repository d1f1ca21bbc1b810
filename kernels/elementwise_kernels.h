// Elementwise kernels: arithmetic, ReLU and GELU forward/backward. CPU twins share the signatures,
// minus the stream. Instantiated for float and double; the CUDA kernels also for bf16 (math in float).
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"

namespace minidp::kernels {

#define MINIDP_ELEMENTWISE_DECLARATIONS(...)                                \
  /* out = a + b */                                                         \
  template <typename T>                                                     \
  void add(const T* a, const T* b, T* out, int64_t n __VA_ARGS__);          \
  /* dst += src */                                                          \
  template <typename T>                                                     \
  void addInPlace(T* dst, const T* src, int64_t n __VA_ARGS__);             \
  /* out = a * b */                                                         \
  template <typename T>                                                     \
  void mul(const T* a, const T* b, T* out, int64_t n __VA_ARGS__);          \
  /* out = x * s (out may equal x) */                                       \
  template <typename T>                                                     \
  void scale(const T* x, AccumOf<T> s, T* out, int64_t n __VA_ARGS__);      \
  /* out = value */                                                         \
  template <typename T>                                                     \
  void fill(T* out, T value, int64_t n __VA_ARGS__);                        \
  /* y = max(x, 0) */                                                       \
  template <typename T>                                                     \
  void reluForward(const T* x, T* y, int64_t n __VA_ARGS__);                \
  /* dx = dy * (x > 0) */                                                   \
  template <typename T>                                                     \
  void reluBackward(const T* x, const T* dy, T* dx, int64_t n __VA_ARGS__); \
  /* y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */                 \
  template <typename T>                                                     \
  void geluForward(const T* x, T* y, int64_t n __VA_ARGS__);                \
  /* dx = dy * gelu'(x) */                                                  \
  template <typename T>                                                     \
  void geluBackward(const T* x, const T* dy, T* dx, int64_t n __VA_ARGS__);

namespace cpu {
MINIDP_ELEMENTWISE_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_ELEMENTWISE_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_ELEMENTWISE_DECLARATIONS

}  // namespace minidp::kernels
