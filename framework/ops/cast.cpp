// Dtype conversion: the cast op (fp32 master weights and inputs to bf16 compute copies and back).
#include "framework/ops/dispatch.h"
#include "framework/ops/ops.h"
#include "framework/ops/tensor_math.h"
#include "kernels/convert.h"

namespace minidp::ops {

void castInto(const Tensor& x, Tensor& y) {
  MINIDP_CHECK(x.numel() == y.numel() && x.device() == y.device(),
               "castInto: " << shapeString(x.shape()) << " on " << deviceName(x.device()) << " into "
                            << shapeString(y.shape()) << " on " << deviceName(y.device()));
  if (x.dtype() == y.dtype()) {
    y.copyFrom(x);
    return;
  }
  MINIDP_DISPATCH_ACTIVATION(x.dtype(), From, MINIDP_DISPATCH_ACTIVATION(y.dtype(), To, {
                               if constexpr (!std::is_same_v<From, To>) {
                                 MINIDP_LAUNCH(x, convert, x.data<From>(), y.data<To>(), x.numel());
                               }
                             }));
}

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor y = Tensor::empty(x.shape(), dtype, x.device());
  castInto(x, y);
  return y;
}

Variable cast(const Variable& x, DType dtype) {
  const DType from = x.dtype();
  if (from == dtype) return x;
  return Variable::fromOp(cast(x.data(), dtype), {x},
                          [from](const Tensor& g) { return std::vector<Tensor>{cast(g, from)}; });
}

}  // namespace minidp::ops
