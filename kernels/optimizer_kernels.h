// Multi-tensor optimizer updates (one launch per step for every parameter, like PyTorch's fused/foreach
// Adam) and the global gradient norm that feeds their clipping, without a host synchronisation.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"
#include "kernels/optimizer_math.h"  // SgdParams, AdamWParams

namespace minidp::kernels {

/// One chunk of one parameter in a multi-tensor launch: pointers already offset to the chunk's first
/// element; `state0`/`state1` are null where the optimizer keeps no such state, `copy` where the parameter
/// has no bf16 compute copy (fp32 parameters only: the update writes the new value rounded to bf16 there,
/// the bits a cast would give). The table of chunks is built once (again only when a gradient or a copy
/// moves) and lives on the parameters' device.
template <typename T>
struct ParamChunk {
  T* param;
  const T* grad;
  T* state0;  // SGD: momentum_buffer; AdamW: exp_avg
  T* state1;  // AdamW: exp_avg_sq
  bf16* copy;
  int64_t n;
};

/// Elements per chunk: one CUDA block updates one chunk.
constexpr int64_t kParamChunkElements = int64_t(1) << 16;

/// Partial sums of squares per bucket in the global gradient norm: a fixed count, so the summation order
/// (and the bits) do not depend on the device.
constexpr int kNormPartials = 256;

// The multi-step kernels take the step's scalars `h` by value, or from `deviceH` when it is not null (CUDA
// graphs: a captured launch reads them from memory that storeScalars rewrites before each replay).

namespace cpu {
/// Each chunk: g = grad * (gradScale ? *gradScale : 1) + wd * p; buf = first ? g : momentum * buf + g;
/// p -= lr * (momentum ? buf : g); copy = bf16(p) where the chunk has a copy (both optimizers).
template <typename T>
void sgdMultiStep(const ParamChunk<T>* chunks, int64_t numChunks, SgdParams<T> h, const SgdParams<T>* deviceH,
                  const T* gradScale);
/// Each chunk: g = grad * scale; p *= 1 - lr*wd; m, v moments; p -= stepSize * m / (sqrt(v) / bias2Sqrt + eps).
template <typename T>
void adamwMultiStep(const ParamChunk<T>* chunks, int64_t numChunks, AdamWParams<T> h, const AdamWParams<T>* deviceH,
                    const T* gradScale);
/// *out = h: one step's scalars (SgdParams<T> or AdamWParams<T>) where deviceH points.
template <typename P>
void storeScalars(P h, P* out);
/// partials[0..kNormPartials) = sums of x[i]^2 (in double) over fixed strided slices of x[0..n).
template <typename T>
void sumSquaresPartials(const T* x, int64_t n, double* partials);
/// norm[0] = sqrt(sum of partials[0..count)) in a fixed order; scale[0] = min(1, maxNorm / (norm + 1e-6))
/// (torch.nn.utils.clip_grad_norm_'s coefficient), or 1 when maxNorm <= 0.
template <typename T>
void clipCoefficient(const double* partials, int64_t count, double maxNorm, double* norm, T* scale);
}  // namespace cpu

namespace cuda {
template <typename T>
void sgdMultiStep(const ParamChunk<T>* chunks, int64_t numChunks, SgdParams<T> h, const SgdParams<T>* deviceH,
                  const T* gradScale, cudaStream_t stream);
template <typename T>
void adamwMultiStep(const ParamChunk<T>* chunks, int64_t numChunks, AdamWParams<T> h, const AdamWParams<T>* deviceH,
                    const T* gradScale, cudaStream_t stream);
template <typename P>
void storeScalars(P h, P* out, cudaStream_t stream);
template <typename T>
void sumSquaresPartials(const T* x, int64_t n, double* partials, cudaStream_t stream);
template <typename T>
void clipCoefficient(const double* partials, int64_t count, double maxNorm, double* norm, T* scale,
                     cudaStream_t stream);
}  // namespace cuda

}  // namespace minidp::kernels
