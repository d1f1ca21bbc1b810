// The rotary position embedding as one op (kernels/rotary_kernels.h): forward turns each channel pair by its
// position's angle, backward turns the gradient back. F32, F64, and BF16 on CUDA (each pair turned in fp32).
#include "framework/ops/ops.h"
#include "framework/tensor/dispatch.h"
#include "kernels/rotary_kernels.h"

namespace minidp::ops {

Variable rotary(const Variable& xVar, double theta) {
  const Tensor& x = xVar.data();
  checkActivation("rotary", x);
  MINIDP_CHECK(x.ndim() == 4 && x.size(3) % 2 == 0,
               "rotary: x " << shapeString(x.shape()) << " must be (B, T, H, d) with an even head dim d");
  MINIDP_CHECK(theta > 0, "rotary: theta must be positive, got " << theta);
  const int64_t B = x.size(0), seqLen = x.size(1), H = x.size(2), d = x.size(3);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  MINIDP_LAUNCH_ACTIVATION(x, T, rotary, x.data<T>(), y.data<T>(), B, seqLen, H, d, theta, false);
  return Variable::fromOp(y, {xVar}, [B, seqLen, H, d, theta](const Tensor& g) {
    Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device());
    MINIDP_LAUNCH_ACTIVATION(g, T, rotary, g.data<T>(), dx.data<T>(), B, seqLen, H, d, theta, true);
    return std::vector<Tensor>{dx};
  });
}

}  // namespace minidp::ops
