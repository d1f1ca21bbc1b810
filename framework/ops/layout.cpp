// Layout changes that copy: permute and expand, both a strided gather (kernels/layout_kernels.h); permute's
// backward is the inverse permute, expand's a strided sum over the repeated dimensions.
#include <string>

#include "framework/ops/ops.h"
#include "framework/tensor/dispatch.h"
#include "kernels/layout_kernels.h"

namespace minidp::ops {

namespace {

using kernels::StridedLayout;

// Row-major element strides of a contiguous tensor of `shape`.
std::vector<int64_t> contiguousStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

void checkRank(const char* op, size_t ndim) {
  MINIDP_CHECK(ndim <= static_cast<size_t>(kernels::kMaxLayoutDims),
               op << ": " << ndim << " dimensions, at most " << kernels::kMaxLayoutDims);
}

Tensor permuted(const Tensor& x, const std::vector<int>& dims) {
  const std::vector<int64_t> strides = contiguousStrides(x.shape());
  StridedLayout layout;
  layout.ndim = x.ndim();
  Shape shape(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    shape[i] = layout.size[i] = x.size(dims[i]);
    layout.stride[i] = strides[dims[i]];
  }
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  MINIDP_LAUNCH_ACTIVATION(x, T, gatherStrided, x.data<T>(), y.data<T>(), layout, y.numel());
  return y;
}

}  // namespace

Variable permute(const Variable& v, const std::vector<int>& dims) {
  const Tensor& x = v.data();
  checkActivation("permute", x);
  checkRank("permute", dims.size());
  const auto notPermutation = [&x] {
    return "permute: dims must be a permutation of 0 .. " + std::to_string(x.ndim() - 1) + " for shape " +
           shapeString(x.shape());
  };
  MINIDP_CHECK(dims.size() == static_cast<size_t>(x.ndim()), notPermutation());
  std::vector<int> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int d = dims[i];
    MINIDP_CHECK(d >= 0 && d < x.ndim() && inverse[d] < 0, notPermutation());
    inverse[d] = static_cast<int>(i);
  }
  return Variable::fromOp(permuted(x, dims), {v},
                          [inverse](const Tensor& g) { return std::vector<Tensor>{permuted(g, inverse)}; });
}

Variable expand(const Variable& v, const Shape& target) {
  const Tensor& x = v.data();
  checkActivation("expand", x);
  checkRank("expand", target.size());
  const int n = static_cast<int>(target.size()), lead = n - x.ndim();
  MINIDP_CHECK(lead >= 0,
               "expand: shape " << shapeString(target) << " has fewer dimensions than " << shapeString(x.shape()));
  const std::vector<int64_t> xStrides = contiguousStrides(x.shape());
  // Forward: the gather reads x with stride 0 along repeated dimensions. Backward: the gradient (of the
  // target shape) summed over them: `kept` runs over x's entries, `repeated` over the copies of one.
  StridedLayout gather, kept, repeated;
  gather.ndim = kept.ndim = repeated.ndim = n;
  Shape shape(n);
  for (int d = 0; d < n; ++d) {
    const int64_t have = d < lead ? 1 : x.size(d - lead);
    const int64_t want = target[d] == -1 && d >= lead ? have : target[d];
    MINIDP_CHECK(want >= 0 && (have == want || have == 1),
                 "expand: " << shapeString(x.shape()) << " cannot be broadcast to " << shapeString(target));
    const bool repeats = have != want;
    shape[d] = gather.size[d] = want;
    gather.stride[d] = repeats || d < lead ? 0 : xStrides[d - lead];
    kept.size[d] = repeats ? 1 : want;
    repeated.size[d] = repeats ? want : 1;
  }
  const std::vector<int64_t> gStrides = contiguousStrides(shape);
  for (int d = 0; d < n; ++d) kept.stride[d] = repeated.stride[d] = gStrides[d];
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  MINIDP_LAUNCH_ACTIVATION(x, T, gatherStrided, x.data<T>(), y.data<T>(), gather, y.numel());
  const Shape original = x.shape();
  int64_t copies = 1;  // of each entry of x
  for (int d = 0; d < n; ++d) copies *= repeated.size[d];
  return Variable::fromOp(y, {v}, [original, kept, repeated, copies](const Tensor& g) {
    Tensor dx = Tensor::empty(original, g.dtype(), g.device());
    MINIDP_LAUNCH_ACTIVATION(g, T, sumStrided, g.data<T>(), dx.data<T>(), kept, dx.numel(), repeated, copies);
    return std::vector<Tensor>{dx};
  });
}

}  // namespace minidp::ops
