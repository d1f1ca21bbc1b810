#include "framework/nn/module_list.h"

namespace minidp::nn {

const std::shared_ptr<Module>& ModuleList::checkedAt(size_t index) const {
  MINIDP_CHECK(index < modules_.size(), "ModuleList: index " << index << " of " << modules_.size());
  return modules_[index];
}

}  // namespace minidp::nn
