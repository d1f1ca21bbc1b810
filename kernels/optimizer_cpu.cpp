// CPU twins of kernels/optimizer.cu.
#include <cmath>

#include "kernels/optimizer_math.h"

namespace minidp::kernels::cpu {

template <typename T> void sgdStep(T* param, const T* grad, T* momentumBuf, int64_t n, SgdParams<T> h) {
  T unused = 0;
  for (int64_t i = 0; i < n; ++i) sgdUpdate(param[i], grad[i], momentumBuf ? momentumBuf[i] : unused, h);
}

template <typename T> void adamwStep(T* param, const T* grad, T* m, T* v, int64_t n, AdamWParams<T> h) {
  const T bias1 = T(1) - std::pow(h.beta1, T(h.step)), bias2 = T(1) - std::pow(h.beta2, T(h.step));
  for (int64_t i = 0; i < n; ++i) adamwUpdate(param[i], grad[i], m[i], v[i], h, bias1, bias2);
}

template void sgdStep<float>(float*, const float*, float*, int64_t, SgdParams<float>);
template void sgdStep<double>(double*, const double*, double*, int64_t, SgdParams<double>);
template void adamwStep<float>(float*, const float*, float*, float*, int64_t, AdamWParams<float>);
template void adamwStep<double>(double*, const double*, double*, double*, int64_t, AdamWParams<double>);

}  // namespace minidp::kernels::cpu
