// Causal attention over separate q, k and v with grouped key/value heads (GQA), three ways.
// Materialised through the (B, H, T, T) probabilities: the G = H / Hkv query heads that share key/value
// head j are heads j G .. j G + G - 1, so in the (B, H, T, d) head layout they are one (G T, d) matrix per
// (b, j): every product is one batched GEMM over B Hkv matrices, and the ones that reduce over the G heads
// (dK, dV) sum them inside the GEMM, in a fixed order. Flash (CUDA): the flash kernels read q, k and v in
// place, query head h reading key/value head h / G; backward writes dK and dV per key/value head, the group's
// G heads summed in the kernel's fp32 accumulators. Packed: k and v repeated to H heads and packed with q into the
// (B, T, 3C) qkv of causalSelfAttention; the repeat's backward sums each group's rounded gradients in order.
#include <cmath>

#include "framework/ops/ops.h"
#include "framework/tensor/dispatch.h"
#include "kernels/attention_kernels.h"
#include "kernels/flash_attention.h"
#if MINIDP_WITH_CUDA
#include "kernels/flash_attention_sm90.h"
#endif
#include "kernels/matmul.h"

namespace minidp::ops {

namespace {

// B sequences of T = seqLen tokens, H query heads and Hkv key/value heads of d channels.
struct GqaShape {
  int64_t B, seqLen, H, Hkv, d;
  int64_t G() const { return H / Hkv; }
};

Tensor heads(const GqaShape& s, int64_t H, const Tensor& like) {
  return Tensor::empty({s.B, H, s.seqLen, s.d}, like.dtype(), like.device());
}

// (B, T, H, d) -> (B, H, T, d), and back.
Tensor toHeads(const GqaShape& s, const Tensor& x, int64_t H) {
  Tensor out = heads(s, H, x);
  MINIDP_LAUNCH_FLOAT(x, T, splitHeads, x.data<T>(), out.data<T>(), s.B, s.seqLen, H, s.d, H * s.d);
  return out;
}
Tensor fromHeads(const GqaShape& s, const Tensor& x, int64_t H) {
  Tensor out = Tensor::empty({s.B, s.seqLen, H, s.d}, x.dtype(), x.device());
  MINIDP_LAUNCH_FLOAT(x, T, mergeHeads, x.data<T>(), out.data<T>(), s.B, s.seqLen, H, s.d, H * s.d);
  return out;
}

// C[m] = alpha op(A[m]) op(B[m]) for the B Hkv (b, j) matrices, each operand packed matrix after matrix.
void groupGemm(const GqaShape& s, bool transA, bool transB, int64_t M, int64_t N, int64_t K, double alpha,
               const Tensor& A, const Tensor& B, Tensor& C) {
  MINIDP_LAUNCH_FLOAT(A, T, gemm, transA, transB, M, N, K, static_cast<T>(alpha), A.data<T>(), M * K, B.data<T>(),
                      K * N, T(0), C.data<T>(), M * N, s.B * s.Hkv);
}

// The shape of q (B, T, H, d), k and v (B, T, Hkv, d), checked: one dtype and device, Hkv dividing H.
GqaShape gqaShape(const Tensor& q, const Tensor& k, const Tensor& v) {
  checkSame("causalAttention", q, k);
  checkSame("causalAttention", q, v);
  MINIDP_CHECK(q.ndim() == 4 && k.ndim() == 4 && k.shape() == v.shape() && k.size(0) == q.size(0) &&
                   k.size(1) == q.size(1) && k.size(3) == q.size(3) && k.size(2) > 0 && q.size(2) % k.size(2) == 0,
               "causalAttention: q " << shapeString(q.shape()) << ", k " << shapeString(k.shape()) << ", v "
                                     << shapeString(v.shape())
                                     << " must be (B, T, H, d), (B, T, Hkv, d) and (B, T, Hkv, d) with Hkv dividing H");
  return GqaShape{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3)};
}

// q (B, T, H, d), k and v (B, T, Hkv, d) as the flash kernels read them: rows H d and Hkv d apart.
template <typename T>
kernels::AttentionOperands<T> gqaOperands(const GqaShape& s, const Tensor& q, const Tensor& k, const Tensor& v) {
  return {q.data<T>(), k.data<T>(), v.data<T>(), s.H * s.d, s.Hkv * s.d, s.Hkv * s.d, s.G()};
}

// dq (B, T, H, d), dk and dv (B, T, Hkv, d), as the flash kernels write them.
template <typename T>
kernels::AttentionGradients<T> gqaGradients(const GqaShape& s, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  return {dq.data<T>(), dk.data<T>(), dv.data<T>(), s.H * s.d, s.Hkv * s.d, s.Hkv * s.d};
}

// Flash attention (kernels/flash_attention.h) on q, k and v in place; only y and the row logsumexp
// (B, H, T) are kept for backward. Backward's kernels write dk and dv per key/value head, each group's G
// query heads summed in their fp32 accumulators and rounded once.
Variable flashAttention(const Variable& qVar, const Variable& kVar, const Variable& vVar, const GqaShape& s) {
  const Tensor& q = qVar.data();
  const Tensor& k = kVar.data();
  const Tensor& v = vVar.data();
  Tensor y = Tensor::empty(q.shape(), q.dtype(), q.device());                // (B, T, H, d)
  Tensor lse = Tensor::empty({s.B, s.H, s.seqLen}, DType::F32, q.device());  // (B, H, T), fp32 for both
  MINIDP_ON_CUDA(MINIDP_DISPATCH_F32_BF16(
      q.dtype(), T,
      kernels::cuda::flashAttentionForward<T>(gqaOperands<T>(s, q, k, v), y.data<T>(), lse.data<float>(), s.B, s.seqLen,
                                              s.H, s.d, runtime::computeStream())));
  return Variable::fromOp(y, {qVar, kVar, vVar}, [s, q, k, v, y, lse](const Tensor& g) {
    // dq, dk and dv, fully written by the kernels.
    Tensor dq = Tensor::empty(q.shape(), g.dtype(), g.device());
    Tensor dk = Tensor::empty(k.shape(), g.dtype(), g.device()), dv = Tensor::empty(v.shape(), g.dtype(), g.device());
    Tensor rowDot = Tensor::empty({s.B, s.H, s.seqLen}, DType::F32, g.device());  // rowsum(dy * y)
    MINIDP_ON_CUDA(MINIDP_DISPATCH_F32_BF16(g.dtype(), T, {
      // The score gradients the key pass stores for the query pass, where the shape takes them (bf16).
      const size_t bytes = kernels::cuda::flashAttentionBackwardScratchBytes<T>(s.B, s.seqLen, s.H, s.d);
      const Tensor scratch =
          bytes ? Tensor::empty({static_cast<int64_t>(bytes / sizeof(bf16))}, DType::BF16, g.device()) : Tensor();
      kernels::cuda::flashAttentionBackward<T>(g.data<T>(), gqaOperands<T>(s, q, k, v), y.data<T>(), lse.data<float>(),
                                               rowDot.data<float>(), gqaGradients<T>(s, dq, dk, dv), s.B, s.seqLen, s.H,
                                               s.d, bytes ? scratch.data<bf16>() : nullptr, bytes,
                                               runtime::computeStream());
    }));
    return std::vector<Tensor>{dq, dk, dv};
  });
}

}  // namespace

Variable causalAttention(const Variable& q, const Variable& k, const Variable& v) {
  const GqaShape s = gqaShape(q.data(), k.data(), v.data());
  // The choice of causalSelfAttention: flash where CUDA has a kernel for the dtype and head dim.
  if (q.data().isCuda() && q.dtype() != DType::F64 && kernels::flashAttentionSupportsHeadDim(s.d)) {
    return flashAttention(q, k, v, s);
  }
  return causalAttentionMaterialized(q, k, v);
}

Variable causalAttentionPacked(const Variable& q, const Variable& k, const Variable& v) {
  const GqaShape s = gqaShape(q.data(), k.data(), v.data());
  const Shape packed{s.B, s.seqLen, s.H * s.d};  // (B, T, C) of each of q, k, v
  const Variable qkv = cat({reshape(q, packed), reshape(repeatInterleave(k, 2, s.G()), packed),
                            reshape(repeatInterleave(v, 2, s.G()), packed)},
                           -1);  // (B, T, 3C)
  return reshape(causalSelfAttention(qkv, static_cast<int>(s.H)), {s.B, s.seqLen, s.H, s.d});
}

Variable causalAttentionMaterialized(const Variable& qVar, const Variable& kVar, const Variable& vVar) {
  const Tensor& q = qVar.data();
  const Tensor& k = kVar.data();
  const Tensor& v = vVar.data();
  const GqaShape s = gqaShape(q, k, v);
  MINIDP_CHECK(q.dtype() != DType::BF16, "causalAttention: BF16 needs the CUDA flash kernels, got head dim "
                                             << s.d << " on " << deviceName(q.device()));
  const int64_t seq = s.seqLen, GT = s.G() * seq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  Tensor qh = toHeads(s, q, s.H), kh = toHeads(s, k, s.Hkv), vh = toHeads(s, v, s.Hkv);
  Tensor probs = Tensor::empty({s.B, s.H, seq, seq}, q.dtype(), q.device());  // scores, then their softmax
  groupGemm(s, false, true, GT, seq, s.d, scale, qh, kh, probs);
  MINIDP_LAUNCH_FLOAT(q, T, causalSoftmaxForward, probs.data<T>(), probs.data<T>(), s.B * s.H, s.seqLen);
  Tensor yh = heads(s, s.H, q);
  groupGemm(s, false, false, GT, s.d, seq, 1.0, probs, vh, yh);

  return Variable::fromOp(fromHeads(s, yh, s.H), {qVar, kVar, vVar}, [s, scale, qh, kh, vh, probs](const Tensor& g) {
    const int64_t seq = s.seqLen, GT = s.G() * seq;
    Tensor dyh = toHeads(s, g, s.H);
    Tensor dscores = Tensor::empty(probs.shape(), g.dtype(), g.device());  // dP, then dS in place
    groupGemm(s, false, true, GT, seq, s.d, 1.0, dyh, vh, dscores);
    Tensor dvh = heads(s, s.Hkv, g);  // P^T dY: (T, G T) @ (G T, d), the G heads summed by the GEMM
    groupGemm(s, true, false, seq, s.d, GT, 1.0, probs, dyh, dvh);
    MINIDP_LAUNCH_FLOAT(g, T, causalSoftmaxBackward, probs.data<T>(), dscores.data<T>(), dscores.data<T>(), s.B * s.H,
                        s.seqLen);
    Tensor dqh = heads(s, s.H, g), dkh = heads(s, s.Hkv, g);
    groupGemm(s, false, false, GT, s.d, seq, scale, dscores, kh, dqh);
    groupGemm(s, true, false, seq, s.d, GT, scale, dscores, qh, dkh);
    return std::vector<Tensor>{fromHeads(s, dqh, s.H), fromHeads(s, dkh, s.Hkv), fromHeads(s, dvh, s.Hkv)};
  });
}

std::string attentionKernels(Device device) {
  if (device == Device::CPU) return "cpu";
#if MINIDP_WITH_CUDA
  const kernels::cuda::AttentionMode mode = kernels::cuda::attentionMode();
  const std::string name = kernels::cuda::attentionModeName(mode);
  if (mode == kernels::cuda::AttentionMode::CpAsync) return name;
  return name + (kernels::cuda::hopperAttentionAvailable(128) ? " (Hopper kernels)"
                                                              : " (cp.async kernels: no sm_90a on this GPU)");
#else
  return "cp.async";
#endif
}

}  // namespace minidp::ops
