// CPU twins of the row gather and scatter.
#include <algorithm>

#include "kernels/rows.h"

namespace minidp::kernels::cpu {

template <typename T>
void gatherRows(const T* grad, const int32_t* ids, int64_t n, int64_t C, T* packed) {
  for (int64_t k = 0; k < n; ++k) std::copy_n(grad + ids[k] * C, C, packed + k * C);
}

template <typename T>
void scatterRows(const T* packed, const int32_t* ids, int64_t n, int64_t C, T* grad) {
  for (int64_t k = 0; k < n; ++k) std::copy_n(packed + k * C, C, grad + ids[k] * C);
}

template void gatherRows<float>(const float*, const int32_t*, int64_t, int64_t, float*);
template void gatherRows<double>(const double*, const int32_t*, int64_t, int64_t, double*);
template void scatterRows<float>(const float*, const int32_t*, int64_t, int64_t, float*);
template void scatterRows<double>(const double*, const int32_t*, int64_t, int64_t, double*);

}  // namespace minidp::kernels::cpu
