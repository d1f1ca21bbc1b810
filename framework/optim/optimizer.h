// Optimizers over a list of parameters. Each step is one multi-tensor kernel launch for all parameters
// (a chunk table built once on the device), with the learning rate as a kernel argument and an optional
// device-side gradient scale (the clip coefficient), so a step needs no host-device traffic.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/autograd/variable.h"
#include "kernels/optimizer_kernels.h"

namespace minidp::optim {

/// A parameter and its gradient as plain tensors of the same numel (views are fine: a ZeRO shard, a bucket).
struct ParamSlot {
  std::string name;
  Tensor param;
  Tensor grad;
};

/// What an optimizer updates: Variables (their gradients are read at every step, so a gradient view
/// re-installed by a bucket rebuild is followed; state named by index) or named Variables, or plain
/// (param, grad) tensor pairs.
struct ParamList {
  ParamList(std::vector<Variable> vars);
  ParamList(std::initializer_list<Variable> vars) : ParamList(std::vector<Variable>(vars)) {}
  ParamList(const std::vector<std::pair<std::string, Variable>>& named);
  ParamList(std::vector<ParamSlot> slots);
  std::vector<ParamSlot> slots;
  std::vector<Variable> vars;  // empty for tensor pairs
};

/// Updates parameters in place from their gradients; keeps PyTorch's per-parameter state tensors.
class Optimizer {
 public:
  Optimizer(ParamList params, double lr);
  virtual ~Optimizer() = default;
  /// One update from the current gradients (which must exist), with the current learning rate.
  /// Virtual for optimizers that delegate (ZeRO-1's ShardedOptimizer updates shards, then gathers).
  virtual void step();
  /// A step whose update is skipped (--skip-nonfinite): the parameters, the state and the step count stay;
  /// whatever else a step does happens (ZeRO-3's ShardedOptimizer frees the gathered units).
  virtual void skipStep() {}

  double lr() const { return lr_; }
  /// The learning rate of the following steps (a scalar kernel argument: no copy to the device).
  void setLr(double lr) { lr_ = lr; }
  /// A one-element tensor of the parameters' dtype and device that every gradient is multiplied by
  /// inside the kernel (the clip coefficient, written on the device); undefined: no scaling.
  void setGradScale(Tensor scale);

  /// The live state tensors, "<param name>.<state>" with PyTorch's state names (exp_avg, exp_avg_sq,
  /// momentum_buffer) in parameter order (restoreState copies a checkpoint into them).
  std::vector<std::pair<std::string, Tensor>> state() const;
  /// PyTorch's names of the state kept per parameter (exp_avg, exp_avg_sq; momentum_buffer), in order: what a
  /// checkpoint holds per parameter (virtual for ZeRO-1, whose per-bucket optimizers keep it).
  virtual const std::vector<std::string>& stateNames() const { return stateNames_; }
  /// The full state for a checkpoint, named as state(). Virtual for ZeRO-1, whose ShardedOptimizer gathers
  /// its shards to rank 0 (a collective: every rank calls it); here the live state().
  virtual std::vector<std::pair<std::string, Tensor>> checkpointState() { return state(); }
  /// The tensor a checkpoint holds under a state name (any dtype and device; throws when absent).
  using SavedState = std::function<Tensor(const std::string& name)>;
  /// Copies the full state tensors `saved` returns into the state (ShardedOptimizer: into this rank's shard).
  virtual void restoreState(const SavedState& saved);
  /// Steps taken so far (AdamW's t; SGD's momentum buffer starts at step 0).
  int64_t stepCount() const { return stepCount_; }
  void setStepCount(int64_t steps);

  /// CUDA graphs: the update reads the step's scalars (learning rate, step count and the terms that follow
  /// from them) from device memory written by stageStep(), not from kernel arguments that a captured graph
  /// would freeze. Then stageStep() counts each step and step() only launches.
  void setScalarsOnDevice(bool on);
  /// Scalars on the device: counts the coming step and writes its scalars for the current lr (a one-thread
  /// launch on the compute stream, before the capture or replay that runs step()).
  void stageStep();

  /// Mixed precision: where `copyOf(param)` gives a bf16 tensor (of at least the parameter's numel), each
  /// step writes the updated fp32 parameter rounded to bf16 into it, in the same kernel as the update (the
  /// ops' compute copies, ops::ComputeCopies). Asked again at every step, so copies made by a forward join.
  using CopyOf = std::function<Tensor(const Tensor& param)>;
  void setComputeCopies(CopyOf copyOf);

 protected:
  /// PyTorch's names of the state tensors kept per parameter (at most two), allocated as zeros.
  void allocateState(std::vector<std::string> names);
  /// Launches the update of every chunk; `table` is the chunk table (kernels::ParamChunk<T>) on the
  /// parameters' device, `stepCount()` already counts this step.
  virtual void launch(const Tensor& table, int64_t numChunks) = 0;
  /// Writes this step's scalars as the kernels take them (SgdParams<T>, AdamWParams<T>) into the bytes of
  /// `out`, on the parameters' device. The base class refuses (an optimizer that launches no update itself).
  virtual void storeScalars(const Tensor& out);
  /// Where launch() passes the kernels their scalars from: null while they are kernel arguments.
  const void* deviceScalars() const { return scalarsOnDevice_ ? scalars_.raw() : nullptr; }
  const Tensor& gradScale() const { return gradScale_; }
  /// `saved(name)` checked against `shape`, naming the tensor when it differs.
  static Tensor savedTensor(const SavedState& saved, const std::string& name, const Shape& shape);
  /// The parameters' dtype (F32 when there are none).
  DType dtype() const { return slots_.empty() ? DType::F32 : slots_[0].param.dtype(); }
  double lr_;

 private:
  /// Re-reads the Variables' gradients and rebuilds the chunk table when a pointer changed.
  void refreshTable();
  std::vector<ParamSlot> slots_;
  std::vector<Variable> vars_;
  std::vector<std::string> stateNames_;
  std::vector<std::vector<Tensor>> state_;  // [state kind][parameter]
  std::vector<const void*> tableGrads_;     // the parameter, gradient and copy pointers the table was built from
  CopyOf copyOf_;
  Tensor table_;
  int64_t numChunks_ = 0;
  Tensor gradScale_;
  int64_t stepCount_ = 0;
  bool scalarsOnDevice_ = false;
  Tensor scalars_;  // the step's scalars on the device (raw bytes), while scalarsOnDevice_
};

/// torch.optim.SGD: momentum (dampening 0) and L2 weight decay added to the gradient.
class Sgd : public Optimizer {
 public:
  Sgd(ParamList params, double lr, double momentum = 0, double weightDecay = 0);

 private:
  void launch(const Tensor& table, int64_t numChunks) override;
  void storeScalars(const Tensor& out) override;
  template <typename T>
  kernels::SgdParams<T> scalars() const;
  double momentum_, weightDecay_;
};

/// torch.optim.AdamW: decoupled weight decay, bias-corrected moments (corrections in double).
class AdamW : public Optimizer {
 public:
  AdamW(ParamList params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weightDecay = 0.01);

 private:
  void launch(const Tensor& table, int64_t numChunks) override;
  void storeScalars(const Tensor& out) override;
  template <typename T>
  kernels::AdamWParams<T> scalars() const;
  double beta1_, beta2_, eps_, weightDecay_;
};

/// "sgd" (momentum 0.9) or "adamw" with the given learning rate and weight decay.
std::unique_ptr<Optimizer> makeOptimizer(const std::string& name, ParamList params, double lr, double weightDecay);

}  // namespace minidp::optim
