// Losses: softmax cross-entropy, and the classifier fused with it. On CUDA an out-of-range target cannot
// throw without a host sync; it makes the loss NaN (kernels/softmax_xent.h). The CPU path throws.
#include "framework/ops/compute_copies.h"
#include "framework/ops/gemm.h"
#include "framework/ops/ops.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/tensor_math.h"
#include "kernels/softmax_xent.h"

namespace minidp::ops {

namespace {

// The fused classifier's logits rows are this many elements apart: rows aligned to 128 bytes (bf16) or
// more, the alignment the sm90 tensor-core GEMM kernels need (llm.c's padded vocabulary Vp).
constexpr int64_t kLogitsRowAlign = 64;

void checkTargets(const char* op, const Tensor& targets, int64_t N, Device device, const Shape& logits) {
  MINIDP_CHECK(targets.dtype() == DType::I32 && targets.shape() == Shape{N} && targets.device() == device,
               op << ": targets " << dtypeName(targets.dtype()) << shapeString(targets.shape()) << " on "
                  << deviceName(targets.device()) << " for " << shapeString(logits) << " on " << deviceName(device)
                  << ", expected I32 [" << N << "] on the same device");
}

// The softmax cross-entropy of logits (N, V) stored in rows ld apart: the mean loss [1] (AccumOf the logits'
// type) and the per-row logsumexp (N) that the backward needs.
struct XentForward {
  Tensor loss, lse;
};

// What xentForward leaves in the logits: the logits, or the gradient of the mean loss for an upstream
// gradient of 1 (then the backward only applies the upstream gradient: xentScaleGradient).
enum class Logits { Kept, TakeGradient };

XentForward xentForward(const Tensor& logits, const Tensor& targets, int64_t N, int64_t V, int64_t ld,
                        Logits after = Logits::Kept) {
  DType lossType = logits.dtype();  // F32 for BF16 logits
  MINIDP_DISPATCH_ACTIVATION(logits.dtype(), T, lossType = dtypeOf<AccumOf<T>>());
  Tensor rowLoss = Tensor::empty({N}, lossType, logits.device());
  Tensor lse = Tensor::empty({N}, lossType, logits.device());
  if (after == Logits::TakeGradient) {
    MINIDP_LAUNCH_ACTIVATION(logits, T, softmaxXentForwardGradient, logits.data<T>(), targets.data<int32_t>(),
                             rowLoss.data<AccumOf<T>>(), lse.data<AccumOf<T>>(), N, V, ld);
  } else {
    MINIDP_LAUNCH_ACTIVATION(logits, T, softmaxXentForward, logits.data<T>(), targets.data<int32_t>(),
                             rowLoss.data<AccumOf<T>>(), lse.data<AccumOf<T>>(), N, V, ld);
  }
  Tensor loss = sumAll(rowLoss);  // fixed-order reduction: the same bits on every run
  scaleInPlace(loss, 1.0 / static_cast<double>(N));
  return {loss, lse};
}

// dlogits (rows ld apart, may be logits itself) = d(mean loss)/dlogits times the upstream g [1].
void xentBackward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& g, Tensor& dlogits,
                  int64_t N, int64_t V, int64_t ld) {
  MINIDP_LAUNCH_ACTIVATION(logits, T, softmaxXentBackward, logits.data<T>(), targets.data<int32_t>(),
                           lse.data<AccumOf<T>>(), g.data<AccumOf<T>>(), dlogits.data<T>(), N, V, ld);
}

// dlogits (rows ld apart) *= the upstream g [1], on its device; nothing is written when g is 1.
void xentScaleGradient(Tensor& dlogits, const Tensor& g, int64_t N, int64_t V, int64_t ld) {
  MINIDP_LAUNCH_ACTIVATION(dlogits, T, softmaxXentScaleGradient, dlogits.data<T>(), g.data<AccumOf<T>>(), N, V, ld);
}

}  // namespace

Variable crossEntropy(const Variable& logitsv, const Tensor& targets) {
  const Tensor logits = logitsv.data();
  MINIDP_CHECK(logits.ndim() == 2 && logits.size(0) > 0 && logits.size(1) > 0,
               "crossEntropy: logits " << shapeString(logits.shape()) << ", expected (N, V) with N, V > 0");
  const int64_t N = logits.size(0), V = logits.size(1);
  checkTargets("crossEntropy", targets, N, logits.device(), logits.shape());
  const XentForward fwd = xentForward(logits, targets, N, V, V);
  // The logits of an op are captured by this op only (the classifier's backward keeps its input and weight,
  // not its output), so their buffer takes the gradient; a leaf's data belongs to the caller.
  const bool inPlace = !logitsv.isLeaf();
  return Variable::fromOp(fwd.loss, {logitsv}, [=](const Tensor& g) {  // g [1], read on its device
    Tensor dlogits = inPlace ? logits : Tensor::empty(logits.shape(), logits.dtype(), logits.device());
    xentBackward(logits, targets, fwd.lse, g, dlogits, N, V, V);
    return std::vector<Tensor>{dlogits};
  });
}

Variable linearCrossEntropy(const Variable& xv, const Variable& weightv, const Tensor& targets) {
  const Tensor x = xv.data(), w = weightv.data();
  if (x.dtype() == DType::BF16) {
    MINIDP_CHECK(w.dtype() == DType::F32 && w.device() == x.device(),
                 "linearCrossEntropy: a bf16 input takes an fp32 weight on its device, got "
                     << dtypeName(w.dtype()) << " on " << deviceName(w.device()));
  } else {
    checkSame("linearCrossEntropy", x, w);
  }
  MINIDP_CHECK(x.ndim() >= 2 && w.ndim() == 2 && x.size(-1) == w.size(1) && w.size(0) > 0 && w.size(1) > 0,
               "linearCrossEntropy: input " << shapeString(x.shape()) << " and weight " << shapeString(w.shape())
                                            << " (expected (..., C) and (V, C) with V, C > 0)");
  const int64_t C = w.size(1), V = w.size(0), N = x.numel() / C;
  MINIDP_CHECK(N > 0, "linearCrossEntropy: no rows in " << shapeString(x.shape()));
  checkTargets("linearCrossEntropy", targets, N, x.device(), x.shape());
  const int64_t ld = (V + kLogitsRowAlign - 1) / kLogitsRowAlign * kLogitsRowAlign;
  // Under mixed precision the compute copy of w is bf16 in ld rows, the padding rows zero, and the products
  // run over all ld vocabulary rows: every operand's contiguous extent is then a multiple of 64, which the
  // sm90 tensor-core kernels need (an odd V = 50257 took Turing align1 kernels at a fifth of the rate).
  // The padding columns of the logits come out exactly 0 and add exact zeros to dx. fp32 keeps V.
  const bool mixed = x.dtype() == DType::BF16;
  const int64_t Vg = mixed ? ld : V;
  const Tensor wc = mixed ? weightCopy(w, ld) : w;  // the compute copy (ld, C), kept for backward
  // (N, V) logits in rows of ld; the padding columns are never read by the loss.
  const Tensor logits = Tensor::empty({N, ld}, x.dtype(), x.device());
  Tensor out = logits;
  gemm(false, true, N, Vg, C, x, 0, wc, 0, out, 0, 1, 0, Tensor(), {0, 0, ld});
  // The logits are this op's own and only the loss leaves it: when a gradient is wanted, the forward kernel
  // writes d(mean loss)/dlogits over them (rows ld apart; the padding columns keep their zeros), and the
  // backward applies the upstream gradient, with no pass over the logits when it is 1 (gradient
  // accumulation's 1/k costs that pass, and rounds bf16 dlogits once more).
  const bool needX = xv.requiresGrad(), needW = weightv.requiresGrad();
  const std::vector<Variable> inputs{xv, weightv};
  const XentForward fwd =
      xentForward(logits, targets, N, V, ld, recordsBackward(inputs) ? Logits::TakeGradient : Logits::Kept);
  return Variable::fromOp(fwd.loss, inputs, [=](const Tensor& g) {  // g [1], read on its device
    // Recorded, so the forward wrote the gradient over the logits.
    Tensor dlogits = logits;
    xentScaleGradient(dlogits, g, N, V, ld);
    Tensor dx, dw;
    if (needX) {
      dx = Tensor::empty(x.shape(), x.dtype(), x.device());  // (N, C) = dlogits (N, Vg) @ W (Vg, C)
      gemm(false, false, N, C, Vg, dlogits, 0, wc, 0, dx, 0, 1, 0, Tensor(), {ld, 0, 0});
    }
    if (needW) {
      GradSink sink = gradSink(1, w);  // (V, C) (+)= dlogits^T (V, N) @ x (N, C), in w's dtype
      // The gradient has V rows, so under mixed precision its first V rounded down to 64 take the aligned
      // product and the last few rows a small one of their own.
      const int64_t head = mixed ? V / kLogitsRowAlign * kLogitsRowAlign : V;
      if (head > 0) gemm(true, false, head, C, N, dlogits, 0, x, 0, sink.out, 0, 1, sink.beta, Tensor(), {ld, 0, 0});
      if (head < V) {
        Tensor tailIn = Tensor::alias(dlogits, head, {N * ld - head});
        Tensor tailOut = Tensor::alias(sink.out, head * C, {(V - head) * C});
        gemm(true, false, V - head, C, N, tailIn, 0, x, 0, tailOut, 0, 1, sink.beta, Tensor(), {ld, 0, 0});
      }
      dw = sink.returned;
    }
    return std::vector<Tensor>{dx, dw};
  });
}

}  // namespace minidp::ops
