// Tensor-level math without autograd (namespace ops, beside the differentiable ops of framework/ops): the
// building blocks of backward functions, the backward engine and optimizers.
#include "framework/tensor/tensor_math.h"

#include <type_traits>

#include "framework/tensor/dispatch.h"
#include "kernels/convert.h"
#include "kernels/elementwise_kernels.h"
#include "kernels/reduce_kernels.h"

#if MINIDP_WITH_CUDA
#include "kernels/matmul.h"
#endif

namespace minidp::ops {

void checkSame(const char* op, const Tensor& a, const Tensor& b) {
  MINIDP_CHECK(a.device() == b.device() && a.dtype() == b.dtype(),
               op << ": operands on " << deviceName(a.device()) << "/" << dtypeName(a.dtype()) << " and "
                  << deviceName(b.device()) << "/" << dtypeName(b.dtype()));
}

void checkActivation(const char* op, const Tensor& x) {
  const DType t = x.dtype();
  MINIDP_CHECK(
      t == DType::F32 || t == DType::F64 || (t == DType::BF16 && x.isCuda()),
      op << ": takes F32 or F64 tensors, or BF16 on CUDA; got " << dtypeName(t) << " on " << deviceName(x.device()));
}

namespace {

void checkSameShape(const char* op, const Tensor& a, const Tensor& b) {
  checkSame(op, a, b);
  checkActivation(op, a);
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
  checkActivation("scale", x);
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

Tensor sumAll(const Tensor& x) {
  Tensor out = Tensor::empty({1}, x.dtype(), x.device());
  MINIDP_LAUNCH_FLOAT(x, T, sumAll, x.data<T>(), out.data<T>(), x.numel());
  return out;
}

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

void setFp32Gemm(Fp32Gemm mode) {
#if MINIDP_WITH_CUDA
  kernels::cuda::setTf32(mode == Fp32Gemm::Tf32);
#else
  (void)mode;
#endif
}

void setBf16Gemm(Bf16Gemm mode) {
#if MINIDP_WITH_CUDA
  kernels::cuda::setPlainBf16Gemms(mode == Bf16Gemm::Plain);
#else
  (void)mode;
#endif
}

}  // namespace minidp::ops
