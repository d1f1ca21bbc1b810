#include "train/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"

namespace minidp::train {

int32_t sampleToken(const std::vector<double>& logits, double temperature, int64_t topK, double u) {
  MINIDP_CHECK(!logits.empty(), "sampling from an empty vocabulary");
  const int64_t vocab = static_cast<int64_t>(logits.size());
  // Candidates by decreasing logit, lower index first among equals.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  const int64_t keep = topK > 0 ? std::min(topK, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  if (temperature <= 0) return order[0];
  std::vector<double> weights(keep);
  for (int64_t i = 0; i < keep; ++i) weights[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  double cumulative = 0;
  for (int64_t i = 0; i < keep; ++i) {
    cumulative += weights[i] / total;
    if (u < cumulative) return order[i];
  }
  return order[keep - 1];  // u within rounding of 1
}

}  // namespace minidp::train
