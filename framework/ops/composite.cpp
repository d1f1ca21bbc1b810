// Composable ops: each forward is one kernel of kernels/composite_kernels.h; each backward reuses the same kernels.
// Activations are F32, F64 or (CUDA) BF16, computed in AccumOf (fp32 for BF16) and rounded once per kernel.
// A broadcast operand beside BF16 activations may be F32 (a parameter, as linear's and layerNorm's): its
// gradient comes back in F32, summed in fp32.
#include "framework/ops/composite.h"

#include <algorithm>

#include "framework/tensor/dispatch.h"
#include "framework/tensor/tensor_math.h"
#include "kernels/composite_kernels.h"
#include "kernels/embedding_kernels.h"

namespace minidp::ops {

namespace {

using kernels::BinaryOp;
using kernels::Broadcast;
using kernels::UnaryOp;

Variable unary(const char* name, UnaryOp op, const Variable& v, double p = 0) {
  const Tensor x = v.data();
  checkActivation(name, x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  MINIDP_LAUNCH_ACTIVATION(x, T, unaryForward, op, x.data<T>(), static_cast<AccumOf<T>>(p), y.data<T>(), x.numel());
  return Variable::fromOp(y, {v}, [op, x, p](const Tensor& g) {
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    MINIDP_LAUNCH_ACTIVATION(x, T, unaryBackward, op, x.data<T>(), static_cast<AccumOf<T>>(p), g.data<T>(),
                             dx.data<T>(), x.numel());
    return std::vector<Tensor>{dx};
  });
}

int64_t lastDim(const Tensor& x) { return x.ndim() == 0 ? 1 : x.shape().back(); }

// Calls f(T{}, O{}) with T bound to the activations' dtype `type` (float, double or bf16) and O to the dtype
// `other` of a second operand or an output: T itself, or ParamOf<T> (F32 beside BF16 activations).
template <typename F>
void dispatchPair(DType type, DType other, F f) {
  MINIDP_DISPATCH_ACTIVATION(type, T, {
    if (other == type) {
      f(T{}, T{});
    } else {
      f(T{}, ParamOf<T>{});
    }
  });
}

// a op b into a new tensor of `shape` in dtype `type` (the activations'), b laid out as `broadcast` says
// against a (rows, C), in `type` or (beside BF16) F32; a may be undefined for Right. Columns: C is b's size
// (b is a's trailing dimensions); otherwise C is the last dimension.
Tensor binary(BinaryOp op, Broadcast broadcast, const Tensor& a, const Tensor& b, const Shape& shape, DType type) {
  const int64_t cols = broadcast == Broadcast::Columns ? b.numel() : shape.empty() ? 1 : shape.back();
  const int64_t rows = cols == 0 ? 0 : shapeNumel(shape) / cols;
  Tensor out = Tensor::empty(shape, type, b.device());
  dispatchPair(type, b.dtype(), [&](auto t, auto o) {
    using T = decltype(t);
    const T* av = a.defined() ? a.data<T>() : nullptr;
    MINIDP_LAUNCH_ACTIVATION_T(out, T, binaryForward, op, broadcast, av, b.data<decltype(o)>(), out.data<T>(), rows,
                               cols);
  });
  return out;
}

// scale * the sums of x (..., C), or of x * y (same shape) when y is defined, over the last dimension,
// shaped `shape` in dtype `type` (x's, or F32 beside BF16).
Tensor rowSums(const Tensor& x, const Tensor& y, double scale, const Shape& shape, DType type) {
  const int64_t cols = lastDim(x);
  Tensor out = Tensor::empty(shape, type, x.device());
  dispatchPair(x.dtype(), type, [&](auto t, auto o) {
    using T = decltype(t);
    const T* yv = y.defined() ? y.data<T>() : nullptr;
    MINIDP_LAUNCH_ACTIVATION_T(x, T, sumLastDim, x.data<T>(), yv, static_cast<AccumOf<T>>(scale),
                               out.data<decltype(o)>(), out.numel(), cols);
  });
  return out;
}

// The gradient of a broadcast operand (shape yShape, dtype yType): g (rows, C), or g * x when x is defined
// (mulBroadcast), summed over what the operand was broadcast along, in AccumOf, rounded once to yType.
// Columns: C is the operand's size (g's trailing dimensions).
Tensor reduceTo(const Tensor& g, const Tensor& x, Broadcast broadcast, const Shape& yShape, DType yType) {
  if (broadcast == Broadcast::Rows) return rowSums(g, x, 1.0, yShape, yType);
  const int64_t cols = shapeNumel(yShape), rows = cols == 0 ? 0 : g.numel() / cols;
  Tensor out = Tensor::empty(yShape, yType, g.device());
  dispatchPair(g.dtype(), yType, [&](auto t, auto o) {
    using T = decltype(t);
    const int64_t scratchSize = g.isCuda() ? kernels::sumLeadingDimsScratchSize(rows, cols) : 0;  // CPU: none
    Tensor scratch = Tensor::empty({scratchSize}, dtypeOf<AccumOf<T>>(), g.device());
    const T* xv = x.defined() ? x.data<T>() : nullptr;
    MINIDP_LAUNCH_ACTIVATION_T(g, T, sumLeadingDims, g.data<T>(), xv, out.data<decltype(o)>(),
                               scratch.data<AccumOf<T>>(), rows, cols);
  });
  return out;
}

void checkSameShape(const char* op, const Variable& a, const Variable& b) {
  checkSame(op, a.data(), b.data());
  checkActivation(op, a.data());
  MINIDP_CHECK(a.shape() == b.shape(),
               op << ": shapes " << shapeString(a.shape()) << " and " << shapeString(b.shape()));
}

// How y lines up with x (..., C): x's trailing dimensions ((C), (T, H, d) of (B, T, H, d), ...) per column,
// (..., 1) per row; anything else is an error. y has x's dtype, or F32 beside a BF16 x (a parameter), on x's
// device.
Broadcast broadcastOf(const char* op, const Variable& x, const Variable& y) {
  const Tensor &xt = x.data(), &yt = y.data();
  checkActivation(op, xt);
  const bool bf16x = xt.dtype() == DType::BF16;
  MINIDP_CHECK(xt.device() == yt.device() && (yt.dtype() == xt.dtype() || (bf16x && yt.dtype() == DType::F32)),
               op << ": x " << dtypeName(xt.dtype()) << " on " << deviceName(xt.device()) << " takes y in "
                  << (bf16x ? "BF16 or F32" : dtypeName(xt.dtype())) << " there, got " << dtypeName(yt.dtype())
                  << " on " << deviceName(yt.device()));
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  MINIDP_CHECK(!xs.empty(), op << ": x must have a last dimension");
  if (!ys.empty() && ys.size() <= xs.size() && std::equal(ys.rbegin(), ys.rend(), xs.rbegin())) {
    return Broadcast::Columns;
  }
  Shape rows = xs;
  rows.back() = 1;
  MINIDP_CHECK(ys == rows, op << ": y " << shapeString(ys) << " must be x's trailing dimensions or " << shapeString(rows)
                              << " to broadcast against x " << shapeString(xs));
  return Broadcast::Rows;
}

// scale * the sum of x over its last dimension; backward: g * scale repeated over the columns.
Variable scaledLastDimSum(const char* op, const Variable& v, bool keepdim, double scale) {
  const Tensor x = v.data();
  checkActivation(op, x);
  MINIDP_CHECK(x.ndim() >= 1, op << ": x must have a last dimension");
  Shape shape = x.shape();
  if (keepdim) {
    shape.back() = 1;
  } else {
    shape.pop_back();
  }
  const Shape xShape = x.shape();
  return Variable::fromOp(rowSums(x, Tensor(), scale, shape, x.dtype()), {v}, [xShape, scale](const Tensor& g) {
    const Tensor rowGrad = scale == 1.0 ? g : ops::scale(g, scale);
    return std::vector<Tensor>{binary(BinaryOp::Right, Broadcast::Rows, Tensor(), rowGrad, xShape, g.dtype())};
  });
}

}  // namespace

Variable sub(const Variable& a, const Variable& b) {
  checkSameShape("sub", a, b);
  const bool needB = b.requiresGrad();
  return Variable::fromOp(binary(BinaryOp::Sub, Broadcast::Same, a.data(), b.data(), a.shape(), a.dtype()), {a, b},
                          [needB](const Tensor& g) {
                            return std::vector<Tensor>{g, needB ? scale(g, -1.0) : Tensor()};
                          });
}

Variable div(const Variable& a, const Variable& b) {
  checkSameShape("div", a, b);
  const Tensor x = a.data(), y = b.data();
  return Variable::fromOp(binary(BinaryOp::Div, Broadcast::Same, x, y, x.shape(), x.dtype()), {a, b},
                          [x, y](const Tensor& g) {
                            Tensor da = Tensor::empty(g.shape(), g.dtype(), g.device());
                            Tensor db = Tensor::empty(g.shape(), g.dtype(), g.device());
                            MINIDP_LAUNCH_ACTIVATION(g, T, divBackward, x.data<T>(), y.data<T>(), g.data<T>(),
                                                     da.data<T>(), db.data<T>(), g.numel());
                            return std::vector<Tensor>{da, db};
                          });
}

Variable neg(const Variable& x) { return unary("neg", UnaryOp::Neg, x); }
Variable addScalar(const Variable& x, double s) { return unary("addScalar", UnaryOp::AddScalar, x, s); }
Variable square(const Variable& x) { return unary("square", UnaryOp::Square, x); }
Variable pow(const Variable& x, double p) { return unary("pow", UnaryOp::Pow, x, p); }
Variable sqrt(const Variable& x) { return unary("sqrt", UnaryOp::Sqrt, x); }
Variable rsqrt(const Variable& x) { return unary("rsqrt", UnaryOp::Rsqrt, x); }
Variable exp(const Variable& x) { return unary("exp", UnaryOp::Exp, x); }
Variable sigmoid(const Variable& x) { return unary("sigmoid", UnaryOp::Sigmoid, x); }
Variable silu(const Variable& x) { return unary("silu", UnaryOp::Silu, x); }

Variable swiglu(const Variable& gate, const Variable& up) {
  checkSameShape("swiglu", gate, up);
  const Tensor a = gate.data(), b = up.data();
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  MINIDP_LAUNCH_ACTIVATION(a, T, swigluForward, a.data<T>(), b.data<T>(), y.data<T>(), a.numel());
  return Variable::fromOp(y, {gate, up}, [a, b](const Tensor& g) {
    Tensor da = Tensor::empty(a.shape(), a.dtype(), a.device());
    Tensor db = Tensor::empty(a.shape(), a.dtype(), a.device());
    MINIDP_LAUNCH_ACTIVATION(a, T, swigluBackward, a.data<T>(), b.data<T>(), g.data<T>(), da.data<T>(), db.data<T>(),
                             static_cast<T*>(nullptr), a.numel());
    return std::vector<Tensor>{da, db};
  });
}

Variable addBroadcast(const Variable& x, const Variable& y) {
  const Broadcast broadcast = broadcastOf("addBroadcast", x, y);
  const Shape yShape = y.shape();
  const DType yType = y.dtype();
  const bool needY = y.requiresGrad();
  return Variable::fromOp(
      binary(BinaryOp::Add, broadcast, x.data(), y.data(), x.shape(), x.dtype()), {x, y},
      [broadcast, yShape, yType, needY](const Tensor& g) {
        return std::vector<Tensor>{g, needY ? reduceTo(g, Tensor(), broadcast, yShape, yType) : Tensor()};
      });
}

Variable mulBroadcast(const Variable& x, const Variable& y) {
  const Broadcast broadcast = broadcastOf("mulBroadcast", x, y);
  const Tensor a = x.data(), b = y.data();
  const bool needX = x.requiresGrad(), needY = y.requiresGrad();
  return Variable::fromOp(binary(BinaryOp::Mul, broadcast, a, b, a.shape(), a.dtype()), {x, y},
                          [broadcast, a, b, needX, needY](const Tensor& g) {
                            Tensor da, db;  // only the wanted ones: y is often a constant table (RoPE's cos, sin)
                            if (needX) da = binary(BinaryOp::Mul, broadcast, g, b, g.shape(), g.dtype());
                            if (needY) db = reduceTo(g, a, broadcast, b.shape(), b.dtype());
                            return std::vector<Tensor>{da, db};
                          });
}

Variable sumLastDim(const Variable& x, bool keepdim) { return scaledLastDimSum("sumLastDim", x, keepdim, 1.0); }

Variable meanLastDim(const Variable& x, bool keepdim) {
  return scaledLastDimSum("meanLastDim", x, keepdim, 1.0 / static_cast<double>(lastDim(x.data())));
}

Variable gatherRows(const Variable& tableVar, const Tensor& index) {
  const Tensor& table = tableVar.data();
  checkActivation("gatherRows", table);
  MINIDP_CHECK(table.ndim() == 2, "gatherRows: table " << shapeString(table.shape()) << " must be (V, C)");
  MINIDP_CHECK(index.dtype() == DType::I32 && index.device() == table.device(),
               "gatherRows: index must be I32 on " << deviceName(table.device()) << ", got " << dtypeName(index.dtype())
                                                   << " on " << deviceName(index.device()));
  const int64_t V = table.size(0), C = table.size(1), n = index.numel();
  Shape shape = index.shape();
  shape.push_back(C);
  Tensor out = Tensor::empty(shape, table.dtype(), table.device());  // (..., C)
  MINIDP_LAUNCH_ACTIVATION(table, T, gatherRows, table.data<T>(), index.data<int32_t>(), out.data<T>(), n, C, V);
  return Variable::fromOp(out, {tableVar}, [index, n, C, V](const Tensor& g) {
    // The embedding kernel's token backward with one "sequence" of n positions: rows summed in order, in
    // ParamOf (fp32 for BF16), then rounded once to g's dtype.
    int64_t scratchBytes = 0;  // the GPU sorts (token, position) pairs; the CPU needs none
    if (g.isCuda()) MINIDP_ON_CUDA(scratchBytes = kernels::cuda::embeddingBackwardScratchBytes(n, V));
    Tensor scratch = Tensor::empty({(scratchBytes + 3) / 4}, DType::I32, g.device());
    DType sumType = g.dtype();
    MINIDP_DISPATCH_ACTIVATION(g.dtype(), T, sumType = dtypeOf<ParamOf<T>>());
    Tensor sums = Tensor::empty({V, C}, sumType, g.device());
    MINIDP_LAUNCH_ACTIVATION(g, T, embeddingBackwardTokens, g.data<T>(), index.data<int32_t>(), sums.data<ParamOf<T>>(),
                             scratch.data<int32_t>(), 1, n, C, V, false);
    return std::vector<Tensor>{cast(sums, g.dtype())};
  });
}

}  // namespace minidp::ops
