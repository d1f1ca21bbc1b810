// Global gradient-norm clipping on the device: the L2 norm over a set of gradient buffers (the reducer's
// buckets after finalize, i.e. the rank-averaged gradients, identical on every rank) and the coefficient
// min(1, maxNorm / (norm + 1e-6)) of torch.nn.utils.clip_grad_norm_, which the optimizer kernel reads.
#pragma once

#include <vector>

#include "framework/tensor/tensor.h"

namespace minidp::optim {

/// One fixed-order partial reduction per buffer, then one combine kernel: no host synchronisation, the
/// same bits on every rank for the same buffers.
class GradClipper {
 public:
  /// maxNorm <= 0: the norm is still computed, the coefficient stays 1.
  GradClipper(double maxNorm, DType dtype, Device device);
  /// Enqueues the norm of all of `buffers` (each of the clipper's dtype and device) and the coefficient.
  void compute(const std::vector<Tensor>& buffers);
  /// The clip coefficient (one element of the clipper's dtype, on its device): Optimizer::setGradScale.
  const Tensor& scale() const { return scale_; }
  /// The norm of the last compute(); reads it back to the host (synchronises: call at log points only).
  double norm() const;

 private:
  double maxNorm_;
  DType dtype_;
  Device device_;
  Tensor partials_;  // (buffers, kNormPartials) float64
  Tensor norm_;      // (1) float64
  Tensor scale_;     // (1) dtype
};

}  // namespace minidp::optim
