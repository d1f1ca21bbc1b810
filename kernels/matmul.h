// Row-major (batched) GEMM: cuBLAS on the GPU, Eigen on the CPU; bf16 inputs through cuBLASLt.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"

namespace minidp::kernels {

/// C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] for b in [0, batch), all row-major and contiguous:
/// op(A) is (M, K) (A stored (K, M) when transA), op(B) is (K, N) (B stored (N, K) when transB),
/// C is (M, N); A[b] = A + b * strideA, likewise B and C (strides in elements; 0 broadcasts).
#define MINIDP_GEMM_ARGS                                                                                       \
  bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t strideA, const T *B, \
      int64_t strideB, T beta, T *C, int64_t strideC, int64_t batch

/// Leading dimensions of A, B and C in elements (the distance between the starts of two stored rows);
/// 0 means packed (A: transA ? M : K, B: transB ? K : N, C: N). A wider one reads or writes a matrix
/// inside a padded buffer, e.g. logits (M, V) in rows of Vp = V rounded up to 64, which keeps every row
/// aligned for the tensor-core kernels when V is odd.
struct GemmLd {
  int64_t a = 0, b = 0, c = 0;
  /// These leading dimensions with the packed row lengths in place of 0 (each at least 1, as cuBLAS wants);
  /// throws when one is shorter than its row.
  GemmLd resolved(bool transA, bool transB, int64_t M, int64_t N, int64_t K) const;
};

#define MINIDP_GEMM_FORWARD transA, transB, M, N, K, alpha, A, strideA, B, strideB, beta, C, strideC, batch

namespace cpu {
/// gemm with explicit leading dimensions.
template <typename T>
void gemm(MINIDP_GEMM_ARGS, GemmLd ld);
template <typename T>
void gemm(MINIDP_GEMM_ARGS) {
  gemm<T>(MINIDP_GEMM_FORWARD, GemmLd{});
}
}  // namespace cpu
namespace cuda {
/// Uses a cuBLAS handle of this thread bound to `stream`; fp32 math without TF32 unless setTf32(true),
/// so by default results track the CPU twin to fp32 rounding. `ld` as GemmLd.
template <typename T>
void gemm(MINIDP_GEMM_ARGS, GemmLd ld, cudaStream_t stream);
template <typename T>
void gemm(MINIDP_GEMM_ARGS, cudaStream_t stream) {
  gemm<T>(MINIDP_GEMM_FORWARD, GemmLd{}, stream);
}
/// Whether fp32 GEMMs run on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32); off by default. Process-wide.
void setTf32(bool enabled);
/// Whether the bf16 GEMMs below run a plain kernel of minidp's own (one thread per output element, fp32 sums,
/// the epilogue on the fp32 value in the kernel, no bias-gradient epilogue) instead of cuBLASLt: slow, for
/// compute-sanitizer's initcheck, which does not see the writes of cuBLASLt's sm90 (TMA) kernels. Off by
/// default. Process-wide.
void setPlainBf16Gemms(bool enabled);
/// Mixed precision: A and B bf16, C bf16 (activations) or float (weight gradients), fp32 accumulation
/// and float alpha/beta, through cuBLASLt with a workspace allocated once per thread. `bias` (N), of
/// C's type (cuBLASLt's bias type is the output type), may be null; else it is added to every row of C
/// in the GEMM's epilogue (a pass of its own on shapes cuBLASLt has no kernel for, which run through
/// cublasGemmStridedBatchedEx). Other arguments as gemm.
/// `ld` as GemmLd; the cuBLASLt plans are cached per shape, leading dimensions and alignments.
template <typename TC>
void gemmBf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t strideA,
              const bf16* B, int64_t strideB, float beta, TC* C, int64_t strideC, int64_t batch, const TC* bias,
              GemmLd ld, cudaStream_t stream);
template <typename TC>
void gemmBf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t strideA,
              const bf16* B, int64_t strideB, float beta, TC* C, int64_t strideC, int64_t batch, const TC* bias,
              cudaStream_t stream) {
  gemmBf16<TC>(MINIDP_GEMM_FORWARD, bias, GemmLd{}, stream);
}
/// gemmBf16 with C = alpha op(A) op(B) + beta addend (+ bias): the addend (laid out as C; the plan takes the
/// alignment both allow) is read in the GEMM's epilogue (cuBLASLt's C apart from its D), so a residual stream is added
/// without a pass of its own; addend == C is gemmBf16. bf16 output.
template <typename TC>
void gemmBf16Addend(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
                    int64_t strideA, const bf16* B, int64_t strideB, float beta, const TC* addend, TC* C,
                    int64_t strideC, int64_t batch, const TC* bias, GemmLd ld, cudaStream_t stream);
/// The GELU MLP's fusions, bf16 with fp32 accumulation, batch 1, all row-major; N divisible by 8 (the
/// cuBLASLt auxiliary matrix). Forward: pre = op(A) op(B) + bias (N) and C = gelu(pre) (tanh form, from the
/// fp32 pre-activation), both (M, N). Other arguments as gemm.
void gemmBf16GeluBias(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const bf16* A, const bf16* B,
                      const bf16* bias, bf16* C, bf16* pre, cudaStream_t stream);
/// Backward: C (M, N) = (op(A) op(B)) * gelu'(pre), `pre` (M, N) as gemmBf16GeluBias saved it.
void gemmBf16DGelu(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const bf16* A, const bf16* B,
                   const bf16* pre, bf16* C, cudaStream_t stream);
}  // namespace cuda

#undef MINIDP_GEMM_FORWARD
#undef MINIDP_GEMM_ARGS

}  // namespace minidp::kernels
