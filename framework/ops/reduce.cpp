// Whole-tensor reductions and shape changes.
#include "kernels/reduce_kernels.h"
#include "framework/tensor/dispatch.h"
#include "framework/ops/ops.h"
#include "framework/tensor/tensor_math.h"

namespace minidp::ops {

namespace {
// sum(x) * s, with backward g * s broadcast to x's shape.
Variable scaledSum(const Variable& v, double s) {
  Tensor x = v.data();
  Tensor out = sumAll(x);
  if (s != 1.0) scaleInPlace(out, s);
  const Shape shape = x.shape();
  return Variable::fromOp(out, {v}, [shape, s](const Tensor& g) {
    Tensor dx = Tensor::empty(shape, g.dtype(), g.device());
    MINIDP_LAUNCH_FLOAT(g, T, broadcastScalar, g.data<T>(), static_cast<T>(s), dx.data<T>(), dx.numel());
    return std::vector<Tensor>{dx};
  });
}
}  // namespace

Variable sum(const Variable& x) { return scaledSum(x, 1.0); }

Variable mean(const Variable& x) { return scaledSum(x, 1.0 / static_cast<double>(x.data().numel())); }

Variable reshape(const Variable& x, const Shape& shape) {
  const Shape original = x.shape();
  return Variable::fromOp(x.data().view(shape), {x},
                          [original](const Tensor& g) { return std::vector<Tensor>{g.view(original)}; });
}

}  // namespace minidp::ops
