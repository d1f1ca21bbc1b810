// Whole-tensor reductions, max and min along a dimension, and reshape.
#include "framework/ops/dims.h"
#include "framework/ops/ops.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/tensor_math.h"
#include "kernels/extreme_kernels.h"
#include "kernels/reduce_kernels.h"

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
// The extreme entries of x along `dim`: values (or none, for argmax) and int32 positions, of x's shape with
// `dim` removed or, with `keepdim`, of extent 1.
struct Extremes {
  Tensor values, indices;
  Along a;
};

Extremes extremes(const Tensor& x, int dim, bool keepdim, bool largest, bool withValues, const char* op) {
  checkActivation(op, x);
  const int d = normalizedDim(op, x.shape(), dim);
  Extremes e;
  e.a = along(x.shape(), d);
  MINIDP_CHECK(e.a.extent >= 1 && e.a.extent <= INT32_MAX,
               op << ": dimension " << d << " of " << shapeString(x.shape()) << " must have 1 to 2^31 - 1 entries");
  Shape shape = x.shape();
  if (keepdim) {
    shape[d] = 1;
  } else {
    shape.erase(shape.begin() + d);
  }
  e.indices = Tensor::empty(shape, DType::I32, x.device());
  if (withValues) e.values = Tensor::empty(shape, x.dtype(), x.device());
  MINIDP_LAUNCH_ACTIVATION(x, T, extremeAlongDim, x.data<T>(), withValues ? e.values.data<T>() : nullptr,
                           e.indices.data<int32_t>(), e.a.outer, e.a.extent, e.a.inner, largest);
  return e;
}

Variable extremeOp(const Variable& v, int dim, bool keepdim, bool largest, const char* op) {
  const Extremes e = extremes(v.data(), dim, keepdim, largest, true, op);
  const Shape shape = v.shape();
  const Tensor indices = e.indices;
  const Along a = e.a;
  return Variable::fromOp(e.values, {v}, [shape, indices, a](const Tensor& g) {
    Tensor dx = Tensor::empty(shape, g.dtype(), g.device());
    MINIDP_LAUNCH_ACTIVATION(g, T, scatterAlongDim, g.data<T>(), indices.data<int32_t>(), dx.data<T>(), a.outer,
                             a.extent, a.inner);
    return std::vector<Tensor>{dx};
  });
}

}  // namespace

Variable max(const Variable& x, int dim, bool keepdim) { return extremeOp(x, dim, keepdim, true, "max"); }

Variable min(const Variable& x, int dim, bool keepdim) { return extremeOp(x, dim, keepdim, false, "min"); }

Tensor argmax(const Tensor& x, int dim, bool keepdim) {
  return extremes(x, dim, keepdim, true, false, "argmax").indices;
}

Variable sum(const Variable& x) { return scaledSum(x, 1.0); }

Variable mean(const Variable& x) { return scaledSum(x, 1.0 / static_cast<double>(x.data().numel())); }

Variable reshape(const Variable& x, const Shape& shape) {
  const Shape original = x.shape();
  return Variable::fromOp(x.data().view(shape), {x},
                          [original](const Tensor& g) { return std::vector<Tensor>{g.view(original)}; });
}

}  // namespace minidp::ops
