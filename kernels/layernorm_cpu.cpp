// CPU twins of kernels/layernorm.cu (float and double; bf16 is CUDA-only).
#include <cmath>

#include "kernels/layernorm.h"

namespace minidp::kernels::cpu {

template <typename T>
void layerNormForward(const T* x, const ParamOf<T>* weight, const ParamOf<T>* bias, T* y, AccumOf<T>* mean,
                      AccumOf<T>* rstd, int64_t N, int64_t C, AccumOf<T> eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += xr[c];
    const T m = sum / static_cast<T>(C);
    T sq = 0;  // two passes: the variance of shifted values does not cancel catastrophically
    for (int64_t c = 0; c < C; ++c) sq += (xr[c] - m) * (xr[c] - m);
    const T s = T(1) / std::sqrt(sq / static_cast<T>(C) + eps);
    T* yr = y + n * C;
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
void layerNormBackward(const T* dy, const T* x, const ParamOf<T>* weight, const AccumOf<T>* mean,
                       const AccumOf<T>* rstd, T* dx, ParamOf<T>* dweight, ParamOf<T>* dbias,
                       AccumOf<T>* /*scratch: the CPU sums rows in order*/, int64_t N, int64_t C, bool accumulateDx,
                       bool accumulateWeight, bool accumulateBias) {
  for (int64_t c = 0; c < C; ++c) {
    if (!accumulateWeight) dweight[c] = 0;
    if (!accumulateBias) dbias[c] = 0;
  }
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight
    T sumG = 0, sumGx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const T xhat = (xr[c] - mean[n]) * rstd[n];
      const T g = dyr[c] * weight[c];
      sumG += g;
      sumGx += g * xhat;
      dweight[c] += dyr[c] * xhat;
      dbias[c] += dyr[c];
    }
    const T meanG = sumG / static_cast<T>(C), meanGx = sumGx / static_cast<T>(C);
    T* dxr = dx + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const T xhat = (xr[c] - mean[n]) * rstd[n];
      const T term = rstd[n] * (dyr[c] * weight[c] - meanG - xhat * meanGx);
      dxr[c] = accumulateDx ? dxr[c] + term : term;
    }
  }
}

template <typename T>
void rmsNormForward(const T* x, const ParamOf<T>* weight, T* y, AccumOf<T>* rstd, int64_t N, int64_t C,
                    AccumOf<T> eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T sq = 0;
    for (int64_t c = 0; c < C; ++c) sq += xr[c] * xr[c];
    const T s = T(1) / std::sqrt(sq / static_cast<T>(C) + eps);
    T* yr = y + n * C;
    for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * s * weight[c];
    rstd[n] = s;
  }
}

template <typename T>
void rmsNormBackward(const T* dy, const T* x, const ParamOf<T>* weight, const AccumOf<T>* rstd, T* dx,
                     ParamOf<T>* dweight, AccumOf<T>* /*scratch: the CPU sums rows in order*/, int64_t N, int64_t C,
                     bool accumulateDx, bool accumulateWeight) {
  if (!accumulateWeight) {
    for (int64_t c = 0; c < C; ++c) dweight[c] = 0;
  }
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    // dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * weight, xhat = x * rstd
    T sumGx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const T xhat = xr[c] * rstd[n];
      sumGx += dyr[c] * weight[c] * xhat;
      dweight[c] += dyr[c] * xhat;
    }
    const T meanGx = sumGx / static_cast<T>(C);
    T* dxr = dx + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const T term = rstd[n] * (dyr[c] * weight[c] - xr[c] * rstd[n] * meanGx);
      dxr[c] = accumulateDx ? dxr[c] + term : term;
    }
  }
}

#define MINIDP_INSTANTIATE(T)                                                                                   \
  template void layerNormForward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, T);             \
  template void layerNormBackward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, T*, int64_t, \
                                     int64_t, bool, bool, bool);                                                \
  template void rmsNormForward<T>(const T*, const T*, T*, T*, int64_t, int64_t, T);                             \
  template void rmsNormBackward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, bool, bool);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
