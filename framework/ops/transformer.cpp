// Transformer ops: token + position embedding, LayerNorm and the causal self-attention core.
#include <algorithm>
#include <cmath>
#include <optional>

#include "framework/tensor/dispatch.h"
#include "framework/ops/ops.h"
#include "kernels/attention_kernels.h"
#include "kernels/embedding_kernels.h"
#include "kernels/flash_attention.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace minidp::ops {

Variable embedding(const Variable& wteVar, const Variable& wpeVar, const Tensor& tokens,
                   std::optional<DType> outDType) {
  const Tensor& wte = wteVar.data();
  const Tensor& wpe = wpeVar.data();
  checkSame("embedding", wte, wpe);
  const DType outType = outDType.value_or(wte.dtype());
  MINIDP_CHECK(outType == wte.dtype() || (outType == DType::BF16 && wte.dtype() == DType::F32),
               "embedding: " << dtypeName(wte.dtype()) << " tables cannot give " << dtypeName(outType)
                             << " output (the same dtype, or BF16 from F32)");
  MINIDP_CHECK(wte.ndim() == 2 && wpe.ndim() == 2 && wte.size(1) == wpe.size(1),
               "embedding: wte " << shapeString(wte.shape()) << " and wpe " << shapeString(wpe.shape())
                                 << " must be (V, C) and (Tmax, C)");
  MINIDP_CHECK(tokens.dtype() == DType::I32 && tokens.ndim() == 2 && tokens.device() == wte.device(),
               "embedding: tokens must be I32 (B, T) on " << deviceName(wte.device()) << ", got "
                                                          << dtypeName(tokens.dtype()) << shapeString(tokens.shape())
                                                          << " on " << deviceName(tokens.device()));
  const int64_t B = tokens.size(0), seqLen = tokens.size(1), C = wte.size(1);
  const int64_t V = wte.size(0), Tmax = wpe.size(0);
  MINIDP_CHECK(seqLen <= Tmax, "embedding: " << seqLen << " positions, but wpe has only " << Tmax);
  Tensor out = Tensor::empty({B, seqLen, C}, outType, wte.device());  // (B, T, C)
  MINIDP_LAUNCH_ACTIVATION(out, T, embeddingForward, wte.data<ParamOf<T>>(), wpe.data<ParamOf<T>>(),
                           tokens.data<int32_t>(), out.data<T>(), B, seqLen, C, V);
  const DType tableType = wte.dtype();
  return Variable::fromOp(out, {wteVar, wpeVar}, [tokens, B, seqLen, V, Tmax, C, tableType](const Tensor& g) {
    // Gradients go straight into installed ones (+=) when the tables have them, else into new tensors.
    Tensor dwte = leafGradTarget(0), dwpe = leafGradTarget(1);
    const bool intoWte = dwte.defined(), intoWpe = dwpe.defined();
    if (!intoWte) dwte = Tensor::empty({V, C}, tableType, g.device());
    if (!intoWpe) dwpe = Tensor::empty({Tmax, C}, tableType, g.device());
    int64_t scratchBytes = 0;  // the GPU sorts (token, position) pairs; the CPU needs none
    if (g.isCuda()) MINIDP_ON_CUDA(scratchBytes = kernels::cuda::embeddingBackwardScratchBytes(B * seqLen, V));
    Tensor scratch = Tensor::empty({(scratchBytes + 3) / 4}, DType::I32, g.device());
    MINIDP_LAUNCH_ACTIVATION(g, T, embeddingBackwardTokens, g.data<T>(), tokens.data<int32_t>(),
                             dwte.data<ParamOf<T>>(), scratch.data<int32_t>(), B, seqLen, C, V, intoWte);
    MINIDP_LAUNCH_ACTIVATION(g, T, embeddingBackwardPositions, g.data<T>(), dwpe.data<ParamOf<T>>(), B, seqLen, C, Tmax,
                             intoWpe);
    return std::vector<Tensor>{intoWte ? Tensor() : dwte, intoWpe ? Tensor() : dwpe};
  });
}

namespace {

// Inside a norm's backward: where its dx (x's shape) goes, and whether that is the gradient the engine holds
// for x (a residual stream's, heldGradTarget), to be added into, or a new tensor.
std::pair<Tensor, bool> normInputGradient(const Tensor& x) {
  Tensor held = heldGradTarget(0);
  if (held.defined()) return {held, true};
  return {Tensor::empty(x.shape(), x.dtype(), x.device()), false};
}

}  // namespace

Variable layerNorm(const Variable& xVar, const Variable& weightVar, const Variable& biasVar, double eps) {
  const Tensor& x = xVar.data();
  const Tensor& weight = weightVar.data();
  const Tensor& bias = biasVar.data();
  checkSame("layerNorm", weight, bias);
  DType paramType = x.dtype(), statType = x.dtype();  // bf16 x: fp32 parameters and statistics
  MINIDP_DISPATCH_ACTIVATION(x.dtype(), T, paramType = dtypeOf<ParamOf<T>>(); statType = dtypeOf<AccumOf<T>>());
  MINIDP_CHECK(weight.dtype() == paramType && weight.device() == x.device(),
               "layerNorm: " << dtypeName(x.dtype()) << " x on " << deviceName(x.device()) << " needs "
                             << dtypeName(paramType) << " weight and bias there, got " << dtypeName(weight.dtype())
                             << " on " << deviceName(weight.device()));
  MINIDP_CHECK(x.ndim() >= 1, "layerNorm: x must have a channel dimension");
  const int64_t C = x.size(-1), N = x.numel() / std::max<int64_t>(C, 1);
  MINIDP_CHECK(weight.shape() == Shape{C} && bias.shape() == Shape{C},
               "layerNorm: x " << shapeString(x.shape()) << " needs weight and bias [" << C << "], got "
                               << shapeString(weight.shape()) << " and " << shapeString(bias.shape()));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({N}, statType, x.device());
  Tensor rstd = Tensor::empty({N}, statType, x.device());
  MINIDP_LAUNCH_ACTIVATION(x, T, layerNormForward, x.data<T>(), weight.data<ParamOf<T>>(), bias.data<ParamOf<T>>(),
                           y.data<T>(), mean.data<AccumOf<T>>(), rstd.data<AccumOf<T>>(), N, C,
                           static_cast<AccumOf<T>>(eps));
  return Variable::fromOp(y, {xVar, weightVar, biasVar}, [x, weight, mean, rstd, N, C](const Tensor& g) {
    const auto [dx, intoX] = normInputGradient(x);
    // Parameter gradients go straight into installed ones (+=) when there are, else into new tensors.
    Tensor dweight = leafGradTarget(1), dbias = leafGradTarget(2);
    const bool intoWeight = dweight.defined(), intoBias = dbias.defined();
    if (!intoWeight) dweight = Tensor::empty({C}, weight.dtype(), x.device());
    if (!intoBias) dbias = Tensor::empty({C}, weight.dtype(), x.device());
    const int64_t scratchSize = x.isCuda() ? kernels::layerNormBackwardScratchSize(N, C) : 0;  // CPU: none
    Tensor scratch = Tensor::empty({scratchSize}, mean.dtype(), x.device());
    MINIDP_LAUNCH_ACTIVATION(x, T, layerNormBackward, g.data<T>(), x.data<T>(), weight.data<ParamOf<T>>(),
                             mean.data<AccumOf<T>>(), rstd.data<AccumOf<T>>(), dx.data<T>(), dweight.data<ParamOf<T>>(),
                             dbias.data<ParamOf<T>>(), scratch.data<AccumOf<T>>(), N, C, intoX, intoWeight, intoBias);
    return std::vector<Tensor>{intoX ? Tensor() : dx, intoWeight ? Tensor() : dweight, intoBias ? Tensor() : dbias};
  });
}

Variable rmsNorm(const Variable& xVar, const Variable& weightVar, double eps) {
  const Tensor& x = xVar.data();
  const Tensor& weight = weightVar.data();
  DType paramType = x.dtype(), statType = x.dtype();  // bf16 x: fp32 weight and statistics
  MINIDP_DISPATCH_ACTIVATION(x.dtype(), T, paramType = dtypeOf<ParamOf<T>>(); statType = dtypeOf<AccumOf<T>>());
  MINIDP_CHECK(weight.dtype() == paramType && weight.device() == x.device(),
               "rmsNorm: " << dtypeName(x.dtype()) << " x on " << deviceName(x.device()) << " needs "
                           << dtypeName(paramType) << " weight there, got " << dtypeName(weight.dtype()) << " on "
                           << deviceName(weight.device()));
  MINIDP_CHECK(x.ndim() >= 1, "rmsNorm: x must have a channel dimension");
  const int64_t C = x.size(-1), N = x.numel() / std::max<int64_t>(C, 1);
  MINIDP_CHECK(weight.shape() == Shape{C}, "rmsNorm: x " << shapeString(x.shape()) << " needs weight [" << C
                                                          << "], got " << shapeString(weight.shape()));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({N}, statType, x.device());
  MINIDP_LAUNCH_ACTIVATION(x, T, rmsNormForward, x.data<T>(), weight.data<ParamOf<T>>(), y.data<T>(),
                           rstd.data<AccumOf<T>>(), N, C, static_cast<AccumOf<T>>(eps));
  return Variable::fromOp(y, {xVar, weightVar}, [x, weight, rstd, N, C](const Tensor& g) {
    const auto [dx, intoX] = normInputGradient(x);
    // The weight's gradient goes straight into an installed one (+=) when there is, else into a new tensor.
    Tensor dweight = leafGradTarget(1);
    const bool intoWeight = dweight.defined();
    if (!intoWeight) dweight = Tensor::empty({C}, weight.dtype(), x.device());
    const int64_t scratchSize = x.isCuda() ? kernels::rmsNormBackwardScratchSize(N, C) : 0;  // CPU: none
    Tensor scratch = Tensor::empty({scratchSize}, rstd.dtype(), x.device());
    MINIDP_LAUNCH_ACTIVATION(x, T, rmsNormBackward, g.data<T>(), x.data<T>(), weight.data<ParamOf<T>>(),
                             rstd.data<AccumOf<T>>(), dx.data<T>(), dweight.data<ParamOf<T>>(),
                             scratch.data<AccumOf<T>>(), N, C, intoX, intoWeight);
    return std::vector<Tensor>{intoX ? Tensor() : dx, intoWeight ? Tensor() : dweight};
  });
}

namespace {

// Sizes of one attention call: B sequences of T = seqLen tokens, H heads of d channels.
struct AttentionShape {
  int64_t B, seqLen, H, d;
  int64_t C() const { return H * d; }
  int64_t matrices() const { return B * H; }
};

// (B, H, T, d) tensors, the layout the batched GEMMs run over.
Tensor headTensor(const AttentionShape& s, const Tensor& like) {
  return Tensor::empty({s.B, s.H, s.seqLen, s.d}, like.dtype(), like.device());
}

// C[m] = alpha * op(A[m]) @ op(B[m]) for every (b, h) matrix m, operands packed one matrix after another.
void headGemm(const AttentionShape& s, bool transA, bool transB, int64_t M, int64_t N, int64_t K, double alpha,
              const Tensor& A, const Tensor& B, Tensor& C) {
  MINIDP_LAUNCH_FLOAT(A, T, gemm, transA, transB, M, N, K, static_cast<T>(alpha), A.data<T>(), M * K, B.data<T>(),
                      K * N, T(0), C.data<T>(), M * N, s.matrices());
}

// Flash attention (kernels/flash_attention.h): reads q, k, v in place from qkv, keeps only y and the row
// logsumexp (B, H, T) for backward, which recomputes the probabilities tile by tile (the cp.async backward in
// bf16 at head dims 80, 96 and 128: the query pass reads the key pass's score gradients back from scratch; none
// where the Hopper backward runs).
Variable flashSelfAttention(const Variable& qkvVar, const AttentionShape& s) {
  const Tensor& qkv = qkvVar.data();
  Tensor y = Tensor::empty({s.B, s.seqLen, s.C()}, qkv.dtype(), qkv.device());  // (B, T, C)
  Tensor lse = Tensor::empty({s.B, s.H, s.seqLen}, DType::F32, qkv.device());   // (B, H, T), fp32 for both
  MINIDP_ON_CUDA(MINIDP_DISPATCH_F32_BF16(
      qkv.dtype(), T,
      kernels::cuda::flashAttentionForward<T>(kernels::packedOperands<T>(qkv.data<T>(), s.H, s.d), y.data<T>(),
                                              lse.data<float>(), s.B, s.seqLen, s.H, s.d, runtime::computeStream())));
  return Variable::fromOp(y, {qkvVar}, [s, qkv, y, lse](const Tensor& g) {
    Tensor dqkv = Tensor::empty(qkv.shape(), g.dtype(), g.device());              // fully written by the kernels
    Tensor rowDot = Tensor::empty({s.B, s.H, s.seqLen}, DType::F32, g.device());  // rowsum(dy * y)
    MINIDP_ON_CUDA(MINIDP_DISPATCH_F32_BF16(g.dtype(), T, {
      // The score gradients the key pass stores for the query pass, where the shape takes them (bf16).
      const size_t bytes = kernels::cuda::flashAttentionBackwardScratchBytes<T>(s.B, s.seqLen, s.H, s.d);
      const Tensor scratch =
          bytes ? Tensor::empty({static_cast<int64_t>(bytes / sizeof(bf16))}, DType::BF16, g.device()) : Tensor();
      kernels::cuda::flashAttentionBackward<T>(
          g.data<T>(), kernels::packedOperands<T>(qkv.data<T>(), s.H, s.d), y.data<T>(), lse.data<float>(),
          rowDot.data<float>(), kernels::packedGradients<T>(dqkv.data<T>(), s.H, s.d), s.B, s.seqLen, s.H, s.d,
          bytes ? scratch.data<bf16>() : nullptr, bytes, runtime::computeStream());
    }));
    return std::vector<Tensor>{dqkv};
  });
}

// The sizes of qkv (B, T, 3C) split into numHeads heads, after checking the shape.
AttentionShape attentionShape(const Tensor& qkv, int numHeads) {
  MINIDP_CHECK(qkv.ndim() == 3 && qkv.size(2) % 3 == 0 && numHeads > 0 && qkv.size(2) / 3 % numHeads == 0,
               "causalSelfAttention: qkv " << shapeString(qkv.shape()) << " must be (B, T, 3C) with C divisible by "
                                           << numHeads << " heads");
  return AttentionShape{qkv.size(0), qkv.size(1), numHeads, qkv.size(2) / 3 / numHeads};
}

}  // namespace

Variable causalSelfAttention(const Variable& qkvVar, int numHeads) {
  const Tensor& qkv = qkvVar.data();
  const AttentionShape s = attentionShape(qkv, numHeads);
  // CUDA F32 and BF16 take the flash kernels where they exist for the head dim. CUDA F64 (the fp64
  // reference tests), other head dims and the CPU keep the materialised path: on the CPU it stays the
  // reference the flash kernels and their CPU twins are tested against, and CPU runs are small.
  if (qkv.isCuda() && qkv.dtype() != DType::F64 && kernels::flashAttentionSupportsHeadDim(s.d)) {
    return flashSelfAttention(qkvVar, s);
  }
  return causalSelfAttentionMaterialized(qkvVar, numHeads);
}

Variable causalSelfAttentionMaterialized(const Variable& qkvVar, int numHeads) {
  const Tensor& qkv = qkvVar.data();
  const AttentionShape s = attentionShape(qkv, numHeads);
  MINIDP_CHECK(qkv.dtype() != DType::BF16, "causalSelfAttention: BF16 needs the CUDA flash kernels, got head dim "
                                               << s.d << " on " << deviceName(qkv.device()));
  const int64_t C = s.C();
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  Tensor q = headTensor(s, qkv), k = headTensor(s, qkv), v = headTensor(s, qkv);  // (B, H, T, d)
  Tensor* parts[3] = {&q, &k, &v};
  for (int p = 0; p < 3; ++p) {
    MINIDP_LAUNCH_FLOAT(qkv, T, splitHeads, qkv.data<T>() + p * C, parts[p]->data<T>(), s.B, s.seqLen, s.H, s.d, 3 * C);
  }
  // (B, H, T, T): the scores, then their causal softmax in place
  Tensor probs = Tensor::empty({s.B, s.H, s.seqLen, s.seqLen}, qkv.dtype(), qkv.device());
  headGemm(s, false, true, s.seqLen, s.seqLen, s.d, scale, q, k, probs);
  MINIDP_LAUNCH_FLOAT(qkv, T, causalSoftmaxForward, probs.data<T>(), probs.data<T>(), s.matrices(), s.seqLen);
  Tensor yHeads = headTensor(s, qkv);
  headGemm(s, false, false, s.seqLen, s.d, s.seqLen, 1.0, probs, v, yHeads);
  Tensor y = Tensor::empty({s.B, s.seqLen, C}, qkv.dtype(), qkv.device());  // (B, T, C)
  MINIDP_LAUNCH_FLOAT(qkv, T, mergeHeads, yHeads.data<T>(), y.data<T>(), s.B, s.seqLen, s.H, s.d, C);

  return Variable::fromOp(y, {qkvVar}, [s, scale, q, k, v, probs](const Tensor& g) {
    const int64_t C = s.C();
    Tensor dyHeads = headTensor(s, g);
    MINIDP_LAUNCH_FLOAT(g, T, splitHeads, g.data<T>(), dyHeads.data<T>(), s.B, s.seqLen, s.H, s.d, C);
    Tensor dscores = Tensor::empty(probs.shape(), g.dtype(), g.device());  // dP, then dS in place
    headGemm(s, false, true, s.seqLen, s.seqLen, s.d, 1.0, dyHeads, v, dscores);
    Tensor dv = headTensor(s, g);
    headGemm(s, true, false, s.seqLen, s.d, s.seqLen, 1.0, probs, dyHeads, dv);
    MINIDP_LAUNCH_FLOAT(g, T, causalSoftmaxBackward, probs.data<T>(), dscores.data<T>(), dscores.data<T>(),
                        s.matrices(), s.seqLen);
    Tensor dq = headTensor(s, g), dk = headTensor(s, g);
    headGemm(s, false, false, s.seqLen, s.d, s.seqLen, scale, dscores, k, dq);
    headGemm(s, true, false, s.seqLen, s.d, s.seqLen, scale, dscores, q, dk);
    Tensor dqkv = Tensor::empty({s.B, s.seqLen, 3 * C}, g.dtype(), g.device());  // fully written below
    const Tensor* parts[3] = {&dq, &dk, &dv};
    for (int p = 0; p < 3; ++p) {
      MINIDP_LAUNCH_FLOAT(g, T, mergeHeads, parts[p]->data<T>(), dqkv.data<T>() + p * C, s.B, s.seqLen, s.H, s.d,
                          3 * C);
    }
    return std::vector<Tensor>{dqkv};
  });
}

}  // namespace minidp::ops
