// What a checkpoint's state tensor must look like before it is used (a comm hook's, an optimizer's, a model's):
// a loader checks every stored tensor against its rule and refuses the file in one line naming the tensor.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"

namespace minidp::nn {

/// One state tensor as a checkpoint must hold it.
struct StateRule {
  std::string name;
  /// The dtypes accepted (a stored tensor of another is refused, not converted).
  std::vector<DType> dtypes = {DType::F32};
  Shape shape;
  /// Every element finite (error feedback, warm starts, moments, weights).
  bool finite = true;
  /// When set, every element an integer in [lo, hi] (a step counter).
  bool integral = false;
  double lo = 0, hi = 0;
};

/// The tensor a checkpoint holds under a name, or an undefined tensor when it holds none.
using StoredTensor = std::function<Tensor(const std::string& name)>;

/// Checks `t` (defined: present) against `rule`; throws one line naming `what` (the tensor as the file names it)
/// and what was expected.
void checkStateTensor(const StateRule& rule, const Tensor& t, const std::string& what);

/// Checks every rule's tensor, found by `find` under `prefix + rule.name` (missing ones included), and refuses
/// any of `stored` (the file's names under `prefix`) that no rule names; `owner` says whose state it is
/// (the comm hook that saved it, by its flag and name).
void checkStateTensors(const std::vector<StateRule>& rules, const StoredTensor& find,
                       const std::vector<std::string>& stored, const std::string& prefix, const std::string& owner);

}  // namespace minidp::nn
