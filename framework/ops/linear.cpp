// Linear algebra ops: linear layer, batched matmul, transpose of the last two dimensions.
#include "framework/ops/dispatch.h"
#include "framework/ops/ops.h"
#include "kernels/bias.h"
#include "kernels/matmul.h"
#include "kernels/transpose.h"

namespace minidp::ops {

namespace {

// c[i] = op(a[i]) @ op(b[i]) for i in [0, batch); strides in elements (0 reuses one matrix).
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const Tensor& a, int64_t strideA,
          const Tensor& b, int64_t strideB, Tensor& c, int64_t strideC, int64_t batch) {
  MINIDP_LAUNCH_FLOAT(c, T, gemm, transA, transB, M, N, K, T(1), a.data<T>(), strideA, b.data<T>(), strideB,
                      T(0), c.data<T>(), strideC, batch);
}

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

// (..., M, N) -> (..., N, M).
Tensor transposeLast2(const Tensor& x) {
  MINIDP_CHECK(x.ndim() >= 2, "transpose needs at least 2 dimensions, got " << shapeString(x.shape()));
  const int64_t M = x.size(-2), N = x.size(-1);
  Tensor y = Tensor::empty(replaceTail(x.shape(), 2, {N, M}), x.dtype(), x.device());
  MINIDP_LAUNCH_FLOAT(x, T, transpose, x.data<T>(), y.data<T>(), leadingNumel(x.shape(), 2), M, N);
  return y;
}

}  // namespace

Variable linear(const Variable& xv, const Variable& weightv, const Variable& biasv) {
  const Tensor x = xv.data(), w = weightv.data();
  checkSame("linear", x, w);
  MINIDP_CHECK(x.ndim() >= 1 && w.ndim() == 2 && x.size(-1) == w.size(1),
               "linear: input " << shapeString(x.shape()) << " and weight " << shapeString(w.shape())
                                << " (expected (..., in) and (out, in))");
  const int64_t in = w.size(1), out = w.size(0), rows = leadingNumel(x.shape(), 1);
  Tensor y = Tensor::empty(replaceTail(x.shape(), 1, {out}), x.dtype(), x.device());  // (..., out)
  gemm(false, true, rows, out, in, x, 0, w, 0, y, 0, 1);
  const bool hasBias = biasv.defined();
  if (hasBias) {
    const Tensor b = biasv.data();
    checkSame("linear", x, b);
    MINIDP_CHECK(b.shape() == Shape{out},
                 "linear: bias " << shapeString(b.shape()) << " for " << out << " outputs");
    MINIDP_LAUNCH_FLOAT(y, T, addBias, y.data<T>(), b.data<T>(), rows, out);
  }
  // Only the gradients that are wanted: the first layer's input usually needs none, and its dx is a GEMM.
  const bool needX = xv.requiresGrad(), needW = weightv.requiresGrad(),
             needB = hasBias && biasv.requiresGrad();
  return Variable::fromOp(y, {xv, weightv, biasv}, [=](const Tensor& g) {  // g (..., out)
    Tensor dx, dw, db;
    if (needX) {
      dx = Tensor::empty(x.shape(), g.dtype(), g.device());  // (rows, in) = g (rows, out) @ W (out, in)
      gemm(false, false, rows, in, out, g, 0, w, 0, dx, 0, 1);
    }
    if (needW) {
      dw = Tensor::empty(w.shape(), g.dtype(), g.device());  // (out, in) = g^T (out, rows) @ x (rows, in)
      gemm(true, false, out, in, rows, g, 0, x, 0, dw, 0, 1);
    }
    if (needB) {
      db = Tensor::empty({out}, g.dtype(), g.device());
      Tensor scratch = Tensor::empty({kernels::sumColumnsScratchSize(rows, out)}, g.dtype(), g.device());
      MINIDP_LAUNCH_FLOAT(g, T, sumColumns, g.data<T>(), db.data<T>(), scratch.data<T>(), rows, out, false);
    }
    return std::vector<Tensor>{dx, dw, db};
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
