// Row-major batched GEMM through cuBLAS (column-major): C (M, N) row-major is C^T (N, M) column-major,
// so we ask cuBLAS for C^T = op(B)^T op(A)^T, passing B first. No transposes are materialised.
#include <algorithm>
#include <climits>

#include "kernels/cuda_check.h"
#include "kernels/matmul.h"

namespace minidp::kernels::cuda {

namespace {

// One cuBLAS handle per host thread (a handle must not be used by two threads at once), created on
// the device current at first use and destroyed when the thread exits.
class ThreadHandle {
 public:
  ThreadHandle() {
    CUBLAS_CHECK(cublasCreate(&handle_));
    // Default math: fp32 GEMMs stay fp32 (no TF32), so results track the CPU twin to fp32 rounding.
    CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  }
  // The status is ignored: at process exit the CUDA runtime may already be gone.
  ~ThreadHandle() { cublasDestroy(handle_); }
  ThreadHandle(const ThreadHandle&) = delete;
  ThreadHandle& operator=(const ThreadHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

cublasHandle_t handleOn(cudaStream_t stream) {
  thread_local ThreadHandle handle;
  CUBLAS_CHECK(cublasSetStream(handle.get(), stream));
  return handle.get();
}

// cuBLAS's strided batched GEMM for element type T.
template <typename T>
struct Gemm;
template <>
struct Gemm<float> {
  static constexpr auto stridedBatched = &cublasSgemmStridedBatched;
};
template <>
struct Gemm<double> {
  static constexpr auto stridedBatched = &cublasDgemmStridedBatched;
};

}  // namespace

template <typename T>
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t strideA,
          const T* B, int64_t strideB, T beta, T* C, int64_t strideC, int64_t batch, cudaStream_t stream) {
  MINIDP_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0,
               "gemm: negative size M=" << M << " N=" << N << " K=" << K << " batch=" << batch);
  MINIDP_CHECK(
      std::max({M, N, K, batch}) <= INT_MAX,
      "gemm: a size exceeds cuBLAS's int range: M=" << M << " N=" << N << " K=" << K << " batch=" << batch);
  if (M == 0 || N == 0 || batch == 0) return;
  // Leading dimensions are the row lengths of the stored row-major matrices (at least 1 for cuBLAS).
  const int lda = static_cast<int>(std::max<int64_t>(1, transA ? M : K));
  const int ldb = static_cast<int>(std::max<int64_t>(1, transB ? K : N));
  const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(Gemm<T>::stridedBatched(handleOn(stream), opB, opA, static_cast<int>(N), static_cast<int>(M),
                                       static_cast<int>(K), &alpha, B, ldb, strideB, A, lda, strideA, &beta, C,
                                       static_cast<int>(N), strideC, static_cast<int>(batch)));
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                          int64_t, float, float*, int64_t, int64_t, cudaStream_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t, int64_t, cudaStream_t);

}  // namespace minidp::kernels::cuda
