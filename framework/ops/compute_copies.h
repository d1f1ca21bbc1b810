// bf16 compute copies of fp32 parameters for mixed precision, kept current by the optimizer's update.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "framework/tensor/tensor.h"

namespace minidp::ops {

/// Where the ops find a parameter's bf16 compute copy (weightCopy): ComputeCopies, or ZeRO-3's units gathered
/// in bf16 (distributed::ShardedOptimizer::weightCopies). Installed for a scope by WeightCopySource::Installed.
class WeightCopySource {
 public:
  virtual ~WeightCopySource() = default;
  /// The bf16 copy of `param` with `rows` rows (0: param's own shape), or undefined where this source has
  /// none (weightCopy then casts).
  virtual Tensor get(const Tensor& param, int64_t rows) = 0;

  /// Installs `source` (null: none) for the ops of this thread for its scope; the previous installation
  /// comes back after. Scopes nest: the trainer installs its source around each of its own forwards only.
  class Installed {
   public:
    explicit Installed(WeightCopySource* source);
    ~Installed();
    Installed(const Installed&) = delete;
    Installed& operator=(const Installed&) = delete;

   private:
    WeightCopySource* previous_;
  };
};

/// bf16 compute copies of a model's fp32 parameters. Without them a mixed-precision forward casts every
/// weight it multiplies: a kernel per weight and per step, reading the fp32 weight once more. With a
/// ComputeCopies installed (WeightCopySource::Installed, a scope), the ops take a parameter's copy instead
/// (weightCopy): the first forward that asks for one makes it by a cast, and the optimizer the copies are
/// given to (Optimizer::setComputeCopies with find) writes each one in the same kernel as its update, the
/// bits a cast would give. Whoever else writes the parameters (a checkpoint restored into them) calls
/// refresh(); a copy is never made for a tensor that is not one of the parameters. Once frozen (a CUDA
/// graph captured the optimizer's table of copies), no copy is made or moved: a new request is a cast.
class ComputeCopies : public WeightCopySource {
 public:
  /// Copies may be made for these parameters only (held, so their memory is never another tensor's).
  explicit ComputeCopies(const std::vector<Tensor>& params);

  /// The copy of `param` with `rows` rows (0: param's own shape; more rows than param's: the ones past
  /// them zero, as (rows, numel / param's rows)), made by a cast on first use, and made again with more rows
  /// where a request needs them (the optimizer's table follows at its next step). Undefined where `param`
  /// is not one of the parameters, and, once frozen, where that would make or move a copy.
  Tensor get(const Tensor& param, int64_t rows) override;
  /// The whole copy of `param` (padding rows included), or undefined where none was made: what the
  /// optimizer writes the updated parameter into.
  Tensor find(const Tensor& param) const;
  /// Casts every copy again from its parameter.
  void refresh();
  /// From now on no copy is made or moved (the copies' addresses are captured in a CUDA graph).
  void freeze() { frozen_ = true; }

 private:
  struct Entry {
    Tensor param;
    Tensor storage;  // bf16, (copy rows x columns) elements, or undefined until the first get
  };
  // The entry of `param` (by its data pointer and numel), or null where it is not one of the parameters.
  const Entry* entryOf(const Tensor& param) const;
  std::unordered_map<const void*, Entry> entries_;  // by the parameter's data pointer
  bool frozen_ = false;
};

/// The bf16 compute copy of weight w with `rows` rows as ComputeCopies::get: the installed source's where it
/// has one for w, else a fresh cast (padding rows zero).
Tensor weightCopy(const Tensor& w, int64_t rows = 0);

}  // namespace minidp::ops
