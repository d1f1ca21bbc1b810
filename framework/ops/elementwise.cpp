// Elementwise ops: tensor math (no autograd) and the differentiable wrappers; bf16 on CUDA (float math).
#include "kernels/elementwise.h"
#include "framework/ops/dispatch.h"
#include "framework/ops/ops.h"
#include "framework/ops/tensor_math.h"

namespace minidp::ops {

void checkSame(const char* op, const Tensor& a, const Tensor& b) {
  MINIDP_CHECK(a.device() == b.device() && a.dtype() == b.dtype(),
               op << ": operands on " << deviceName(a.device()) << "/" << dtypeName(a.dtype()) << " and "
                  << deviceName(b.device()) << "/" << dtypeName(b.dtype()));
}

namespace {

void checkSameShape(const char* op, const Tensor& a, const Tensor& b) {
  checkSame(op, a, b);
  MINIDP_CHECK(a.shape() == b.shape(),
               op << ": shapes " << shapeString(a.shape()) << " and " << shapeString(b.shape()));
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  checkSameShape("add", a, b);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  MINIDP_LAUNCH_ACTIVATION(a, T, add, a.data<T>(), b.data<T>(), out.data<T>(), a.numel());
  return out;
}

void addInPlace(Tensor& dst, const Tensor& src) {
  checkSameShape("addInPlace", dst, src);
  MINIDP_LAUNCH_ACTIVATION(dst, T, addInPlace, dst.data<T>(), src.data<T>(), dst.numel());
}

Tensor mul(const Tensor& a, const Tensor& b) {
  checkSameShape("mul", a, b);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  MINIDP_LAUNCH_ACTIVATION(a, T, mul, a.data<T>(), b.data<T>(), out.data<T>(), a.numel());
  return out;
}

Tensor scale(const Tensor& x, double s) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  MINIDP_LAUNCH_ACTIVATION(x, T, scale, x.data<T>(), static_cast<AccumOf<T>>(s), out.data<T>(), x.numel());
  return out;
}

void scaleInPlace(Tensor& x, double s) {
  MINIDP_LAUNCH_ACTIVATION(x, T, scale, x.data<T>(), static_cast<AccumOf<T>>(s), x.data<T>(), x.numel());
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor out = Tensor::empty(shape, dtype, device);
  MINIDP_LAUNCH_FLOAT(out, T, fill, out.data<T>(), static_cast<T>(value), out.numel());
  return out;
}

Variable add(const Variable& a, const Variable& b) {
  return Variable::fromOp(add(a.data(), b.data()), {a, b}, [](const Tensor& g) { return std::vector<Tensor>{g, g}; });
}

Variable mul(const Variable& a, const Variable& b) {
  Tensor x = a.data(), y = b.data();
  return Variable::fromOp(mul(x, y), {a, b}, [x, y](const Tensor& g) {
    return std::vector<Tensor>{mul(g, y), mul(g, x)};
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
