// ModuleList: submodules named 0, 1, 2, ... in the order appended, as torch.nn.ModuleList.
#pragma once

#include <memory>
#include <vector>

#include "framework/nn/module.h"

namespace minidp::nn {

/// A list of submodules whose parameters are named "<index>.<name>"; it has no forward of its own.
class ModuleList : public Module {
 public:
  /// Registers `module` under the next index and returns it.
  template <typename M>
  std::shared_ptr<M> append(std::shared_ptr<M> module) {
    modules_.push_back(module);
    return registerModule(std::to_string(modules_.size() - 1), std::move(module));
  }
  size_t size() const { return modules_.size(); }
  /// The module at `index` as an M (an error if it is not one).
  template <typename M>
  M& at(size_t index) const {
    M* m = dynamic_cast<M*>(checkedAt(index).get());
    MINIDP_CHECK(m != nullptr, "ModuleList: module " << index << " has another type");
    return *m;
  }

 private:
  const std::shared_ptr<Module>& checkedAt(size_t index) const;
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace minidp::nn
