#include "squared_relu.h"

#include "framework/tensor/dispatch.h"
#include "framework/ops/op_kernels.h"

namespace custom {

namespace {

// CPU kernels, llm.c style: raw pointers and a size.
template <typename T>
void squaredReluForward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] * x[i] : T(0);
}
template <typename T>
void squaredReluBackward(const T* x, const T* dy, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > T(0) ? T(2) * x[i] * dy[i] : T(0);
}

// The op's kernels per dtype; a CUDA build of this project would add `&cuda::squaredReluForward<T>` as the
// third field.
template <typename T>
const minidp::ops::OpKernels<const T*, T*, int64_t> kForward{"squaredRelu", &squaredReluForward<T>};
template <typename T>
const minidp::ops::OpKernels<const T*, const T*, T*, int64_t> kBackward{"squaredRelu backward",
                                                                        &squaredReluBackward<T>};

}  // namespace

minidp::Variable squaredRelu(const minidp::Variable& v) {
  const minidp::Tensor x = v.data();
  minidp::Tensor y = minidp::Tensor::empty(x.shape(), x.dtype(), x.device());
  MINIDP_DISPATCH_FLOAT(x.dtype(), T, kForward<T>.launch(x.device(), x.data<T>(), y.data<T>(), x.numel()));
  return minidp::Variable::fromOp(y, {v}, [x](const minidp::Tensor& g) {
    minidp::Tensor dx = minidp::Tensor::empty(x.shape(), x.dtype(), x.device());
    MINIDP_DISPATCH_FLOAT(x.dtype(), T,
                          kBackward<T>.launch(x.device(), x.data<T>(), g.data<T>(), dx.data<T>(), x.numel()));
    return std::vector<minidp::Tensor>{dx};
  });
}

}  // namespace custom
