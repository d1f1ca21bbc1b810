// Dtype conversion: the cast op (fp32 master weights and inputs to bf16 compute copies and back).
#include "framework/tensor/dispatch.h"
#include "framework/ops/ops.h"
#include "framework/tensor/tensor_math.h"
#include "kernels/convert.h"

namespace minidp::ops {

Variable cast(const Variable& x, DType dtype) {
  const DType from = x.dtype();
  if (from == dtype) return x;
  return Variable::fromOp(cast(x.data(), dtype), {x},
                          [from](const Tensor& g) { return std::vector<Tensor>{cast(g, from)}; });
}

}  // namespace minidp::ops
