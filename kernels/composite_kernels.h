// Kernels of the composable ops: unary maps, same-shape and broadcast binary maps, div's backward, sums
// over the last or the leading dimensions (optionally of products), and a row gather. Shapes: x (rows, cols)
// is any (..., C) tensor flattened, rows = the product of the leading dimensions. Activations T are float,
// double or (CUDA only) bf16: each element is loaded into AccumOf<T> (float for bf16), computed there and
// rounded once to T; sums accumulate in AccumOf<T>. A broadcast operand, and a sum's output, is T or
// ParamOf<T> (an fp32 parameter and its gradient beside bf16 activations). CPU twins share the signatures,
// minus the stream, for float and double.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"
#include "kernels/column_reduce.h"
#include "kernels/composite_math.h"  // UnaryOp, BinaryOp, Broadcast

namespace minidp::kernels {

/// Accumulators sumLeadingDims needs in `scratch` for an (rows, cols) input (the CPU twin needs none).
inline int64_t sumLeadingDimsScratchSize(int64_t rows, int64_t cols) { return columnSlices(rows, cols) * cols; }

#define MINIDP_COMPOSITE_DECLARATIONS(...)                                                                          \
  /* y (n) = f(x; p) */                                                                                             \
  template <typename T>                                                                                             \
  void unaryForward(UnaryOp op, const T* x, AccumOf<T> p, T* y, int64_t n __VA_ARGS__);                             \
  /* dx (n) = dy * f'(x; p) */                                                                                      \
  template <typename T>                                                                                             \
  void unaryBackward(UnaryOp op, const T* x, AccumOf<T> p, const T* dy, T* dx, int64_t n __VA_ARGS__);              \
  /* out (rows, cols) = a (rows, cols) op b, b laid out as `broadcast` says; B is T or ParamOf<T> */                \
  template <typename T, typename B>                                                                                 \
  void binaryForward(BinaryOp op, Broadcast broadcast, const T* a, const B* b, T* out, int64_t rows,                \
                     int64_t cols __VA_ARGS__);                                                                     \
  /* da (n) = g / b and db (n) = -(g / b) (a / b): the backward of a / b, each rounded once */                      \
  template <typename T>                                                                                             \
  void divBackward(const T* a, const T* b, const T* g, T* da, T* db, int64_t n __VA_ARGS__);                        \
  /* y (n) = silu(a) b: SwiGLU's gated product, rounded once */                                                     \
  template <typename T>                                                                                             \
  void swigluForward(const T* a, const T* b, T* y, int64_t n __VA_ARGS__);                                          \
  /* da (n) = g b silu'(a) and db (n) = g silu(a): its backward, each rounded once; y, when not null, gets */       \
  /* silu(a) b again (swigluForward's bits), for a product whose input was not kept */                              \
  template <typename T>                                                                                             \
  void swigluBackward(const T* a, const T* b, const T* g, T* da, T* db, T* y, int64_t n __VA_ARGS__);               \
  /* out (rows) = scale * the sum over the columns of x (rows, cols), or of x * y when y is not null; */            \
  /* each row in a fixed order (no atomics). O is T or ParamOf<T>. */                                               \
  template <typename T, typename O>                                                                                 \
  void sumLastDim(const T* x, const T* y, AccumOf<T> scale, O* out, int64_t rows, int64_t cols __VA_ARGS__);        \
  /* out (cols) = the sum over the rows of x (rows, cols), or of x * y when y is not null, in a fixed order */      \
  /* (no atomics): row slices into scratch (sumLeadingDimsScratchSize), then the slices in order. */                \
  template <typename T, typename O>                                                                                 \
  void sumLeadingDims(const T* x, const T* y, O* out, AccumOf<T>* scratch, int64_t rows, int64_t cols __VA_ARGS__); \
  /* out (n, C) = table[index[i]] for table (V, C). An index outside [0, V): the CPU twin throws, */                \
  /* the GPU kernel writes NaN to that row (no host sync to report it). */                                          \
  template <typename T>                                                                                             \
  void gatherRows(const T* table, const int32_t* index, T* out, int64_t n, int64_t C, int64_t V __VA_ARGS__);

namespace cpu {
MINIDP_COMPOSITE_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_COMPOSITE_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_COMPOSITE_DECLARATIONS

}  // namespace minidp::kernels
