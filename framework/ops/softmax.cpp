// Softmax and log-softmax over the last dimension (kernels/softmax_kernels.h): the backward reads the output.
#include "framework/ops/ops.h"
#include "framework/tensor/dispatch.h"
#include "kernels/softmax_kernels.h"

namespace minidp::ops {

namespace {

Variable softmaxOver(const Variable& v, bool log, const char* op) {
  const Tensor& x = v.data();
  checkActivation(op, x);
  MINIDP_CHECK(x.ndim() >= 1 && x.size(-1) > 0,
               op << ": needs a non-empty last dimension, got " << shapeString(x.shape()));
  const int64_t C = x.size(-1), rows = x.numel() / C;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());  // (..., C)
  MINIDP_LAUNCH_ACTIVATION(x, T, softmaxForward, x.data<T>(), y.data<T>(), rows, C, log);
  return Variable::fromOp(y, {v}, [y, rows, C, log](const Tensor& g) {
    Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device());
    MINIDP_LAUNCH_ACTIVATION(g, T, softmaxBackward, y.data<T>(), g.data<T>(), dx.data<T>(), rows, C, log);
    return std::vector<Tensor>{dx};
  });
}

}  // namespace

Variable softmax(const Variable& x) { return softmaxOver(x, false, "softmax"); }

Variable logSoftmax(const Variable& x) { return softmaxOver(x, true, "logSoftmax"); }

}  // namespace minidp::ops
