// Row-major batched GEMM through cuBLAS (column-major): C (M, N) row-major is C^T (N, M) column-major,
// so we ask cuBLAS for C^T = op(B)^T op(A)^T, passing B first. No transposes are materialised.
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <map>
#include <memory>
#include <type_traits>

#include "base/cuda_check.h"
#include "kernels/accum.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/gelu_math.h"
#include "kernels/matmul.h"

namespace minidp::kernels::cuda {

namespace {

// A cuBLAS handle, created on the device current at first use and destroyed when its thread exits.
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

// One handle per host thread and stream: a handle must not be used by two threads at once, and its
// workspace must not serve kernels of two streams that run at once (a comm hook's products on the comm
// stream beside backward's on the compute stream; cuBLAS promises the same bits only then).
cublasHandle_t handleOn(cudaStream_t stream) {
  thread_local std::map<cudaStream_t, std::unique_ptr<ThreadHandle>> handles;
  std::unique_ptr<ThreadHandle>& handle = handles[stream];
  if (!handle) {
    handle = std::make_unique<ThreadHandle>();
    CUBLAS_CHECK(cublasSetStream(handle->get(), stream));
  }
  return handle->get();
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

std::atomic<bool> gTf32{false};

// Sizes within cuBLAS's int range; false when there is nothing to compute (an empty C).
bool checkGemmSizes(int64_t M, int64_t N, int64_t K, int64_t batch) {
  MINIDP_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0,
               "gemm: negative size M=" << M << " N=" << N << " K=" << K << " batch=" << batch);
  MINIDP_CHECK(std::max({M, N, K, batch}) <= INT_MAX,
               "gemm: a size exceeds cuBLAS's int range: M=" << M << " N=" << N << " K=" << K << " batch=" << batch);
  return M != 0 && N != 0 && batch != 0;
}

// The leading dimensions in cuBLAS's int range.
GemmLd leadingDims(bool transA, bool transB, int64_t M, int64_t N, int64_t K, GemmLd ld) {
  const GemmLd out = ld.resolved(transA, transB, M, N, K);
  MINIDP_CHECK(std::max({out.a, out.b, out.c}) <= INT_MAX, "gemm: a leading dimension exceeds cuBLAS's int range");
  return out;
}

}  // namespace

void setTf32(bool enabled) { gTf32 = enabled; }

namespace {
std::atomic<bool> gPlainBf16{false};
}  // namespace

void setPlainBf16Gemms(bool enabled) { gPlainBf16 = enabled; }

template <typename T>
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t strideA, const T* B,
          int64_t strideB, T beta, T* C, int64_t strideC, int64_t batch, GemmLd ld, cudaStream_t stream) {
  if (!checkGemmSizes(M, N, K, batch)) return;
  const GemmLd lds = leadingDims(transA, transB, M, N, K, ld);
  const int lda = static_cast<int>(lds.a), ldb = static_cast<int>(lds.b), ldc = static_cast<int>(lds.c);
  const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (std::is_same_v<T, float>) {
    if (gTf32) {
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(handleOn(stream), opB, opA, static_cast<int>(N), static_cast<int>(M),
                                              static_cast<int>(K), &alpha, B, CUDA_R_32F, ldb, strideB, A, CUDA_R_32F,
                                              lda, strideA, &beta, C, CUDA_R_32F, ldc, strideC, static_cast<int>(batch),
                                              CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
      return;
    }
  }
  CUBLAS_CHECK(Gemm<T>::stridedBatched(handleOn(stream), opB, opA, static_cast<int>(N), static_cast<int>(M),
                                       static_cast<int>(K), &alpha, B, ldb, strideB, A, lda, strideA, &beta, C, ldc,
                                       strideC, static_cast<int>(batch)));
}

namespace {

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper

// The largest power of two (up to 256) dividing every address the GEMM reads from `ptr`: cuBLASLt's
// heuristic otherwise assumes 256-byte alignment, which bucket views and batch offsets need not have.
uint32_t alignmentOf(const void* ptr, int64_t strideBytes) {
  uint64_t bits = reinterpret_cast<uintptr_t>(ptr) | static_cast<uint64_t>(strideBytes) | 256;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

constexpr int kEpilogueBlock = 256;

// What a bf16 GEMM does to its (M, N) product before storing it.
enum class Epilogue : int64_t {
  None,
  Bias,         // C = AB + bias (per column of our row-major C)
  GeluAuxBias,  // aux = AB + bias, C = gelu(aux) (tanh form)
  DGelu,        // C = AB * gelu'(aux)
};

cublasLtEpilogue_t ltEpilogue(Epilogue e) {
  switch (e) {
    case Epilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::GeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

// An epilogue applied to v, the fp32 value of output element i (column n) before it is rounded to C's type:
// the bias added, GELU with the pre-activation saved as aux, or v times GELU's derivative at aux.
template <typename TC>
__device__ float epilogueValue(Epilogue e, float v, const TC* bias, TC* aux, int64_t i, int64_t n) {
  if (e == Epilogue::Bias) return v + toAccum(bias[n]);
  if (e == Epilogue::GeluAuxBias) {
    const float pre = v + toAccum(bias[n]);
    aux[i] = fromAccum<TC>(pre);
    return geluValue(pre);
  }
  if (e == Epilogue::DGelu) return v * geluDerivative(toAccum(aux[i]));
  return v;
}

// The epilogue when cuBLASLt has no fused kernel, over C (M, N) row-major that holds AB; float math.
template <typename TC>
__global__ void epilogueKernel(Epilogue e, TC* C, const TC* bias, TC* aux, int64_t n, int64_t N) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    C[i] = fromAccum<TC>(epilogueValue(e, toAccum(C[i]), bias, aux, i, i % N));
  }
}

// C = epilogue(alpha op(A) op(B) + beta addend) (the addend laid out as C; C itself when the caller has none),
// one thread per output element, fp32 sums in k order, the epilogue on the fp32 value as cuBLASLt's fused
// ones are; beta 0 never reads the addend. Row-major operands with leading
// dimensions lda, ldb, ldc, batch z at z times each stride (an epilogue comes with batch 1 and ldc = N).
template <typename TC>
__global__ void plainGemmKernel(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
                                int64_t lda, int64_t strideA, const bf16* B, int64_t ldb, int64_t strideB, float beta,
                                const TC* addend, TC* C, int64_t ldc, int64_t strideC, int64_t batch, Epilogue e,
                                const TC* bias, TC* aux) {
  const int64_t total = batch * M * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t z = i / (M * N), m = i / N % M, n = i % N;
    const bf16* a = A + z * strideA;
    const bf16* b = B + z * strideB;
    float sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      sum += toAccum(transA ? a[k * lda + m] : a[m * lda + k]) * toAccum(transB ? b[n * ldb + k] : b[k * ldb + n]);
    }
    const int64_t o = z * strideC + m * ldc + n;
    float v = alpha * sum;
    if (beta != 0.0f) v += beta * toAccum(addend[o]);
    C[o] = fromAccum<TC>(epilogueValue(e, v, bias, aux, o, n));
  }
}

// One cuBLASLt matmul shape: descriptors and the algorithm the heuristic chose (found false: none).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
};

// cuBLASLt state of one host thread: handle, workspace (allocated once) and the plans by shape.
class LtContext {
 public:
  LtContext() {
    CUBLAS_CHECK(cublasLtCreate(&handle_));
    CUDA_CHECK(cudaMalloc(&workspace_, kLtWorkspaceBytes));
  }
  // Statuses ignored: at process exit the CUDA runtime may already be gone.
  ~LtContext() {
    for (auto& [key, plan] : plans_) {
      cublasLtMatrixLayoutDestroy(plan.a);
      cublasLtMatrixLayoutDestroy(plan.b);
      cublasLtMatrixLayoutDestroy(plan.c);
      cublasLtMatmulDescDestroy(plan.desc);
    }
    cudaFree(workspace_);
    cublasLtDestroy(handle_);
  }
  LtContext(const LtContext&) = delete;
  LtContext& operator=(const LtContext&) = delete;

  using Key = std::array<int64_t, 19>;
  /// The plan for `key`, built by `build` on first use.
  template <typename Build>
  LtPlan& plan(const Key& key, Build build) {
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, build(handle_)).first;
    return it->second;
  }
  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, LtPlan> plans_;
};

LtContext& ltContext() {
  thread_local LtContext context;
  return context;
}

template <typename T>
void setAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}

// A column-major layout of `rows` x `cols` (leading dimension ld), `batch` matrices `stride` apart.
cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return l;
}

// gemmBf16 with an epilogue: `bias` (N) for Bias and GeluAuxBias; `aux` (M, N) row-major written by
// GeluAuxBias and read by DGelu; `addend` (null: C itself) is what beta scales, laid out as C. Where cuBLASLt
// has no kernel for the shape, the general GEMM and a pass of the epilogue's own run instead.
template <typename TC>
void gemmBf16Epilogue(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
                      int64_t strideA, const bf16* B, int64_t strideB, float beta, TC* C, int64_t strideC,
                      int64_t batch, Epilogue epilogue, const TC* bias, TC* aux, GemmLd ld, cudaStream_t stream,
                      const TC* addend = nullptr) {
  static_assert(std::is_same_v<TC, bf16> || std::is_same_v<TC, float>, "gemmBf16 writes bf16 or float");
  if (!checkGemmSizes(M, N, K, batch)) return;
  MINIDP_CHECK(K > 0, "gemmBf16: K = 0 (an empty reduction) is not supported");
  MINIDP_CHECK(epilogue == Epilogue::None || batch == 1, "gemmBf16: a fused epilogue needs batch 1");
  MINIDP_CHECK(aux == nullptr || N % 8 == 0, "gemmBf16: a GELU epilogue needs N divisible by 8, got " << N);
  constexpr cudaDataType_t typeC = std::is_same_v<TC, bf16> ? CUDA_R_16BF : CUDA_R_32F;
  const GemmLd lds = leadingDims(transA, transB, M, N, K, ld);
  const int64_t lda = lds.a, ldb = lds.b, ldc = lds.c;
  MINIDP_CHECK(epilogue == Epilogue::None || ldc == N, "gemmBf16: an epilogue with a padded C is not supported");
  if (gPlainBf16) {  // setPlainBf16Gemms: our own kernel, the epilogue in it
    plainGemmKernel<TC><<<gridFor(batch * M * N, kEpilogueBlock), kEpilogueBlock, 0, stream>>>(
        transA, transB, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta, addend ? addend : C, C, ldc, strideC,
        batch, epilogue, bias, aux);
    CUDA_CHECK_LAUNCH();
    return;
  }
  // As gemm: cuBLASLt (column-major) computes C^T (N, M) = op(B)^T op(A)^T, so our B is its first operand.
  const uint32_t alignA = alignmentOf(A, batch > 1 ? strideA * 2 : 0);
  const uint32_t alignB = alignmentOf(B, batch > 1 ? strideB * 2 : 0);
  // C and D share one layout and plan: with an addend apart from C, the alignment both allow.
  const int64_t strideBytesC = batch > 1 ? strideC * static_cast<int64_t>(sizeof(TC)) : 0;
  const uint32_t alignC = addend && addend != C
                              ? std::min(alignmentOf(C, strideBytesC), alignmentOf(addend, strideBytesC))
                              : alignmentOf(C, strideBytesC);
  // The plan of this shape with epilogue e: cached per shape, leading dimensions and alignments.
  const auto planFor = [&](Epilogue e, const TC* biasPtr, TC* auxPtr) -> LtPlan& {
    const LtContext::Key key{transA,
                             transB,
                             M,
                             N,
                             K,
                             strideA,
                             strideB,
                             strideC,
                             batch,
                             typeC,
                             static_cast<int64_t>(e),
                             alignA,
                             alignB,
                             alignC,
                             biasPtr ? alignmentOf(biasPtr, 0) : 0,
                             auxPtr ? alignmentOf(auxPtr, 0) : 0,
                             lda,
                             ldb,
                             ldc};
    return ltContext().plan(key, [&](cublasLtHandle_t handle) {
      LtPlan p;
      CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      setAttribute<int32_t>(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, transB ? CUBLAS_OP_T : CUBLAS_OP_N);
      setAttribute<int32_t>(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, transA ? CUBLAS_OP_T : CUBLAS_OP_N);
      if (e != Epilogue::None) setAttribute<uint32_t>(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, ltEpilogue(e));
      if (biasPtr) {
        setAttribute<int32_t>(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, typeC);
        setAttribute<const void*>(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, biasPtr);
      }
      if (auxPtr) {  // (M, N) row-major: (N, M) column-major with leading dimension N, of C's type (the default)
        setAttribute<int64_t>(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, N);
        setAttribute<void*>(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, auxPtr);
      }
      p.a = layout(CUDA_R_16BF, transB ? K : N, transB ? N : K, ldb, batch, strideB);
      p.b = layout(CUDA_R_16BF, transA ? M : K, transA ? K : M, lda, batch, strideA);
      p.c = layout(typeC, N, M, ldc, batch, strideC);
      cublasLtMatmulPreference_t pref = nullptr;
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      const uint64_t workspace = kLtWorkspaceBytes;
      const std::array<std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t>, 4> alignments{
          {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignB},
           {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignA},
           {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignC},
           {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignC}}};
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                        sizeof workspace));
      for (const auto& [attribute, bytes] : alignments) {
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &bytes, sizeof bytes));
      }
      cublasLtMatmulHeuristicResult_t result{};
      int count = 0;
      const cublasStatus_t status =
          cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &count);
      cublasLtMatmulPreferenceDestroy(pref);
      // NOT_SUPPORTED, or INVALID_VALUE for some one-row or one-column shapes: the general GEMM takes those.
      p.found = status == CUBLAS_STATUS_SUCCESS && count > 0;
      if (p.found) p.algo = result.algo;
      return p;
    });
  };
  LtContext& lt = ltContext();
  LtPlan& plan = planFor(epilogue, bias, aux);
  if (!plan.found) {
    // No cuBLASLt kernel for this shape: cuBLAS's general GEMM (any sizes), then the epilogue in a pass of its own.
    if (addend && addend != C && beta != 0.0f) {  // C in place: the addend copied into it first
      MINIDP_CHECK(batch == 1 && ldc == N, "gemmBf16: an addend apart from C needs batch 1 and an unpadded C");
      CUDA_CHECK(cudaMemcpyAsync(C, addend, static_cast<size_t>(M * N) * sizeof(TC), cudaMemcpyDeviceToDevice, stream));
    }
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handleOn(stream), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
        static_cast<int>(M), static_cast<int>(K), &alpha, B, CUDA_R_16BF, static_cast<int>(ldb), strideB, A,
        CUDA_R_16BF, static_cast<int>(lda), strideA, &beta, C, typeC, static_cast<int>(ldc), strideC,
        static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (epilogue != Epilogue::None) {
      epilogueKernel<TC>
          <<<gridFor(M * N, kEpilogueBlock), kEpilogueBlock, 0, stream>>>(epilogue, C, bias, aux, M * N, N);
      CUDA_CHECK_LAUNCH();
    }
    return;
  }
  if (bias) setAttribute<const void*>(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (aux) setAttribute<void*>(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  CUBLAS_CHECK(cublasLtMatmul(lt.handle(), plan.desc, &alpha, B, plan.a, A, plan.b, &beta, addend ? addend : C, plan.c,
                              C, plan.c, &plan.algo, lt.workspace(), kLtWorkspaceBytes, stream));
}

}  // namespace

template <typename TC>
void gemmBf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t strideA,
              const bf16* B, int64_t strideB, float beta, TC* C, int64_t strideC, int64_t batch, const TC* bias,
              GemmLd ld, cudaStream_t stream) {
  gemmBf16Epilogue<TC>(transA, transB, M, N, K, alpha, A, strideA, B, strideB, beta, C, strideC, batch,
                       bias ? Epilogue::Bias : Epilogue::None, bias, nullptr, ld, stream);
}

template <typename TC>
void gemmBf16Addend(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
                    int64_t strideA, const bf16* B, int64_t strideB, float beta, const TC* addend, TC* C,
                    int64_t strideC, int64_t batch, const TC* bias, GemmLd ld, cudaStream_t stream) {
  gemmBf16Epilogue<TC>(transA, transB, M, N, K, alpha, A, strideA, B, strideB, beta, C, strideC, batch,
                       bias ? Epilogue::Bias : Epilogue::None, bias, nullptr, ld, stream, addend);
}

void gemmBf16GeluBias(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const bf16* A, const bf16* B,
                      const bf16* bias, bf16* C, bf16* pre, cudaStream_t stream) {
  gemmBf16Epilogue<bf16>(transA, transB, M, N, K, 1.0f, A, 0, B, 0, 0.0f, C, 0, 1, Epilogue::GeluAuxBias, bias, pre,
                         GemmLd{}, stream);
}

void gemmBf16DGelu(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const bf16* A, const bf16* B,
                   const bf16* pre, bf16* C, cudaStream_t stream) {
  // DGelu only reads aux; the pointer is non-const because GeluAuxBias writes it.
  gemmBf16Epilogue<bf16>(transA, transB, M, N, K, 1.0f, A, 0, B, 0, 0.0f, C, 0, 1, Epilogue::DGelu, nullptr,
                         const_cast<bf16*>(pre), GemmLd{}, stream);
}

template void gemmBf16<bf16>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*, int64_t, const bf16*, int64_t,
                             float, bf16*, int64_t, int64_t, const bf16*, GemmLd, cudaStream_t);
template void gemmBf16<float>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*, int64_t, const bf16*, int64_t,
                              float, float*, int64_t, int64_t, const float*, GemmLd, cudaStream_t);
template void gemmBf16Addend<bf16>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*, int64_t, const bf16*,
                                   int64_t, float, const bf16*, bf16*, int64_t, int64_t, const bf16*, GemmLd,
                                   cudaStream_t);

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t, int64_t, GemmLd, cudaStream_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t, int64_t, GemmLd, cudaStream_t);

}  // namespace minidp::kernels::cuda
