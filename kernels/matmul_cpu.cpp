// CPU twin of kernels/matmul.cu: one Eigen product per batch item over row-major maps.
#include <Eigen/Core>

#include <algorithm>

#include "base/check.h"
#include "kernels/matmul.h"

namespace minidp::kernels {

GemmLd GemmLd::resolved(bool transA, bool transB, int64_t M, int64_t N, int64_t K) const {
  const int64_t rowA = transA ? M : K, rowB = transB ? K : N;
  MINIDP_CHECK((a == 0 || a >= rowA) && (b == 0 || b >= rowB) && (c == 0 || c >= N),
               "gemm: leading dimensions (" << a << ", " << b << ", " << c << ") shorter than the rows (" << rowA
                                            << ", " << rowB << ", " << N << ")");
  const auto pick = [](int64_t ld, int64_t row) { return std::max<int64_t>(1, ld != 0 ? ld : row); };
  return {pick(a, rowA), pick(b, rowB), pick(c, N)};
}

namespace cpu {

template <typename T>
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t strideA, const T* B,
          int64_t strideB, T beta, T* C, int64_t strideC, int64_t batch, GemmLd ld) {
  MINIDP_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0,
               "gemm: negative size M=" << M << " N=" << N << " K=" << K << " batch=" << batch);
  const GemmLd lds = ld.resolved(transA, transB, M, N, K);
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;  // row-major: the distance between rows
  using ConstMap = Eigen::Map<const Matrix, Eigen::Unaligned, Stride>;
  for (int64_t b = 0; b < batch; ++b) {
    // Stored shapes: A (M, K) or (K, M) when transA; B (K, N) or (N, K) when transB; rows ld apart.
    ConstMap a(A + b * strideA, transA ? K : M, transA ? M : K, Stride(lds.a));
    ConstMap bm(B + b * strideB, transB ? N : K, transB ? K : N, Stride(lds.b));
    Eigen::Map<Matrix, Eigen::Unaligned, Stride> c(C + b * strideC, M, N, Stride(lds.c));  // (M, N)
    // beta == 0 must not read C: it may be uninitialised (NaN * 0 is NaN).
    if (beta == T(0)) {
      c.setZero();
    } else if (beta != T(1)) {
      c *= beta;
    }
    if (transA && transB) {
      c.noalias() += alpha * (a.transpose() * bm.transpose());
    } else if (transA) {
      c.noalias() += alpha * (a.transpose() * bm);
    } else if (transB) {
      c.noalias() += alpha * (a * bm.transpose());
    } else {
      c.noalias() += alpha * (a * bm);
    }
  }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t, int64_t, GemmLd);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t, int64_t, GemmLd);

}  // namespace cpu
}  // namespace minidp::kernels
