// Differentiable operations: free functions that compute an output and record a backward lambda.
// Shapes are given as (dims); N is the number of rows, i.e. the product of all leading dimensions.
#pragma once

#include <optional>
#include <string>

#include "framework/autograd/variable.h"
#include "framework/ops/composite.h"  // sub, div, pow, rsqrt, ..., broadcasts, last-dim sums

namespace minidp::ops {

// ---- elementwise (framework/ops/elementwise.cpp) ----
/// a + b, same shape.
Variable add(const Variable& a, const Variable& b);
/// a * b, same shape.
Variable mul(const Variable& a, const Variable& b);
/// x * s.
Variable scale(const Variable& x, double s);
/// max(x, 0).
Variable relu(const Variable& x);
/// GELU, tanh approximation (as GPT-2 and PyTorch's approximate='tanh').
Variable gelu(const Variable& x);
/// x converted to `dtype` (mixed precision: fp32 <-> bf16); backward converts the gradient back.
/// x itself when it already has that dtype.
Variable cast(const Variable& x, DType dtype);

// ---- reductions and shapes (framework/ops/reduce.cpp) ----
/// Sum of all elements, shape [1].
Variable sum(const Variable& x);
/// Mean of all elements, shape [1].
Variable mean(const Variable& x);
/// Same elements, new shape (one extent may be -1). Shares storage in forward.
Variable reshape(const Variable& x, const Shape& shape);
/// The largest entry along `dim` (negative counts from the end): x's shape without `dim`, or with extent 1
/// there when `keepdim`. The first of equal entries is the one chosen; a NaN wins over any number. Backward
/// hands the gradient to the chosen entry, zero to the rest. Float and double, CPU and CUDA; BF16 on CUDA.
Variable max(const Variable& x, int dim, bool keepdim = false);
/// The smallest entry along `dim`, as max.
Variable min(const Variable& x, int dim, bool keepdim = false);
/// The int32 position of max(x, dim, keepdim)'s entry along `dim` (the first of equal ones); no gradient.
Tensor argmax(const Tensor& x, int dim, bool keepdim = false);

// ---- softmax over the last dimension (framework/ops/softmax.cpp) ----
/// exp(x - max) / sum(exp(x - max)) over the last dimension: x (..., C) -> (..., C). The maximum is
/// subtracted first, so no entry overflows. Float and double, CPU and CUDA; BF16 on CUDA with the maximum,
/// the sum and the backward's dot product in fp32, each output rounded once.
Variable softmax(const Variable& x);
/// x - max - log(sum(exp(x - max))) over the last dimension, stable as softmax; same dtypes.
Variable logSoftmax(const Variable& x);

// ---- layout (framework/ops/layout.cpp): float and double, CPU and CUDA; BF16 on CUDA; copies ----
/// The dimensions of x reordered: output dimension i is x's dimension dims[i] (PyTorch's permute; dims a
/// permutation of 0 .. ndim - 1, at most 8). Backward permutes the gradient back. transpose is the special
/// case that swaps the last two.
Variable permute(const Variable& x, const std::vector<int>& dims);
/// x broadcast to `shape` (PyTorch's expand and broadcast_to): x's dimensions line up with shape's trailing
/// ones; an extent 1 of x repeats to shape's, new leading dimensions repeat all of x, and -1 keeps x's
/// extent. The result is a copy. Backward sums the gradient over the repeated dimensions (fp32 for BF16),
/// in a fixed order on both devices.
Variable expand(const Variable& x, const Shape& shape);
// ---- linear algebra (framework/ops/linear.cpp) ----
/// x (..., in) @ weight(out, in)^T + bias(out) -> (..., out). `bias` may be undefined. A bf16 x (CUDA)
/// takes fp32 weight and bias: their bf16 copies (weightCopy: the installed ComputeCopies', else a cast) are
/// kept for backward, y is bf16 and the weight and bias gradients are fp32. Parameter gradients go straight into an
/// installed gradient (leafGradTarget, e.g. a DDP bucket view) with beta = 1 GEMMs.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias);
/// residual + linear(x, weight, bias), residual of the output's shape and x's dtype: the addition is the
/// GEMM's (beta = 1; bf16 on CUDA reads the residual in cuBLASLt's epilogue), so a pre-norm block's residual
/// stream takes no add of its own. residual's gradient is the output's. geluMlp and swigluLinear take one too.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias, const Variable& residual);
/// The transformer MLP: linear(gelu(linear(x, fcWeight, fcBias)), projWeight, projBias), shapes as linear's.
/// bf16 x on CUDA with both biases and a hidden width divisible by 8 runs fused: bias and GELU in the first
/// GEMM's epilogue (the pre-activation saved for backward) and GELU's derivative in the epilogue of the
/// GEMM that forms the hidden gradient; GELU is the tanh form either way. Otherwise the three ops.
Variable geluMlp(const Variable& x, const Variable& fcWeight, const Variable& fcBias, const Variable& projWeight,
                 const Variable& projBias);
Variable geluMlp(const Variable& x, const Variable& fcWeight, const Variable& fcBias, const Variable& projWeight,
                 const Variable& projBias, const Variable& residual);
/// linear(swiglu(gate, up), weight, {}) with the same bits, keeping gate and up but not their gated product:
/// backward recomputes the product in the pass that forms gate's and up's gradients (one write more, no
/// read), which spares the (..., hidden) activation of every SwiGLU MLP between forward and backward.
Variable swigluLinear(const Variable& gate, const Variable& up, const Variable& weight);
Variable swigluLinear(const Variable& gate, const Variable& up, const Variable& weight, const Variable& residual);
/// Swaps the last two dimensions of a (..., M, N) tensor: (..., N, M). Float and double, CPU and CUDA; BF16
/// on CUDA. permute reorders any dimensions.
Variable transpose(const Variable& x);
/// a (..., M, K) @ b (..., K, N) -> (..., M, N); leading dimensions equal (batched).
Variable matmul(const Variable& a, const Variable& b);

// ---- losses (framework/ops/loss.cpp) ----
/// Fused, numerically stable softmax cross-entropy: logits (N, V), targets int32 (N) in [0, V);
/// returns the mean over N as shape [1] (F32 for BF16 logits). A target out of range is an error on the
/// CPU; on CUDA (no host synchronisation to check it) that row's loss and gradient are NaN. When logits
/// is the output of an op (not a leaf), the backward writes the gradient into the logits' own buffer, so
/// no second (N, V) buffer exists: nothing may read those logits after backward (the classifier GEMM's
/// backward does not; a leaf's logits are left intact).
Variable crossEntropy(const Variable& logits, const Tensor& targets);
/// The classifier fused with it: crossEntropy(linear(x, weight, no bias) as (N, V), targets) for x (..., C)
/// with N rows, weight (V, C), targets int32 (N); the mean loss [1] (F32 for a BF16 x, which takes an fp32
/// weight as linear does). The logits live in one (N, Vp) buffer, Vp = V rounded up to 64, so every row is
/// aligned for the tensor-core GEMMs however odd V is; backward overwrites them with their gradient and
/// reads them from there for dx and dweight, and adds dweight into an installed gradient (leafGradTarget).
/// Backward runs once per forward.
Variable linearCrossEntropy(const Variable& x, const Variable& weight, const Tensor& targets);

// ---- transformer ops (framework/ops/transformer.cpp) ----
/// wte[tokens] + wpe[position]: wte (V, C), wpe (Tmax, C), tokens int32 (B, T) with T <= Tmax
/// -> (B, T, C) in `out` (default: the tables' dtype; BF16 from F32 tables under mixed precision).
/// Deterministic backward (sorted segments, no floating-point atomics) that adds into the tables'
/// installed gradients when they have them.
Variable embedding(const Variable& wte, const Variable& wpe, const Tensor& tokens,
                   std::optional<DType> out = std::nullopt);
/// LayerNorm over the last dimension: x (..., C), weight (C), bias (C); BF16 x takes F32 weight and bias
/// (statistics in F32). Parameter gradients add into installed gradients when there are.
Variable layerNorm(const Variable& x, const Variable& weight, const Variable& bias, double eps = 1e-5);
/// RMSNorm over the last dimension in one kernel each way: x * rsqrt(mean(x^2) + eps) * weight (LLaMA's,
/// torch.nn.RMSNorm). weight (C) as layerNorm's: fp32 beside a bf16 x, its gradient fp32.
Variable rmsNorm(const Variable& x, const Variable& weight, double eps = 1e-5);
/// Causal multi-head self-attention core: qkv (B, T, 3C) laid out [q | k | v] along the last dim,
/// heads split as (B, T, H, C/H); softmax(q k^T / sqrt(C/H), causal) v -> (B, T, C).
/// CUDA F32 and BF16 run flash attention (kernels/flash_attention.h) at head dims it supports; the rest
/// runs causalSelfAttentionMaterialized.
Variable causalSelfAttention(const Variable& qkv, int numHeads);
/// The same op through the (B, H, T, T) probabilities (batched GEMMs and a causal softmax), float and
/// double on both devices: the CPU path, the reference of the flash kernels, and the baseline they are
/// benchmarked against.
Variable causalSelfAttentionMaterialized(const Variable& qkv, int numHeads);

// ---- attention over separate q, k, v and rotary embedding (framework/ops/attention.cpp, rotary.cpp) ----
/// Causal attention with grouped key/value heads (GQA): q (B, T, H, d), k and v (B, T, Hkv, d) with Hkv
/// dividing H; query head h attends with key/value head h / (H / Hkv) (PyTorch's repeat_interleave of k
/// and v). softmax(q k^T / sqrt(d), causal) v -> (B, T, H, d). CUDA F32 and BF16 at the flash kernels'
/// head dims run them on q, k and v in place (k and v never repeated; dK and dV summed over each group in
/// the kernel's fp32 accumulators); the rest (the CPU, CUDA F64, other head dims) runs
/// causalAttentionMaterialized.
Variable causalAttention(const Variable& q, const Variable& k, const Variable& v);
/// Which kernels bf16 flash attention takes on `device` (the current GPU for CUDA): "cpu"; on CUDA the attention
/// mode's name (MINIDP_ATTENTION, kernels/flash_attention_sm90.h), then, unless it is "cp.async", "(Hopper
/// kernels)" or "(cp.async kernels: no sm_90a on this GPU)". Reading it checks
/// MINIDP_ATTENTION: an unknown value is an error naming it.
std::string attentionKernels(Device device);
/// The same op through the (B, H, T, T) probabilities, k and v never repeated (the group's heads summed
/// inside the GEMMs); float and double, CPU and CUDA. With Hkv = H it is causalSelfAttentionMaterialized
/// on q, k, v packed, bit for bit.
Variable causalAttentionMaterialized(const Variable& q, const Variable& k, const Variable& v);
/// The same op as causalSelfAttention: k and v repeated to H heads (repeatInterleave), [q | k | v] packed
/// along the last dim (B, T, 3 H d), the output reshaped to (B, T, H, d). Every dtype and head dim
/// causalSelfAttention runs (BF16: CUDA at the flash kernels' head dims). On CUDA at those head dims it
/// gives causalAttention's y and dQ bits, and dK, dV's too with one key/value head per query head (else
/// within their rounding: each head's share is rounded before the group is summed), through copies: the
/// reference of its flash path in tests.
Variable causalAttentionPacked(const Variable& q, const Variable& k, const Variable& v);
/// Rotary position embedding, rotate-half form (GPT-NeoX, Hugging Face LLaMA): x (B, T, H, d), d even;
/// channels i and i + d/2 of a head at position t (0 .. T-1) turn by t / theta^(2i/d) (angles in double,
/// kernels/rotary_kernels.h). Float and double, CPU and CUDA; BF16 on CUDA (each pair turned in fp32, rounded once).
Variable rotary(const Variable& x, double theta);

// ---- slices (framework/ops/slice.cpp): float and double, CPU and CUDA; BF16 on CUDA ----
/// Entries [start, start + length) of dimension `dim` (negative counts from the end), copied.
Variable narrow(const Variable& x, int dim, int64_t start, int64_t length);
/// x cut along `dim` into consecutive pieces of `sizes` (they add up to the extent), each copied.
std::vector<Variable> split(const Variable& x, int dim, const std::vector<int64_t>& sizes);
/// The pieces joined along `dim`; their other extents must be equal.
Variable cat(const std::vector<Variable>& xs, int dim);
/// Each entry of dimension `dim` repeated `repeats` times in a row (PyTorch's repeat_interleave): entry e
/// of x is entries e R .. e R + R - 1 of the result. Backward sums the R copies' gradients in order
/// r = 0 .. R - 1, in fp32 for BF16 (rounded once), deterministic. x itself when repeats is 1.
Variable repeatInterleave(const Variable& x, int dim, int64_t repeats);

}  // namespace minidp::ops
