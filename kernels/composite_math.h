// Elementwise math of the composable ops: the op codes (UnaryOp, BinaryOp, Broadcast) and what each computes,
// shared by the CUDA kernels and their CPU twins (kernels/composite_kernels.h).
#pragma once

#include <cmath>
#include <cstdint>

#include "base/host_device.h"

namespace minidp::kernels {

/// y = f(x; p) for one element; p is the exponent of Pow and the addend of AddScalar, unused otherwise.
enum class UnaryOp { Neg, Exp, Sqrt, Rsqrt, Pow, AddScalar, Sigmoid, Silu, Square };
/// out = a op b; Right returns b (a broadcast copy: `a` may be null).
enum class BinaryOp { Add, Sub, Mul, Div, Right };
/// How b (of a binary map) lines up with a (rows, cols): Same (rows, cols), Columns (cols) repeated over
/// the rows (a (C) tensor), Rows (rows) repeated over the columns (a (..., 1) tensor).
enum class Broadcast { Same, Columns, Rows };

template <typename T>
MINIDP_HOST_DEVICE inline T sigmoidValue(T x) {
  return T(1) / (T(1) + exp(-x));
}

/// f(x; p) of a UnaryOp.
template <typename T>
MINIDP_HOST_DEVICE inline T unaryValue(UnaryOp op, T x, T p) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return exp(x);
    case UnaryOp::Sqrt: return sqrt(x);
    case UnaryOp::Rsqrt: return T(1) / sqrt(x);
    case UnaryOp::Pow: return pow(x, p);
    case UnaryOp::AddScalar: return x + p;
    case UnaryOp::Sigmoid: return sigmoidValue(x);
    case UnaryOp::Silu: return x * sigmoidValue(x);
    case UnaryOp::Square: return x * x;
  }
  return x;
}

/// f'(x; p) of a UnaryOp.
template <typename T>
MINIDP_HOST_DEVICE inline T unaryDerivative(UnaryOp op, T x, T p) {
  switch (op) {
    case UnaryOp::Neg: return T(-1);
    case UnaryOp::Exp: return exp(x);
    case UnaryOp::Sqrt: return T(0.5) / sqrt(x);
    case UnaryOp::Rsqrt: return T(-0.5) / (x * sqrt(x));
    case UnaryOp::Pow: return p * pow(x, p - T(1));
    case UnaryOp::AddScalar: return T(1);
    case UnaryOp::Sigmoid: {
      const T s = sigmoidValue(x);
      return s * (T(1) - s);
    }
    case UnaryOp::Silu: {
      const T s = sigmoidValue(x);
      return s * (T(1) + x * (T(1) - s));
    }
    case UnaryOp::Square: return T(2) * x;
  }
  return T(0);
}

/// silu(a) b, and its partial derivatives times g: (g b silu'(a), g silu(a)), as the composed silu and mul
/// compute them (g b first, then times silu'(a)).
template <typename T>
MINIDP_HOST_DEVICE inline T swigluValue(T a, T b) {
  return unaryValue(UnaryOp::Silu, a, T(0)) * b;
}
template <typename T>
MINIDP_HOST_DEVICE inline void swigluGradients(T a, T b, T g, T& da, T& db) {
  da = g * b * unaryDerivative(UnaryOp::Silu, a, T(0));
  db = g * unaryValue(UnaryOp::Silu, a, T(0));
}

/// a op b of a BinaryOp.
template <typename T>
MINIDP_HOST_DEVICE inline T binaryValue(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Right: return b;
  }
  return b;
}

/// The index into b of element i of a (rows, cols).
MINIDP_HOST_DEVICE inline int64_t broadcastIndex(Broadcast broadcast, int64_t i, int64_t cols) {
  return broadcast == Broadcast::Same ? i : broadcast == Broadcast::Columns ? i % cols : i / cols;
}

}  // namespace minidp::kernels
