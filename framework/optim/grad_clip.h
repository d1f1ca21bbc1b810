// Global gradient-norm clipping on the device: the L2 norm over a set of gradient buffers (the reducer's
// buckets after finalize, i.e. the rank-averaged gradients, identical on every rank) and the coefficient
// min(1, maxNorm / (norm + 1e-6)) of torch.nn.utils.clip_grad_norm_, which the optimizer kernel reads.
// Under ZeRO-1 each rank holds only its shards of the averaged gradients: each rank's partial sums are
// all-gathered and the combine adds them in rank order, so every rank still gets the same bits.
#pragma once

#include <functional>
#include <vector>

#include "framework/tensor/tensor.h"

namespace minidp::optim {

/// One fixed-order partial reduction per buffer, then one combine kernel: no host synchronisation, the
/// same bits on every rank for the same buffers.
class GradClipper {
 public:
  /// maxNorm <= 0: the norm is still computed, the coefficient stays 1.
  GradClipper(double maxNorm, DType dtype, Device device);
  /// Fills every rank's slot of `table` in place from the rank that owns it (equal contiguous slots,
  /// Communicator::allGatherShards) and makes the compute stream wait for it.
  using GatherSlots = std::function<void(const Tensor& table)>;

  /// Enqueues the norm of all of `buffers` (each of the clipper's dtype and device) and the coefficient.
  void compute(const std::vector<Tensor>& buffers);
  /// The norm over every rank's `buffers` (ZeRO-1: this rank's gradient shards; each rank passes as many):
  /// this rank's partial sums fill slot `rank` of a (world, buffers, kNormPartials) table, `gather` fills
  /// the other slots, and the combine adds the whole table in a fixed order.
  void compute(const std::vector<Tensor>& buffers, int rank, int world, const GatherSlots& gather);
  /// The clip coefficient (one element of the clipper's dtype, on its device): Optimizer::setGradScale.
  const Tensor& scale() const { return scale_; }
  /// The norm of the last compute(); reads it back to the host (synchronises: call at log points only).
  double norm() const;

 private:
  double maxNorm_;
  DType dtype_;
  Device device_;
  Tensor partials_;  // (world, buffers, kNormPartials) float64
  Tensor norm_;      // (1) float64
  Tensor scale_;     // (1) dtype
};

}  // namespace minidp::optim
