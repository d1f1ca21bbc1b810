// CPU twins of kernels/optimizer_kernels.cu.
#include <cmath>

#include "kernels/accum.h"
#include "kernels/optimizer_kernels.h"
#include "kernels/optimizer_math.h"

namespace minidp::kernels::cpu {

namespace {

// Every element of every chunk, in order: update(chunk, i, scaled gradient, h) with the step's scalars
// (read from the device-side copy when given, as the CUDA kernels do).
template <typename T, typename Params, typename Update>
void forEachElement(const ParamChunk<T>* chunks, int64_t numChunks, const Params& hArg, const Params* deviceH,
                    const T* gradScale, Update update) {
  const Params h = deviceH ? *deviceH : hArg;
  const T factor = gradFactor(gradScale);
  for (int64_t c = 0; c < numChunks; ++c) {
    const ParamChunk<T>& k = chunks[c];
    for (int64_t i = 0; i < k.n; ++i) update(k, i, k.grad[i] * factor, h);
  }
}

}  // namespace

template <typename T>
void sgdMultiStep(const ParamChunk<T>* chunks, int64_t numChunks, SgdParams<T> hArg, const SgdParams<T>* deviceH,
                  const T* gradScale) {
  forEachElement(chunks, numChunks, hArg, deviceH, gradScale,
                 [](const ParamChunk<T>& k, int64_t i, T g, const SgdParams<T>& h) {
                   T unused = 0;
                   sgdUpdate(k.param[i], g, k.state0 ? k.state0[i] : unused, h);
                   if (k.copy) k.copy[i] = convertValue<bf16>(k.param[i]);
                 });
}

template <typename T>
void adamwMultiStep(const ParamChunk<T>* chunks, int64_t numChunks, AdamWParams<T> hArg, const AdamWParams<T>* deviceH,
                    const T* gradScale) {
  forEachElement(chunks, numChunks, hArg, deviceH, gradScale,
                 [](const ParamChunk<T>& k, int64_t i, T g, const AdamWParams<T>& h) {
                   adamwUpdate(k.param[i], g, k.state0[i], k.state1[i], h);
                   if (k.copy) k.copy[i] = convertValue<bf16>(k.param[i]);
                 });
}

template <typename P>
void storeScalars(P h, P* out) {
  *out = h;
}

template <typename T>
void sumSquaresPartials(const T* x, int64_t n, double* partials) {
  for (int64_t b = 0; b < kNormPartials; ++b) {
    double s = 0;
    for (int64_t i = b * n / kNormPartials; i < (b + 1) * n / kNormPartials; ++i) s += double(x[i]) * double(x[i]);
    partials[b] = s;
  }
}

template <typename T>
void clipCoefficient(const double* partials, int64_t count, double maxNorm, double* norm, T* scale) {
  double s = 0;
  for (int64_t i = 0; i < count; ++i) s += partials[i];
  norm[0] = std::sqrt(s);
  scale[0] = clipFactor<T>(norm[0], maxNorm);
}

#define MINIDP_INSTANTIATE(T)                                                                                      \
  template void sgdMultiStep<T>(const ParamChunk<T>*, int64_t, SgdParams<T>, const SgdParams<T>*, const T*);       \
  template void adamwMultiStep<T>(const ParamChunk<T>*, int64_t, AdamWParams<T>, const AdamWParams<T>*, const T*); \
  template void storeScalars<SgdParams<T>>(SgdParams<T>, SgdParams<T>*);                                           \
  template void storeScalars<AdamWParams<T>>(AdamWParams<T>, AdamWParams<T>*);                                     \
  template void sumSquaresPartials<T>(const T*, int64_t, double*);                                                 \
  template void clipCoefficient<T>(const double*, int64_t, double, double*, T*);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
