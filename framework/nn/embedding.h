// Embedding: a lookup table of vectors, as torch.nn.Embedding.
#pragma once

#include "framework/nn/init.h"
#include "framework/nn/module.h"

namespace minidp::nn {

/// weight (num, dim), N(0, 1) at start as torch.nn.Embedding; forward(index int32 (...)) -> (..., dim).
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Rng& rng);
  /// A table with the given initial values (num, dim): for models with their own initialisation.
  explicit Embedding(Tensor weight);
  /// Rows of weight for each index; an index outside [0, num) is an error on the CPU, NaN on CUDA.
  Variable forward(const Tensor& index) const;
  Variable weight;
};

}  // namespace minidp::nn
