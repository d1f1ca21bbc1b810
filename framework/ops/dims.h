// Dimension arithmetic the shape-aware ops share (slices, reductions along a dimension, layout changes).
#pragma once

#include "framework/tensor/tensor.h"

namespace minidp::ops {

/// A contiguous tensor seen along dimension `dim` as (outer, extent, inner).
struct Along {
  int64_t outer = 1, extent = 1, inner = 1;
};

/// `dim` in [0, ndim) (a negative one counts from the end); an error naming `op` when it is outside `shape`.
inline int normalizedDim(const char* op, const Shape& shape, int dim) {
  const int n = static_cast<int>(shape.size());
  MINIDP_CHECK(dim >= -n && dim < n, op << ": dim " << dim << " outside a tensor of shape " << shapeString(shape));
  return dim < 0 ? dim + n : dim;
}

/// `shape` along `dim` (normalised).
inline Along along(const Shape& shape, int dim) {
  Along a;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (i < dim) a.outer *= shape[i];
    if (i > dim) a.inner *= shape[i];
  }
  a.extent = shape[dim];
  return a;
}

}  // namespace minidp::ops
