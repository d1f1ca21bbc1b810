// CPU twin of kernels/transpose.cu.
#include <Eigen/Core>

#include "kernels/transpose.h"

namespace minidp::kernels::cpu {

template <typename T>
void transpose(const T* x, T* y, int64_t batch, int64_t M, int64_t N) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  for (int64_t b = 0; b < batch; ++b) {
    Eigen::Map<Matrix>(y + b * M * N, N, M) = Eigen::Map<const Matrix>(x + b * M * N, M, N).transpose();
  }
}

template void transpose<float>(const float*, float*, int64_t, int64_t, int64_t);
template void transpose<double>(const double*, double*, int64_t, int64_t, int64_t);

}  // namespace minidp::kernels::cpu
