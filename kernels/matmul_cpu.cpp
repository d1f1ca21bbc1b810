// CPU twin of kernels/matmul.cu: one Eigen product per batch item over row-major maps.
#include <Eigen/Core>

#include "kernels/check.h"
#include "kernels/matmul.h"

namespace minidp::kernels::cpu {

template <typename T>
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t strideA,
          const T* B, int64_t strideB, T beta, T* C, int64_t strideC, int64_t batch) {
  MINIDP_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0,
               "gemm: negative size M=" << M << " N=" << N << " K=" << K << " batch=" << batch);
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const Matrix>;
  for (int64_t b = 0; b < batch; ++b) {
    // Stored shapes: A (M, K) or (K, M) when transA; B (K, N) or (N, K) when transB.
    ConstMap a(A + b * strideA, transA ? K : M, transA ? M : K);
    ConstMap bm(B + b * strideB, transB ? N : K, transB ? K : N);
    Eigen::Map<Matrix> c(C + b * strideC, M, N);  // (M, N)
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

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                          int64_t, float, float*, int64_t, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t, int64_t);

}  // namespace minidp::kernels::cpu
