// A fused op with kernels of its own, added outside minidp: relu(x)^2 (the "squared ReLU" of Primer,
// So et al. 2021). One forward kernel and one backward kernel instead of three ops. It has a CPU kernel
// only: it builds and runs on the CPU in any minidp build, and on a CUDA tensor it fails with an error
// naming the op ("op 'squaredRelu' has no CUDA kernel"). docs/extending.md shows how to give it one.
#pragma once

#include "framework/autograd/variable.h"

namespace custom {

/// max(x, 0)^2, float32 or float64.
minidp::Variable squaredRelu(const minidp::Variable& x);

}  // namespace custom
