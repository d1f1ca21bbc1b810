#include "framework/nn/embedding.h"

#include "framework/ops/composite.h"

namespace minidp::nn {

Embedding::Embedding(int64_t num, int64_t dim, Rng& rng) {
  MINIDP_CHECK(num > 0 && dim > 0, "Embedding(" << num << ", " << dim << "): sizes must be positive");
  weight = registerParameter("weight", normal({num, dim}, 1.0, rng));
}

Embedding::Embedding(Tensor initial) {
  MINIDP_CHECK(initial.ndim() == 2, "Embedding: the table must be (num, dim), got " << shapeString(initial.shape()));
  weight = registerParameter("weight", std::move(initial));
}

Variable Embedding::forward(const Tensor& index) const { return ops::gatherRows(weight, index); }

}  // namespace minidp::nn
