// CPU twin of kernels/convert.cu.
#include "kernels/accum.h"
#include "kernels/convert.h"

namespace minidp::kernels::cpu {

template <typename From, typename To>
void convert(const From* x, To* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = convertValue<To>(x[i]);
}

#define MINIDP_INSTANTIATE(From, To) template void convert<From, To>(const From*, To*, int64_t);
MINIDP_FOR_EACH_CONVERSION(MINIDP_INSTANTIATE)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
