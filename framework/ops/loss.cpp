// Losses. On CUDA an out-of-range target cannot throw without a host sync; it makes the loss NaN
// (kernels/softmax_xent.h). The CPU path throws.
#include "framework/ops/dispatch.h"
#include "framework/ops/ops.h"
#include "framework/ops/tensor_math.h"
#include "kernels/softmax_xent.h"

namespace minidp::ops {

Variable crossEntropy(const Variable& logitsv, const Tensor& targets) {
  const Tensor logits = logitsv.data();
  MINIDP_CHECK(logits.ndim() == 2 && logits.size(0) > 0 && logits.size(1) > 0,
               "crossEntropy: logits " << shapeString(logits.shape()) << ", expected (N, V) with N, V > 0");
  const int64_t N = logits.size(0), V = logits.size(1);
  MINIDP_CHECK(
      targets.dtype() == DType::I32 && targets.shape() == Shape{N} && targets.device() == logits.device(),
      "crossEntropy: targets " << dtypeName(targets.dtype()) << shapeString(targets.shape()) << " on "
                               << deviceName(targets.device()) << " for logits "
                               << shapeString(logits.shape()) << " on " << deviceName(logits.device())
                               << ", expected I32 [" << N << "] on the same device");
  Tensor rowLoss = Tensor::empty({N}, logits.dtype(), logits.device());
  Tensor lse = Tensor::empty({N}, logits.dtype(), logits.device());  // per-row logsumexp, kept for backward
  MINIDP_LAUNCH_FLOAT(logits, T, softmaxXentForward, logits.data<T>(), targets.data<int32_t>(),
                      rowLoss.data<T>(), lse.data<T>(), N, V);
  Tensor loss = sumAll(rowLoss);  // fixed-order reduction: the same bits on every run
  scaleInPlace(loss, 1.0 / static_cast<double>(N));
  return Variable::fromOp(loss, {logitsv}, [=](const Tensor& g) {  // g [1], read on its device
    Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
    MINIDP_LAUNCH_FLOAT(logits, T, softmaxXentBackward, logits.data<T>(), targets.data<int32_t>(),
                        lse.data<T>(), g.data<T>(), dlogits.data<T>(), N, V);
    return std::vector<Tensor>{dlogits};
  });
}

}  // namespace minidp::ops
