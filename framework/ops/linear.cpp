// Linear algebra ops: linear layer, the GELU MLP, batched matmul, transpose of the last two dimensions;
// bf16 GEMMs with fp32 accumulation on CUDA (mixed precision).
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "framework/ops/compute_copies.h"
#include "framework/ops/gemm.h"
#include "framework/ops/ops.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/tensor_math.h"
#include "kernels/bias.h"
#include "kernels/composite_kernels.h"
#include "kernels/elementwise_kernels.h"
#include "kernels/transpose.h"

namespace minidp::ops {

void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const Tensor& a, int64_t strideA, const Tensor& b,
          int64_t strideB, Tensor& c, int64_t strideC, int64_t batch, double beta, const Tensor& bias,
          kernels::GemmLd ld, const Tensor& addend) {
  if (addend.defined()) {
    MINIDP_CHECK(beta == 1 && batch == 1 && addend.shape() == c.shape() && addend.dtype() == c.dtype(),
                 "gemm: an addend takes beta 1, batch 1 and c's shape and dtype");
    if (a.dtype() != DType::BF16 || !a.isCuda() || c.dtype() != DType::BF16) c.copyFrom(addend);
  }
  if (a.dtype() != DType::BF16) {
    MINIDP_LAUNCH_FLOAT(c, T, gemm, transA, transB, M, N, K, T(1), a.data<T>(), strideA, b.data<T>(), strideB, T(beta),
                        c.data<T>(), strideC, batch, ld);
    return;
  }
  MINIDP_CHECK(a.isCuda(), "bf16 matrix products are CUDA-only");
  MINIDP_DISPATCH_ACTIVATION(c.dtype(), TC, {
    if constexpr (std::is_same_v<TC, bf16>) {
      // c = op(a) op(b) + beta (addend, or c itself) (+ bias): the addend read in the epilogue.
      MINIDP_ON_CUDA(kernels::cuda::gemmBf16Addend<TC>(
          transA, transB, M, N, K, 1.0f, a.data<bf16>(), strideA, b.data<bf16>(), strideB, static_cast<float>(beta),
          addend.defined() ? addend.data<TC>() : c.data<TC>(), c.data<TC>(), strideC, batch,
          bias.defined() ? bias.data<TC>() : nullptr, ld, runtime::computeStream()));
    } else if constexpr (!std::is_same_v<TC, double>) {
      MINIDP_ON_CUDA(kernels::cuda::gemmBf16<TC>(
          transA, transB, M, N, K, 1.0f, a.data<bf16>(), strideA, b.data<bf16>(), strideB, static_cast<float>(beta),
          c.data<TC>(), strideC, batch, bias.defined() ? bias.data<TC>() : nullptr, ld, runtime::computeStream()));
    } else {
      throwError("bf16 matrix products write bf16 or fp32", __FILE__, __LINE__);
    }
  });
}

GradSink gradSink(size_t index, const Tensor& param) {
  bool zero = false;
  Tensor installed = leafGradTarget(index, &zero);
  if (installed.defined()) return {installed, Tensor(), zero ? 0.0 : 1.0};  // known zeros: overwritten
  Tensor fresh = Tensor::empty(param.shape(), param.dtype(), param.device());
  return {fresh, fresh, 0.0};
}

namespace {

// Product of all but the last `dropped` extents: the rows or the batch.
int64_t leadingNumel(const Shape& shape, size_t dropped) {
  return shapeNumel(Shape(shape.begin(), shape.end() - dropped));
}

// The shape with its last `dropped` dimensions replaced by `tail`.
Shape replaceTail(const Shape& shape, size_t dropped, const Shape& tail) {
  Shape out(shape.begin(), shape.end() - dropped);
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

// Checks x (..., in), weight (out, in) and bias (out) or undefined; a bf16 x takes fp32 parameters.
void checkLinear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (x.dtype() == DType::BF16) {
    MINIDP_CHECK(w.dtype() == DType::F32 && w.device() == x.device(),
                 "linear: a bf16 input takes an fp32 weight on its device, got " << dtypeName(w.dtype()) << " on "
                                                                                 << deviceName(w.device()));
  } else {
    checkSame("linear", x, w);
  }
  MINIDP_CHECK(x.ndim() >= 1 && w.ndim() == 2 && x.size(-1) == w.size(1),
               "linear: input " << shapeString(x.shape()) << " and weight " << shapeString(w.shape())
                                << " (expected (..., in) and (out, in))");
  if (b.defined()) {
    checkSame("linear", w, b);
    MINIDP_CHECK(b.shape() == Shape{w.size(0)},
                 "linear: bias " << shapeString(b.shape()) << " for " << w.size(0) << " outputs");
  }
}

// The parameter gradients of a linear layer y = x @ w^T + b with output gradient g (rows, out), for the op
// inputs `index` (w) and `index + 1` (b): dW (+)= g^T x and db (+)= the column sums of g, each into its
// sink. Returns what backward returns for the two inputs.
std::pair<Tensor, Tensor> linearParamGrads(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& b,
                                           size_t index, bool needW, bool needB) {
  const int64_t rows = leadingNumel(g.shape(), 1), out = w.size(0), in = w.size(1);
  Tensor dw;
  if (needW) {
    GradSink sink = gradSink(index, w);  // (out, in) (+)= g^T (out, rows) @ x (rows, in), in w's dtype
    dw = sink.returned;
    gemm(true, false, out, in, rows, g, 0, x, 0, sink.out, 0, 1, sink.beta);
  }
  if (!needB) return {dw, Tensor()};
  // (out) (+)= the column sums of g (rows, out), in a fixed order, accumulated in ParamOf<T>: a pass of its
  // own, which at GPT-2's shapes beat cuBLASLt's bias-gradient epilogue (BGRADB) on the weight-gradient GEMM.
  const GradSink biasSink = gradSink(index + 1, b);
  const DType accum = g.dtype() == DType::BF16 ? DType::F32 : g.dtype();
  Tensor scratch = Tensor::empty({kernels::sumColumnsScratchSize(rows, out)}, accum, g.device());
  MINIDP_LAUNCH_ACTIVATION(g, T, sumColumns, g.data<T>(), biasSink.out.data<ParamOf<T>>(), scratch.data<AccumOf<T>>(),
                           rows, out, biasSink.beta != 0);
  return {dw, biasSink.returned};
}

// (..., M, N) -> (..., N, M).
Tensor transposeLast2(const Tensor& x) {
  MINIDP_CHECK(x.ndim() >= 2, "transpose needs at least 2 dimensions, got " << shapeString(x.shape()));
  checkActivation("transpose", x);
  const int64_t M = x.size(-2), N = x.size(-1);
  Tensor y = Tensor::empty(replaceTail(x.shape(), 2, {N, M}), x.dtype(), x.device());
  MINIDP_LAUNCH_ACTIVATION(x, T, transpose, x.data<T>(), y.data<T>(), leadingNumel(x.shape(), 2), M, N);
  return y;
}

}  // namespace

namespace {

// A residual an op's output GEMM adds (undefined: none), of the output's shape and x's dtype and device:
// what `gemm` takes for it (beta, addend), the op's inputs with it appended, and its gradient (the output's).
struct Residual {
  Variable v;
  bool needsGrad = false;

  Residual(const char* op, const Variable& residual, const Shape& yShape, const Tensor& x) : v(residual) {
    if (!v.defined()) return;
    const Tensor& r = v.data();
    MINIDP_CHECK(r.shape() == yShape && r.dtype() == x.dtype() && r.device() == x.device(),
                 op << ": residual " << dtypeName(r.dtype()) << shapeString(r.shape()) << " on "
                    << deviceName(r.device()) << " must be the output's " << dtypeName(x.dtype()) << shapeString(yShape)
                    << " on " << deviceName(x.device()));
    needsGrad = v.requiresGrad();
  }
  double beta() const { return v.defined() ? 1.0 : 0.0; }
  Tensor addend() const { return v.defined() ? v.data() : Tensor(); }
  std::vector<Variable> appendedTo(std::vector<Variable> inputs) const {
    if (v.defined()) inputs.push_back(v);
    return inputs;
  }
  // What backward returns for it, after the op's other gradients (a bool pair: the lambda keeps no tensor).
  struct Gradient {
    bool present, needed;
    void appendTo(std::vector<Tensor>& grads, const Tensor& g) const {
      if (present) grads.push_back(needed ? g : Tensor());
    }
  };
  Gradient gradient() const { return {v.defined(), needsGrad}; }
};

Variable linearWith(const Variable& xv, const Variable& weightv, const Variable& biasv, const Variable& residualv) {
  const Tensor x = xv.data(), w = weightv.data();
  const bool hasBias = biasv.defined();
  const Tensor b = hasBias ? biasv.data() : Tensor();
  checkLinear(x, w, b);
  // Mixed precision: bf16 activations with fp32 master parameters.
  const bool mixed = x.dtype() == DType::BF16;
  const int64_t in = w.size(1), out = w.size(0), rows = leadingNumel(x.shape(), 1);
  // The compute copies (bf16 when mixed, weightCopy; the parameters themselves otherwise), kept for
  // backward. cuBLASLt's bias type is its output type, so the bias is cast too (as PyTorch's autocast does).
  const Tensor wc = mixed ? weightCopy(w) : w;
  Tensor y = Tensor::empty(replaceTail(x.shape(), 1, {out}), x.dtype(), x.device());  // (..., out)
  const Residual residual("linear", residualv, y.shape(), x);
  gemm(false, true, rows, out, in, x, 0, wc, 0, y, 0, 1, residual.beta(), mixed && hasBias ? weightCopy(b) : Tensor(),
       {}, residual.addend());
  if (!mixed && hasBias) MINIDP_LAUNCH_FLOAT(y, T, addBias, y.data<T>(), b.data<T>(), rows, out);
  // Only the gradients that are wanted: the first layer's input usually needs none, and its dx is a GEMM.
  const bool needX = xv.requiresGrad(), needW = weightv.requiresGrad(), needB = hasBias && biasv.requiresGrad();
  const Residual::Gradient dr = residual.gradient();
  return Variable::fromOp(y, residual.appendedTo({xv, weightv, biasv}), [=](const Tensor& g) {  // g (..., out)
    Tensor dx;
    if (needX) {
      dx = Tensor::empty(x.shape(), g.dtype(), g.device());  // (rows, in) = g (rows, out) @ W (out, in)
      gemm(false, false, rows, in, out, g, 0, wc, 0, dx, 0, 1);
    }
    auto [dw, db] = linearParamGrads(g, x, w, b, 1, needW, needB);
    std::vector<Tensor> grads{dx, dw, db};
    dr.appendTo(grads, g);
    return grads;
  });
}

}  // namespace

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  return linearWith(x, weight, bias, Variable());
}

Variable linear(const Variable& x, const Variable& weight, const Variable& bias, const Variable& residual) {
  return linearWith(x, weight, bias, residual);
}

Variable geluMlp(const Variable& xv, const Variable& fcWeight, const Variable& fcBias, const Variable& projWeight,
                 const Variable& projBias) {
  return geluMlp(xv, fcWeight, fcBias, projWeight, projBias, Variable());
}

Variable geluMlp(const Variable& xv, const Variable& fcWeight, const Variable& fcBias, const Variable& projWeight,
                 const Variable& projBias, const Variable& residual) {
  const Tensor x = xv.data(), w1 = fcWeight.data(), w2 = projWeight.data();
  // The fused path: bf16 CUDA activations, both biases, a hidden width cuBLASLt's auxiliary matrix takes.
  const bool fused = x.dtype() == DType::BF16 && x.isCuda() && fcBias.defined() && projBias.defined() &&
                     w1.ndim() == 2 && w1.size(0) % 8 == 0;
  if (!fused) return linearWith(gelu(linear(xv, fcWeight, fcBias)), projWeight, projBias, residual);
  const Tensor b1 = fcBias.data(), b2 = projBias.data();
  checkLinear(x, w1, b1);
  const int64_t rows = leadingNumel(x.shape(), 1), in = w1.size(1), hidden = w1.size(0);
  const Tensor pre = Tensor::empty(replaceTail(x.shape(), 1, {hidden}), DType::BF16, x.device());  // (..., hidden)
  const Tensor h = Tensor::empty(pre.shape(), DType::BF16, x.device());                            // gelu(pre)
  checkLinear(h, w2, b2);
  const int64_t out = w2.size(0);
  const Tensor w1c = weightCopy(w1), w2c = weightCopy(w2);
  MINIDP_ON_CUDA(kernels::cuda::gemmBf16GeluBias(false, true, rows, hidden, in, x.data<bf16>(), w1c.data<bf16>(),
                                                 weightCopy(b1).data<bf16>(), h.data<bf16>(), pre.data<bf16>(),
                                                 runtime::computeStream()));
  Tensor y = Tensor::empty(replaceTail(x.shape(), 1, {out}), DType::BF16, x.device());  // (..., out)
  const Residual r("geluMlp", residual, y.shape(), x);
  gemm(false, true, rows, out, hidden, h, 0, w2c, 0, y, 0, 1, r.beta(), weightCopy(b2), {}, r.addend());
  const bool needX = xv.requiresGrad(), needW1 = fcWeight.requiresGrad(), needB1 = fcBias.requiresGrad(),
             needW2 = projWeight.requiresGrad(), needB2 = projBias.requiresGrad();
  const Residual::Gradient dr = r.gradient();
  // The projection's parameters come first, so their grad-ready hooks fire first, as with two linear ops.
  return Variable::fromOp(
      y, r.appendedTo({xv, projWeight, projBias, fcWeight, fcBias}), [=](const Tensor& g) {
        auto [dw2, db2] = linearParamGrads(g, h, w2, b2, 1, needW2, needB2);
        Tensor dx, dw1, db1;
        if (needX || needW1 || needB1) {
          // (rows, hidden) = (g (rows, out) @ W2 (out, hidden)) * gelu'(pre), in the GEMM's epilogue.
          Tensor dpre = Tensor::empty(pre.shape(), DType::BF16, g.device());
          MINIDP_ON_CUDA(kernels::cuda::gemmBf16DGelu(false, false, rows, hidden, out, g.data<bf16>(), w2c.data<bf16>(),
                                                      pre.data<bf16>(), dpre.data<bf16>(), runtime::computeStream()));
          std::tie(dw1, db1) = linearParamGrads(dpre, x, w1, b1, 3, needW1, needB1);
          if (needX) {
            dx = Tensor::empty(x.shape(), DType::BF16, g.device());  // (rows, in) = dpre (rows, hidden) @ W1
            gemm(false, false, rows, in, hidden, dpre, 0, w1c, 0, dx, 0, 1);
          }
        }
        std::vector<Tensor> grads{dx, dw2, db2, dw1, db1};
        dr.appendTo(grads, g);
        return grads;
      });
}

Variable swigluLinear(const Variable& gate, const Variable& up, const Variable& weight) {
  return swigluLinear(gate, up, weight, Variable());
}

Variable swigluLinear(const Variable& gatev, const Variable& upv, const Variable& weightv, const Variable& residual) {
  const Tensor a = gatev.data(), b = upv.data(), w = weightv.data();
  MINIDP_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device(),
               "swigluLinear: gate " << shapeString(a.shape()) << " " << dtypeName(a.dtype()) << " and up "
                                     << shapeString(b.shape()) << " " << dtypeName(b.dtype()) << " differ");
  checkLinear(a, w, Tensor());
  const int64_t in = w.size(1), out = w.size(0), rows = leadingNumel(a.shape(), 1);
  const Tensor wc = a.dtype() == DType::BF16 ? weightCopy(w) : w;
  Tensor y = Tensor::empty(replaceTail(a.shape(), 1, {out}), a.dtype(), a.device());  // (..., out)
  const Residual r("swigluLinear", residual, y.shape(), a);
  {
    Tensor h = Tensor::empty(a.shape(), a.dtype(), a.device());  // silu(gate) * up, freed after the product
    MINIDP_LAUNCH_ACTIVATION(a, T, swigluForward, a.data<T>(), b.data<T>(), h.data<T>(), a.numel());
    gemm(false, true, rows, out, in, h, 0, wc, 0, y, 0, 1, r.beta(), Tensor(), {}, r.addend());
  }
  const bool needGate = gatev.requiresGrad(), needUp = upv.requiresGrad(), needW = weightv.requiresGrad();
  const Residual::Gradient dr = r.gradient();
  return Variable::fromOp(y, r.appendedTo({gatev, upv, weightv}), [=](const Tensor& g) {  // g (..., out)
    // The product again, for dW = g^T h only.
    Tensor h = needW ? Tensor::empty(a.shape(), a.dtype(), a.device()) : Tensor(), da, db;
    if (needGate || needUp) {
      Tensor dh = Tensor::empty(a.shape(), g.dtype(), g.device());  // (rows, in) = g (rows, out) @ W (out, in)
      gemm(false, false, rows, in, out, g, 0, wc, 0, dh, 0, 1);
      da = Tensor::empty(a.shape(), a.dtype(), a.device());
      db = Tensor::empty(a.shape(), a.dtype(), a.device());
      MINIDP_LAUNCH_ACTIVATION(a, T, swigluBackward, a.data<T>(), b.data<T>(), dh.data<T>(), da.data<T>(), db.data<T>(),
                               needW ? h.data<T>() : nullptr, a.numel());
    } else if (needW) {
      MINIDP_LAUNCH_ACTIVATION(a, T, swigluForward, a.data<T>(), b.data<T>(), h.data<T>(), a.numel());
    }
    const Tensor dw = needW ? linearParamGrads(g, h, w, Tensor(), 2, true, false).first : Tensor();
    std::vector<Tensor> grads{needGate ? da : Tensor(), needUp ? db : Tensor(), dw};
    dr.appendTo(grads, g);
    return grads;
  });
}

Variable matmul(const Variable& av, const Variable& bv) {
  const Tensor a = av.data(), b = bv.data();
  checkSame("matmul", a, b);
  MINIDP_CHECK(a.ndim() >= 2 && a.ndim() == b.ndim() &&
                   replaceTail(a.shape(), 2, {}) == replaceTail(b.shape(), 2, {}) && a.size(-1) == b.size(-2),
               "matmul: shapes " << shapeString(a.shape()) << " and " << shapeString(b.shape())
                                 << " (expected (..., M, K) and (..., K, N))");
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const int64_t batch = leadingNumel(a.shape(), 2);
  Tensor c = Tensor::empty(replaceTail(a.shape(), 1, {N}), a.dtype(), a.device());  // (..., M, N)
  gemm(false, false, M, N, K, a, M * K, b, K * N, c, M * N, batch);
  const bool needA = av.requiresGrad(), needB = bv.requiresGrad();
  return Variable::fromOp(c, {av, bv}, [=](const Tensor& g) {  // g (..., M, N)
    Tensor da, db;
    if (needA) {
      da = Tensor::empty(a.shape(), g.dtype(), g.device());  // (M, K) = g (M, N) @ b^T (N, K)
      gemm(false, true, M, K, N, g, M * N, b, K * N, da, M * K, batch);
    }
    if (needB) {
      db = Tensor::empty(b.shape(), g.dtype(), g.device());  // (K, N) = a^T (K, M) @ g (M, N)
      gemm(true, false, K, N, M, a, M * K, g, M * N, db, K * N, batch);
    }
    return std::vector<Tensor>{da, db};
  });
}

Variable transpose(const Variable& x) {
  return Variable::fromOp(transposeLast2(x.data()), {x},
                          [](const Tensor& g) { return std::vector<Tensor>{transposeLast2(g)}; });
}

}  // namespace minidp::ops
