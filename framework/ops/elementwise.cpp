// Elementwise ops: tensor math (no autograd) and the differentiable wrappers; bf16 on CUDA (float math).
#include "kernels/elementwise_kernels.h"
#include "framework/tensor/dispatch.h"
#include "framework/ops/ops.h"
#include "framework/tensor/tensor_math.h"

namespace minidp::ops {

Variable add(const Variable& a, const Variable& b) {
  return Variable::fromOp(add(a.data(), b.data()), {a, b}, [](const Tensor& g) { return std::vector<Tensor>{g, g}; });
}

Variable mul(const Variable& a, const Variable& b) {
  if (a.id() == b.id()) {  // same bits, one backward kernel where two and an add would run
    checkActivation("mul", a.data());
    return square(a);
  }
  Tensor x = a.data(), y = b.data();
  const bool needA = a.requiresGrad(), needB = b.requiresGrad();
  return Variable::fromOp(mul(x, y), {a, b}, [x, y, needA, needB](const Tensor& g) {
    return std::vector<Tensor>{needA ? mul(g, y) : Tensor(), needB ? mul(g, x) : Tensor()};
  });
}

Variable scale(const Variable& x, double s) {
  return Variable::fromOp(scale(x.data(), s), {x}, [s](const Tensor& g) { return std::vector<Tensor>{scale(g, s)}; });
}

namespace {

enum class Activation { Relu, Gelu };

/// y = relu(x) or gelu(x), and its backward dx = g * f'(x): one body, the kernels chosen by `kind`.
Variable activation(const Variable& v, Activation kind) {
  Tensor x = v.data();
  checkActivation(kind == Activation::Relu ? "relu" : "gelu", x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (kind == Activation::Relu) {
    MINIDP_LAUNCH_ACTIVATION(x, T, reluForward, x.data<T>(), y.data<T>(), x.numel());
  } else {
    MINIDP_LAUNCH_ACTIVATION(x, T, geluForward, x.data<T>(), y.data<T>(), x.numel());
  }
  return Variable::fromOp(y, {v}, [x, kind](const Tensor& g) {
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    if (kind == Activation::Relu) {
      MINIDP_LAUNCH_ACTIVATION(x, T, reluBackward, x.data<T>(), g.data<T>(), dx.data<T>(), x.numel());
    } else {
      MINIDP_LAUNCH_ACTIVATION(x, T, geluBackward, x.data<T>(), g.data<T>(), dx.data<T>(), x.numel());
    }
    return std::vector<Tensor>{dx};
  });
}

}  // namespace

Variable relu(const Variable& v) { return activation(v, Activation::Relu); }

Variable gelu(const Variable& v) { return activation(v, Activation::Gelu); }

}  // namespace minidp::ops
