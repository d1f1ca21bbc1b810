// CPU twins of kernels/composite_kernels.cu (float and double; bf16 is CUDA-only).
#include "base/check.h"
#include "kernels/composite_kernels.h"
#include "kernels/composite_math.h"

namespace minidp::kernels::cpu {

template <typename T>
void unaryForward(UnaryOp op, const T* x, AccumOf<T> p, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = unaryValue(op, x[i], p);
}
template <typename T>
void unaryBackward(UnaryOp op, const T* x, AccumOf<T> p, const T* dy, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * unaryDerivative(op, x[i], p);
}
template <typename T, typename B>
void binaryForward(BinaryOp op, Broadcast broadcast, const T* a, const B* b, T* out, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) {
    out[i] = binaryValue(op, a ? a[i] : T(0), b[broadcastIndex(broadcast, i, cols)]);
  }
}
template <typename T>
void divBackward(const T* a, const T* b, const T* g, T* da, T* db, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T q = g[i] / b[i];
    da[i] = q;
    db[i] = -(q * (a[i] / b[i]));
  }
}
template <typename T>
void swigluForward(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = swigluValue(a[i], b[i]);
}
template <typename T>
void swigluBackward(const T* a, const T* b, const T* g, T* da, T* db, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) swigluGradients(a[i], b[i], g[i], da[i], db[i]);
  if (y) swigluForward(a, b, y, n);
}
template <typename T, typename O>
void sumLastDim(const T* x, const T* y, AccumOf<T> scale, O* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    T s = 0;
    for (int64_t c = 0; c < cols; ++c) s += y ? x[r * cols + c] * y[r * cols + c] : x[r * cols + c];
    out[r] = s * scale;
  }
}
template <typename T, typename O>
void sumLeadingDims(const T* x, const T* y, O* out, AccumOf<T>* /*scratch: the CPU sums rows in order*/, int64_t rows,
                    int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    T s = 0;
    for (int64_t r = 0; r < rows; ++r) s += y ? x[r * cols + c] * y[r * cols + c] : x[r * cols + c];
    out[c] = s;
  }
}
template <typename T>
void gatherRows(const T* table, const int32_t* index, T* out, int64_t n, int64_t C, int64_t V) {
  for (int64_t i = 0; i < n; ++i) {
    MINIDP_CHECK(index[i] >= 0 && index[i] < V, "gatherRows: index " << index[i] << " outside [0, " << V << ")");
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = table[index[i] * C + c];
  }
}

#define MINIDP_INSTANTIATE(T)                                                                       \
  template void unaryForward<T>(UnaryOp, const T*, T, T*, int64_t);                                 \
  template void unaryBackward<T>(UnaryOp, const T*, T, const T*, T*, int64_t);                      \
  template void binaryForward<T, T>(BinaryOp, Broadcast, const T*, const T*, T*, int64_t, int64_t); \
  template void divBackward<T>(const T*, const T*, const T*, T*, T*, int64_t);                      \
  template void swigluForward<T>(const T*, const T*, T*, int64_t);                                  \
  template void swigluBackward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t);               \
  template void sumLastDim<T, T>(const T*, const T*, T, T*, int64_t, int64_t);                      \
  template void sumLeadingDims<T, T>(const T*, const T*, T*, T*, int64_t, int64_t);                 \
  template void gatherRows<T>(const T*, const int32_t*, T*, int64_t, int64_t, int64_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
