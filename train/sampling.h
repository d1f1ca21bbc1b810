// Drawing the next token from a row of logits: temperature, top-k, and a uniform number supplied by the
// caller (seeded, so every rank draws the same token).
#pragma once

#include <cstdint>
#include <vector>

namespace minidp::train {

/// The token drawn from softmax(logits / temperature) restricted to the topK largest logits (0: all; ties
/// keep the lower index) by inverting the cumulative distribution at u in [0, 1). temperature 0: argmax.
int32_t sampleToken(const std::vector<double>& logits, double temperature, int64_t topK, double u);

}  // namespace minidp::train
