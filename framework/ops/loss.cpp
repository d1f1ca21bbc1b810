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
  DType lossType = logits.dtype();  // F32 for BF16 logits
  MINIDP_DISPATCH_ACTIVATION(logits.dtype(), T, lossType = dtypeOf<AccumOf<T>>());
  Tensor rowLoss = Tensor::empty({N}, lossType, logits.device());
  Tensor lse = Tensor::empty({N}, lossType, logits.device());  // per-row logsumexp, kept for backward
  MINIDP_LAUNCH_ACTIVATION(logits, T, softmaxXentForward, logits.data<T>(), targets.data<int32_t>(),
                           rowLoss.data<AccumOf<T>>(), lse.data<AccumOf<T>>(), N, V);
  Tensor loss = sumAll(rowLoss);  // fixed-order reduction: the same bits on every run
  scaleInPlace(loss, 1.0 / static_cast<double>(N));
  // The logits of an op are captured by this op only (the classifier's backward keeps its input and weight,
  // not its output), so their buffer takes the gradient; a leaf's data belongs to the caller.
  const bool inPlace = !logitsv.isLeaf();
  return Variable::fromOp(loss, {logitsv}, [=](const Tensor& g) {  // g [1], read on its device
    Tensor dlogits = inPlace ? logits : Tensor::empty(logits.shape(), logits.dtype(), logits.device());
    MINIDP_LAUNCH_ACTIVATION(logits, T, softmaxXentBackward, logits.data<T>(), targets.data<int32_t>(),
                             lse.data<AccumOf<T>>(), g.data<AccumOf<T>>(), dlogits.data<T>(), N, V);
    return std::vector<Tensor>{dlogits};
  });
}

}  // namespace minidp::ops
