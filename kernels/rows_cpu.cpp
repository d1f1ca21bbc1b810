// CPU twins of the row listing, gather and scatter-add.
#include <algorithm>
#include <type_traits>

#include "base/check.h"
#include "kernels/rows.h"

namespace minidp::kernels::cpu {

namespace {
template <typename To, typename From>
To convert(From x) {
  if constexpr (std::is_same_v<To, bf16>) {
    return floatToBf16(x);
  } else if constexpr (std::is_same_v<From, bf16>) {
    return static_cast<To>(bf16ToFloat(x));
  } else {
    return static_cast<To>(x);
  }
}
}  // namespace

void markRows(const int32_t* ids, int64_t n, int64_t V, int32_t* marks) {
  for (int64_t k = 0; k < n; ++k) {
    MINIDP_CHECK(ids[k] >= 0 && ids[k] < V, "row id " << ids[k] << " outside [0, " << V << ")");
    marks[ids[k]] = 1;
  }
}

void listMarkedRows(const int32_t* marks, int64_t V, int32_t* out, int64_t capacity) {
  int64_t count = 0;
  for (int64_t v = 0; v < V; ++v) {
    if (marks[v] == 0) continue;
    MINIDP_CHECK(count < capacity, "more than " << capacity << " marked rows");
    out[count++] = static_cast<int32_t>(v);
  }
  std::fill(out + count, out + capacity, -1);
}

template <typename T, typename W>
void gatherRows(const T* grad, const int32_t* ids, int64_t n, int64_t C, W* packed) {
  for (int64_t k = 0; k < n; ++k) {
    W* row = packed + k * C;
    if (ids[k] < 0) {
      std::fill_n(row, C, convert<W>(T(0)));
      continue;
    }
    const T* from = grad + ids[k] * C;
    for (int64_t c = 0; c < C; ++c) row[c] = convert<W>(from[c]);
  }
}

template <typename W, typename T>
void scatterAddRows(const W* packed, const int32_t* ids, int64_t n, int64_t C, T* grad) {
  for (int64_t k = 0; k < n; ++k) {
    if (ids[k] < 0) continue;
    T* row = grad + ids[k] * C;
    for (int64_t c = 0; c < C; ++c) row[c] += convert<T>(packed[k * C + c]);
  }
}

template void gatherRows<float, float>(const float*, const int32_t*, int64_t, int64_t, float*);
template void gatherRows<double, double>(const double*, const int32_t*, int64_t, int64_t, double*);
template void gatherRows<float, bf16>(const float*, const int32_t*, int64_t, int64_t, bf16*);
template void scatterAddRows<float, float>(const float*, const int32_t*, int64_t, int64_t, float*);
template void scatterAddRows<double, double>(const double*, const int32_t*, int64_t, int64_t, double*);
template void scatterAddRows<bf16, float>(const bf16*, const int32_t*, int64_t, int64_t, float*);

}  // namespace minidp::kernels::cpu
