// Kernels of the composable ops: unary maps, same-shape and broadcast binary maps, sums over the last
// dimension, and a row gather. Shapes: x (rows, cols) is any (..., C) tensor flattened, rows = the product
// of the leading dimensions. CPU twins share the signatures, minus the stream. Instantiated for float and
// double.
#pragma once

#include <cstdint>

#include "base/stream.h"

namespace minidp::kernels {

/// y = f(x; p) for one element; p is the exponent of Pow and the addend of AddScalar, unused otherwise.
enum class UnaryOp { Neg, Exp, Sqrt, Rsqrt, Pow, AddScalar, Sigmoid, Silu };
/// out = a op b; Right returns b (a broadcast copy: `a` may be null).
enum class BinaryOp { Add, Sub, Mul, Div, Right };
/// How b (of a binary map) lines up with a (rows, cols): Same (rows, cols), Columns (cols) repeated over
/// the rows (a (C) tensor), Rows (rows) repeated over the columns (a (..., 1) tensor).
enum class Broadcast { Same, Columns, Rows };

#define MINIDP_COMPOSITE_DECLARATIONS(...)                                                           \
  /* y (n) = f(x; p) */                                                                              \
  template <typename T>                                                                              \
  void unaryForward(UnaryOp op, const T* x, T p, T* y, int64_t n __VA_ARGS__);                       \
  /* dx (n) = dy * f'(x; p) */                                                                       \
  template <typename T>                                                                              \
  void unaryBackward(UnaryOp op, const T* x, T p, const T* dy, T* dx, int64_t n __VA_ARGS__);        \
  /* out (rows, cols) = a (rows, cols) op b, b laid out as `broadcast` says */                       \
  template <typename T>                                                                              \
  void binaryForward(BinaryOp op, Broadcast broadcast, const T* a, const T* b, T* out, int64_t rows, \
                     int64_t cols __VA_ARGS__);                                                      \
  /* out (rows) = sum over the columns of x (rows, cols), each row in a fixed order (no atomics) */  \
  template <typename T>                                                                              \
  void sumLastDim(const T* x, T* out, int64_t rows, int64_t cols __VA_ARGS__);                       \
  /* out (n, C) = table[index[i]] for table (V, C). An index outside [0, V): the CPU twin throws, */ \
  /* the GPU kernel writes NaN to that row (no host sync to report it). */                           \
  template <typename T>                                                                              \
  void gatherRows(const T* table, const int32_t* index, T* out, int64_t n, int64_t C, int64_t V __VA_ARGS__);

namespace cpu {
MINIDP_COMPOSITE_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_COMPOSITE_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_COMPOSITE_DECLARATIONS

}  // namespace minidp::kernels
