// Slices along one dimension: narrow, split and cat, each a strided block copy (kernels/slice_kernels.h) whose
// backward is the opposite copy; repeatInterleave, whose backward sums the copies. F32, F64, and BF16 on
// CUDA.
#include <numeric>

#include "framework/ops/dims.h"
#include "framework/ops/ops.h"
#include "framework/tensor/dispatch.h"
#include "kernels/slice_kernels.h"

namespace minidp::ops {

namespace {

// Copies `length` entries of dimension dim: src's from srcStart into dst's from dstStart (extents differ).
void copySlice(const Tensor& src, const Along& s, int64_t srcStart, Tensor& dst, const Along& d, int64_t dstStart,
               int64_t length) {
  MINIDP_LAUNCH_ACTIVATION(src, T, copyBlocks, src.data<T>() + srcStart * s.inner, s.extent * s.inner,
                           dst.data<T>() + dstStart * d.inner, d.extent * d.inner, s.outer, length * s.inner);
}

}  // namespace

Variable narrow(const Variable& xVar, int dim, int64_t start, int64_t length) {
  const Tensor& x = xVar.data();
  checkActivation("narrow", x);
  dim = normalizedDim("narrow", x.shape(), dim);
  const Along in = along(x.shape(), dim);
  MINIDP_CHECK(start >= 0 && length >= 0 && start + length <= in.extent,
               "narrow: [" << start << ", " << start + length << ") outside dim " << dim << " of extent " << in.extent);
  Shape shape = x.shape();
  shape[dim] = length;
  const Along out = along(shape, dim);
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  copySlice(x, in, start, y, out, 0, length);
  const Shape xShape = x.shape();
  return Variable::fromOp(y, {xVar}, [xShape, in, out, start, length](const Tensor& g) {
    Tensor dx = Tensor::zeros(xShape, g.dtype(), g.device());
    copySlice(g, out, 0, dx, in, start, length);
    return std::vector<Tensor>{dx};
  });
}

std::vector<Variable> split(const Variable& x, int dim, const std::vector<int64_t>& sizes) {
  dim = normalizedDim("split", x.shape(), dim);
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  MINIDP_CHECK(total == x.shape()[dim],
               "split: sizes add up to " << total << ", dim " << dim << " of " << shapeString(x.shape()));
  std::vector<Variable> pieces;
  int64_t start = 0;
  for (int64_t size : sizes) {
    pieces.push_back(narrow(x, dim, start, size));
    start += size;
  }
  return pieces;
}

Variable cat(const std::vector<Variable>& xs, int dim) {
  MINIDP_CHECK(!xs.empty(), "cat: no tensors");
  const Tensor& first = xs.front().data();
  checkActivation("cat", first);
  dim = normalizedDim("cat", first.shape(), dim);
  Shape shape = first.shape();
  shape[dim] = 0;
  for (const Variable& v : xs) {
    checkSame("cat", first, v.data());
    Shape other = v.shape();
    MINIDP_CHECK(other.size() == shape.size(), "cat: shapes " << shapeString(first.shape()) << " and "
                                                              << shapeString(other) << " differ in rank");
    other[dim] = 0;
    Shape mine = first.shape();
    mine[dim] = 0;
    MINIDP_CHECK(other == mine, "cat: shapes " << shapeString(first.shape()) << " and " << shapeString(v.shape())
                                               << " differ outside dim " << dim);
    shape[dim] += v.shape()[dim];
  }
  Tensor y = Tensor::empty(shape, first.dtype(), first.device());
  const Along out = along(shape, dim);
  std::vector<Along> ins;
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (const Variable& v : xs) {
    ins.push_back(along(v.shape(), dim));
    starts.push_back(start);
    copySlice(v.data(), ins.back(), 0, y, out, start, ins.back().extent);
    start += ins.back().extent;
  }
  std::vector<Shape> shapes;
  for (const Variable& v : xs) shapes.push_back(v.shape());
  return Variable::fromOp(y, xs, [shapes, ins, starts, out](const Tensor& g) {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor dx = Tensor::empty(shapes[i], g.dtype(), g.device());
      copySlice(g, out, starts[i], dx, ins[i], 0, ins[i].extent);
      grads.push_back(dx);
    }
    return grads;
  });
}

Variable repeatInterleave(const Variable& xVar, int dim, int64_t repeats) {
  const Tensor& x = xVar.data();
  checkActivation("repeatInterleave", x);
  dim = normalizedDim("repeatInterleave", x.shape(), dim);
  MINIDP_CHECK(repeats >= 1, "repeatInterleave: repeats " << repeats << " must be at least 1");
  if (repeats == 1) return xVar;
  const Along a = along(x.shape(), dim);
  const int64_t blocks = a.outer * a.extent;  // each of inner elements, written `repeats` times in a row
  Shape shape = x.shape();
  shape[dim] *= repeats;
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  MINIDP_LAUNCH_ACTIVATION(x, T, repeatBlocks, x.data<T>(), y.data<T>(), blocks, repeats, a.inner);
  const Shape xShape = x.shape();
  return Variable::fromOp(y, {xVar}, [xShape, blocks, repeats, a](const Tensor& g) {
    Tensor dx = Tensor::empty(xShape, g.dtype(), g.device());
    MINIDP_LAUNCH_ACTIVATION(g, T, sumRepeatedBlocks, g.data<T>(), dx.data<T>(), blocks, repeats, a.inner);
    return std::vector<Tensor>{dx};
  });
}

}  // namespace minidp::ops
