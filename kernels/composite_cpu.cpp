// CPU twins of kernels/composite.cu.
#include "base/check.h"
#include "kernels/composite.h"
#include "kernels/composite_math.h"

namespace minidp::kernels::cpu {

template <typename T>
void unaryForward(UnaryOp op, const T* x, T p, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = unaryValue(op, x[i], p);
}
template <typename T>
void unaryBackward(UnaryOp op, const T* x, T p, const T* dy, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * unaryDerivative(op, x[i], p);
}
template <typename T>
void binaryForward(BinaryOp op, Broadcast broadcast, const T* a, const T* b, T* out, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) {
    out[i] = binaryValue(op, a ? a[i] : T(0), b[broadcastIndex(broadcast, i, cols)]);
  }
}
template <typename T>
void sumLastDim(const T* x, T* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    T s = 0;
    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
    out[r] = s;
  }
}
template <typename T>
void gatherRows(const T* table, const int32_t* index, T* out, int64_t n, int64_t C, int64_t V) {
  for (int64_t i = 0; i < n; ++i) {
    MINIDP_CHECK(index[i] >= 0 && index[i] < V, "gatherRows: index " << index[i] << " outside [0, " << V << ")");
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = table[index[i] * C + c];
  }
}

#define MINIDP_INSTANTIATE(T)                                                                    \
  template void unaryForward<T>(UnaryOp, const T*, T, T*, int64_t);                              \
  template void unaryBackward<T>(UnaryOp, const T*, T, const T*, T*, int64_t);                   \
  template void binaryForward<T>(BinaryOp, Broadcast, const T*, const T*, T*, int64_t, int64_t); \
  template void sumLastDim<T>(const T*, T*, int64_t, int64_t);                                   \
  template void gatherRows<T>(const T*, const int32_t*, T*, int64_t, int64_t, int64_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
