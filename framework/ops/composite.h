// Composable differentiable ops: enough elementwise, broadcast and last-dimension reductions that a layer
// such as RMSNorm or SwiGLU is a few lines of ops, on the CPU and on CUDA, float32 and float64, and bf16 on
// CUDA (mixed precision: each kernel loads bf16 into fp32, computes, rounds once to bf16; sums accumulate in
// fp32 in a fixed order). Another dtype, or bf16 on the CPU, is an error naming the op.
// Shapes: x (..., C); "rows" are the leading dimensions. Included by framework/ops/ops.h.
#pragma once

#include "framework/autograd/variable.h"

namespace minidp::ops {

// ---- elementwise, same shape ----
/// a - b.
Variable sub(const Variable& a, const Variable& b);
/// a / b.
Variable div(const Variable& a, const Variable& b);
/// -x.
Variable neg(const Variable& x);
/// x + s.
Variable addScalar(const Variable& x, double s);
/// x * x, one kernel each way (mul(x, x) of one variable runs it: its backward is g 2 x, not g x + x g).
Variable square(const Variable& x);
/// x ^ p for a scalar exponent p (x > 0 unless p is a whole number).
Variable pow(const Variable& x, double p);
/// sqrt(x), x > 0.
Variable sqrt(const Variable& x);
/// 1 / sqrt(x), x > 0.
Variable rsqrt(const Variable& x);
/// e^x.
Variable exp(const Variable& x);
/// 1 / (1 + e^-x).
Variable sigmoid(const Variable& x);
/// x * sigmoid(x) (SiLU, the gate of SwiGLU).
Variable silu(const Variable& x);
/// silu(gate) * up, SwiGLU's gated product between its projections, in one kernel each way (same shapes and
/// dtype): the value of mul(silu(gate), up), with one rounding where that takes two.
Variable swiglu(const Variable& gate, const Variable& up);

// ---- broadcast: x (..., C) with y of x's trailing dimensions ((C), or (T, H, d) against (B, T, H, d)),
// repeated over the leading ones, or y (..., 1), repeated over the last ----
// y has x's dtype; beside a BF16 x it may be F32 (an fp32 master parameter such as RMSNorm's weight, as
// linear and layerNorm take theirs): the output is BF16 and y's gradient F32, summed in fp32.
/// x + y, y broadcast over x's leading dimensions (y of its trailing ones) or its last (y (..., 1)).
Variable addBroadcast(const Variable& x, const Variable& y);
/// x * y, y broadcast as in addBroadcast.
Variable mulBroadcast(const Variable& x, const Variable& y);

// ---- reductions over the last dimension ----
/// Sum over the last dimension: (..., C) -> (..., 1) with keepdim, (...) without.
Variable sumLastDim(const Variable& x, bool keepdim = true);
/// Mean over the last dimension, shapes as sumLastDim.
Variable meanLastDim(const Variable& x, bool keepdim = true);

// ---- lookup ----
/// table[index]: table (V, C), index int32 (...) -> (..., C) in the table's dtype. Deterministic backward (no
/// atomics; a BF16 table's gradient summed in fp32). An fp32 parameter table under mixed precision: cast the
/// output to BF16 (ops::cast), whose backward hands the table an fp32 gradient.
Variable gatherRows(const Variable& table, const Tensor& index);

}  // namespace minidp::ops
