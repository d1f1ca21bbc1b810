// Differentiable operations: free functions that compute an output and record a backward lambda.
// Shapes are given as (dims); N is the number of rows, i.e. the product of all leading dimensions.
#pragma once

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

// ---- reductions and shapes (framework/ops/reduce.cpp) ----
/// Sum of all elements, shape [1].
Variable sum(const Variable& x);
/// Mean of all elements, shape [1].
Variable mean(const Variable& x);
/// Same elements, new shape (one extent may be -1). Shares storage in forward.
Variable reshape(const Variable& x, const Shape& shape);
// ---- linear algebra (framework/ops/linear.cpp) ----
/// x (..., in) @ weight(out, in)^T + bias(out) -> (..., out). `bias` may be undefined.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias);
/// Swaps the last two dimensions of a (..., M, N) tensor: (..., N, M).
Variable transpose(const Variable& x);
/// a (..., M, K) @ b (..., K, N) -> (..., M, N); leading dimensions equal (batched).
Variable matmul(const Variable& a, const Variable& b);

// ---- losses (framework/ops/loss.cpp) ----
/// Fused, numerically stable softmax cross-entropy: logits (N, V), targets int32 (N) in [0, V);
/// returns the mean over N as shape [1]. A target out of range is an error on the CPU; on CUDA (no host
/// synchronisation to check it) that row's loss and gradient are NaN.
Variable crossEntropy(const Variable& logits, const Tensor& targets);

// ---- transformer ops (framework/ops/transformer.cpp) ----
/// wte[tokens] + wpe[position]: wte (V, C), wpe (Tmax, C), tokens int32 (B, T) with T <= Tmax
/// -> (B, T, C). Deterministic backward (no floating-point atomics).
Variable embedding(const Variable& wte, const Variable& wpe, const Tensor& tokens);
/// LayerNorm over the last dimension: x (..., C), weight (C), bias (C).
Variable layerNorm(const Variable& x, const Variable& weight, const Variable& bias, double eps = 1e-5);
/// Causal multi-head self-attention core: qkv (B, T, 3C) laid out [q | k | v] along the last dim,
/// heads split as (B, T, H, C/H); softmax(q k^T / sqrt(C/H), causal) v -> (B, T, C).
Variable causalSelfAttention(const Variable& qkv, int numHeads);

}  // namespace minidp::ops
