// Composable ops: each forward is one kernel of kernels/composite.h; each backward reuses the same kernels.
#include "framework/ops/composite.h"

#include "framework/tensor/dispatch.h"
#include "framework/ops/ops.h"
#include "framework/tensor/tensor_math.h"
#include "kernels/bias.h"
#include "kernels/composite.h"
#include "kernels/embedding.h"

namespace minidp::ops {

namespace {

using kernels::BinaryOp;
using kernels::Broadcast;
using kernels::UnaryOp;

Variable unary(UnaryOp op, const Variable& v, double p = 0) {
  const Tensor x = v.data();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  MINIDP_LAUNCH_FLOAT(x, T, unaryForward, op, x.data<T>(), static_cast<T>(p), y.data<T>(), x.numel());
  return Variable::fromOp(y, {v}, [op, x, p](const Tensor& g) {
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    MINIDP_LAUNCH_FLOAT(x, T, unaryBackward, op, x.data<T>(), static_cast<T>(p), g.data<T>(), dx.data<T>(), x.numel());
    return std::vector<Tensor>{dx};
  });
}

int64_t lastDim(const Tensor& x) { return x.ndim() == 0 ? 1 : x.shape().back(); }

// a op b with b laid out as `broadcast` says against a (rows, C); b may be undefined for Right.
Tensor binary(BinaryOp op, Broadcast broadcast, const Tensor& a, const Tensor& b, const Shape& shape) {
  const int64_t cols = shape.empty() ? 1 : shape.back(), rows = cols == 0 ? 0 : shapeNumel(shape) / cols;
  Tensor out = Tensor::empty(shape, b.dtype(), b.device());
  MINIDP_LAUNCH_FLOAT(b, T, binaryForward, op, broadcast, a.defined() ? a.data<T>() : nullptr, b.data<T>(),
                      out.data<T>(), rows, cols);
  return out;
}

// Sums of x (..., C) over the last dimension, shaped `shape`.
Tensor rowSums(const Tensor& x, const Shape& shape) {
  const int64_t cols = lastDim(x);
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  MINIDP_LAUNCH_FLOAT(x, T, sumLastDim, x.data<T>(), out.data<T>(), out.numel(), cols);
  return out;
}

// The gradient of a broadcast operand: g (rows, C) reduced to y's shape.
Tensor reduceTo(const Tensor& g, Broadcast broadcast, const Shape& yShape) {
  if (broadcast == Broadcast::Rows) return rowSums(g, yShape);
  const int64_t cols = lastDim(g);
  const int64_t rows = g.numel() / cols;
  Tensor out = Tensor::empty(yShape, g.dtype(), g.device());
  Tensor scratch = Tensor::empty({kernels::sumColumnsScratchSize(rows, cols)}, g.dtype(), g.device());
  MINIDP_LAUNCH_FLOAT(g, T, sumColumns, g.data<T>(), out.data<T>(), scratch.data<T>(), rows, cols, false);
  return out;
}

void checkSameShape(const char* op, const Variable& a, const Variable& b) {
  checkSame(op, a.data(), b.data());
  MINIDP_CHECK(a.shape() == b.shape(),
               op << ": shapes " << shapeString(a.shape()) << " and " << shapeString(b.shape()));
}

// How y lines up with x (..., C): (C) per column, (..., 1) per row; anything else is an error.
Broadcast broadcastOf(const char* op, const Variable& x, const Variable& y) {
  checkSame(op, x.data(), y.data());
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  MINIDP_CHECK(!xs.empty(), op << ": x must have a last dimension");
  if (ys.size() == 1 && ys[0] == xs.back()) return Broadcast::Columns;
  Shape rows = xs;
  rows.back() = 1;
  MINIDP_CHECK(ys == rows, op << ": y " << shapeString(ys) << " must be (" << xs.back() << ") or " << shapeString(rows)
                              << " to broadcast against x " << shapeString(xs));
  return Broadcast::Rows;
}

}  // namespace

Variable sub(const Variable& a, const Variable& b) {
  checkSameShape("sub", a, b);
  return Variable::fromOp(binary(BinaryOp::Sub, Broadcast::Same, a.data(), b.data(), a.shape()), {a, b},
                          [](const Tensor& g) {
                            return std::vector<Tensor>{g, scale(g, -1.0)};
                          });
}

Variable div(const Variable& a, const Variable& b) {
  checkSameShape("div", a, b);
  const Tensor x = a.data(), y = b.data();
  const Tensor out = binary(BinaryOp::Div, Broadcast::Same, x, y, x.shape());
  return Variable::fromOp(out, {a, b}, [y, out](const Tensor& g) {
    Tensor da = binary(BinaryOp::Div, Broadcast::Same, g, y, g.shape());  // g / b
    Tensor db = scale(mul(da, out), -1.0);                                // -g a / b^2
    return std::vector<Tensor>{da, db};
  });
}

Variable neg(const Variable& x) { return unary(UnaryOp::Neg, x); }
Variable addScalar(const Variable& x, double s) { return unary(UnaryOp::AddScalar, x, s); }
Variable pow(const Variable& x, double p) { return unary(UnaryOp::Pow, x, p); }
Variable sqrt(const Variable& x) { return unary(UnaryOp::Sqrt, x); }
Variable rsqrt(const Variable& x) { return unary(UnaryOp::Rsqrt, x); }
Variable exp(const Variable& x) { return unary(UnaryOp::Exp, x); }
Variable sigmoid(const Variable& x) { return unary(UnaryOp::Sigmoid, x); }
Variable silu(const Variable& x) { return unary(UnaryOp::Silu, x); }

Variable addBroadcast(const Variable& x, const Variable& y) {
  const Broadcast broadcast = broadcastOf("addBroadcast", x, y);
  const Shape yShape = y.shape();
  return Variable::fromOp(binary(BinaryOp::Add, broadcast, x.data(), y.data(), x.shape()), {x, y},
                          [broadcast, yShape](const Tensor& g) {
                            return std::vector<Tensor>{g, reduceTo(g, broadcast, yShape)};
                          });
}

Variable mulBroadcast(const Variable& x, const Variable& y) {
  const Broadcast broadcast = broadcastOf("mulBroadcast", x, y);
  const Tensor a = x.data(), b = y.data();
  return Variable::fromOp(binary(BinaryOp::Mul, broadcast, a, b, a.shape()), {x, y},
                          [broadcast, a, b](const Tensor& g) {
                            Tensor da = binary(BinaryOp::Mul, broadcast, g, b, g.shape());
                            Tensor db = reduceTo(mul(g, a), broadcast, b.shape());
                            return std::vector<Tensor>{da, db};
                          });
}

Variable sumLastDim(const Variable& v, bool keepdim) {
  const Tensor x = v.data();
  MINIDP_CHECK(x.ndim() >= 1, "sumLastDim: x must have a last dimension");
  Shape shape = x.shape();
  if (keepdim) {
    shape.back() = 1;
  } else {
    shape.pop_back();
  }
  const Shape xShape = x.shape();
  return Variable::fromOp(rowSums(x, shape), {v}, [xShape](const Tensor& g) {
    return std::vector<Tensor>{binary(BinaryOp::Right, Broadcast::Rows, Tensor(), g, xShape)};
  });
}

Variable meanLastDim(const Variable& x, bool keepdim) {
  return scale(sumLastDim(x, keepdim), 1.0 / static_cast<double>(lastDim(x.data())));
}

Variable gatherRows(const Variable& tableVar, const Tensor& index) {
  const Tensor& table = tableVar.data();
  MINIDP_CHECK(table.ndim() == 2, "gatherRows: table " << shapeString(table.shape()) << " must be (V, C)");
  MINIDP_CHECK(index.dtype() == DType::I32 && index.device() == table.device(),
               "gatherRows: index must be I32 on " << deviceName(table.device()) << ", got " << dtypeName(index.dtype())
                                                   << " on " << deviceName(index.device()));
  const int64_t V = table.size(0), C = table.size(1), n = index.numel();
  Shape shape = index.shape();
  shape.push_back(C);
  Tensor out = Tensor::empty(shape, table.dtype(), table.device());  // (..., C)
  MINIDP_LAUNCH_FLOAT(table, T, gatherRows, table.data<T>(), index.data<int32_t>(), out.data<T>(), n, C, V);
  return Variable::fromOp(out, {tableVar}, [index, n, C, V](const Tensor& g) {
    Tensor dtable = Tensor::empty({V, C}, g.dtype(), g.device());
    // The embedding kernel's token backward with one "sequence" of n positions: rows summed in order.
    int64_t scratchBytes = 0;  // the GPU sorts (token, position) pairs; the CPU needs none
    if (g.isCuda()) MINIDP_ON_CUDA(scratchBytes = kernels::cuda::embeddingBackwardScratchBytes(n, V));
    Tensor scratch = Tensor::empty({(scratchBytes + 3) / 4}, DType::I32, g.device());
    MINIDP_LAUNCH_FLOAT(g, T, embeddingBackwardTokens, g.data<T>(), index.data<int32_t>(), dtable.data<T>(),
                        scratch.data<int32_t>(), 1, n, C, V, false);
    return std::vector<Tensor>{dtable};
  });
}

}  // namespace minidp::ops
