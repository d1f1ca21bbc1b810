// Variable: a tensor with a gradient and the node that produced it; ops record a dynamic graph.
//
// Gradient convention, stated once here: backward ACCUMULATES into a leaf's gradient (`grad += g`);
// zeroing is explicit (`zeroGrad`, or the reducer zeroing its buckets at the start of a step).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"

namespace minidp {

class Variable {
 public:
  /// Computes the gradients of an op's inputs from the gradient of its output; an undefined Tensor
  /// for an input means "no gradient". Captures only what it needs (flashlight style).
  using BackwardFn = std::function<std::vector<Tensor>(const Tensor& gradOutput)>;
  /// Called once per backward when a leaf's gradient is final: its producing kernels are enqueued on
  /// the compute stream (not necessarily finished). Must not read gradient values on the host.
  using GradReadyHook = std::function<void(Variable&)>;

  Variable() = default;
  /// A leaf.
  explicit Variable(Tensor data, bool requiresGrad = false);
  /// The output of an op: requires grad when any input does and grad mode is on.
  static Variable fromOp(Tensor data, std::vector<Variable> inputs, BackwardFn backward);

  bool defined() const { return impl_ != nullptr; }
  /// The value. A pending before-use hook (setBeforeUse) runs first, once.
  const Tensor& data() const {
    if (impl_->beforeUse) runBeforeUse();
    return impl_->data;
  }
  Tensor& data() {
    if (impl_->beforeUse) runBeforeUse();
    return impl_->data;
  }
  /// Runs `hook` once, at the next data() access, before it returns: ZeRO-1's gather of this parameter
  /// (--zero-gather forward), so that the next forward waits for a parameter only where it first reads it.
  /// Replaces a pending hook. Shape, dtype and device do not run it (they do not read the values).
  void setBeforeUse(std::function<void()> hook);
  const Shape& shape() const { return impl_->data.shape(); }
  DType dtype() const { return impl_->data.dtype(); }
  Device device() const { return impl_->data.device(); }
  bool requiresGrad() const { return impl_->requiresGrad; }
  /// Not produced by an op (a parameter or an input); an op output whose graph was freed is not a leaf.
  bool isLeaf() const { return !impl_->backward && !impl_->released; }

  /// The accumulated gradient (undefined before the first backward that reaches this leaf).
  const Tensor& grad() const { return impl_->grad; }
  /// Whether the installed gradient is known to hold zeros (markGradZero, no contribution since).
  bool gradKnownZero() const { return impl_->gradZero; }
  /// Installs the tensor gradients accumulate into (the reducer passes a view of its bucket).
  void setGrad(Tensor grad);
  /// Zeroes the gradient in place if there is one.
  void zeroGrad();
  /// Drops the gradient: undefined until the next backward's first contribution (ZeRO-2 and 3 keep only a
  /// shard of it, elsewhere).
  void releaseGrad();
  /// Promises that the installed gradient holds zeros (its owner has just zeroed it, as the reducer does its
  /// buckets every step): the next contribution may overwrite it instead of adding to it (a GEMM with
  /// beta 0, an epilogue that writes). The next contribution, and setGrad, end the promise; a write through
  /// grad() outside autograd does not, so the owner marks only between zeroing and the backward that follows.
  void markGradZero();

  /// Identifies one installed grad-ready hook (PyTorch's RemovableHandle): removing it removes only it.
  using HookHandle = uint64_t;
  /// Installs `hook` after the ones already installed; they fire in installation order.
  HookHandle addGradReadyHook(GradReadyHook hook);
  /// Removes the hook `handle` names; an unknown (or already removed) handle is an error.
  void removeGradReadyHook(HookHandle handle);
  /// Whether a grad-ready hook is installed (under DDP: the gradient is a view of a bucket).
  bool hasGradReadyHooks() const { return !impl_->hooks.empty(); }

  /// Backpropagates from this scalar (seed 1) or with an explicit output gradient.
  void backward();
  void backward(const Tensor& gradOutput);

  /// Identity for maps and comparisons.
  const void* id() const { return impl_.get(); }

 private:
  struct Impl {
    Tensor data;
    Tensor grad;
    bool requiresGrad = false;
    std::vector<Variable> inputs;
    BackwardFn backward;
    bool released = false;  // its backward ran and its graph was freed
    bool gradZero = false;  // markGradZero: `grad` holds zeros until the next contribution
    std::vector<std::pair<HookHandle, GradReadyHook>> hooks;
    HookHandle nextHook = 0;
    std::function<void()> beforeUse;
  };
  void runBeforeUse() const;
  friend class BackwardEngine;
  std::shared_ptr<Impl> impl_;
};

/// Disables graph recording while alive (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// Whether ops record the graph on this thread.
bool gradModeEnabled();
/// Whether an op over `inputs` records its backward (Variable::fromOp's rule: grad mode on and some input
/// requiring a gradient), for an op whose forward can do work early that only its backward needs.
bool recordsBackward(const std::vector<Variable>& inputs);

/// Inside an op's backward only: the installed gradient tensor of the op's input `index` when that input
/// is a leaf that requires grad and already has one (under DDP, a view of its bucket). The op may then
/// accumulate its contribution into it directly (`+=`: a GEMM with beta = 1, a kernel that adds) and must
/// return an undefined Tensor for that input. Undefined otherwise: return the gradient as usual.
/// Saves a temporary and an add per parameter gradient. With `zero`: whether that gradient is known to hold
/// zeros (markGradZero, and no other input of the op is the same leaf), so that the op may overwrite it.
Tensor leafGradTarget(size_t index, bool* zero = nullptr);

/// Inside an op's backward only: the gradient the engine already holds for the op's non-leaf input `index`
/// (the sum of what its other consumers gave so far), when the engine holds that memory alone and it has
/// the input's shape, dtype and device. The op may then add its contribution into it (`+=`, in its own
/// kernel: a residual stream's gradient takes the normalisation's without an add of its own) and must
/// return an undefined Tensor for that input. Undefined otherwise: return the gradient as usual.
Tensor heldGradTarget(size_t index);

}  // namespace minidp
