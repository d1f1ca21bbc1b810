// Deterministic batch sampling for data parallelism: every rank draws the same global batch from the
// same seed, whatever the world size, and rank r of N keeps rows [r*B, (r+1)*B) of the N*B rows.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "data/fashion_mnist.h"

namespace minidp {

/// Global batches of indices into a fixed-size dataset, drawn epoch by epoch without replacement.
class EpochSampler {
 public:
  /// Epoch e visits a Fisher-Yates permutation of [0, datasetSize) seeded with seed + e.
  EpochSampler(int64_t datasetSize, int64_t globalBatch, uint64_t seed);

  /// The next globalBatch indices; when fewer remain, drops that tail and starts the next epoch.
  std::vector<int64_t> nextGlobalBatch();

  /// The epoch the last returned batch came from (0 before the first call).
  int64_t epoch() const { return epoch_; }

  /// Rows [rank*B, (rank+1)*B) of a global batch of world*B rows; throws if world does not divide it.
  static std::vector<int64_t> shard(const std::vector<int64_t>& global, int rank, int world);

 private:
  void startEpoch(int64_t epoch);

  int64_t datasetSize_, globalBatch_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  std::vector<int64_t> order_;  // (datasetSize) permutation of the current epoch
  int64_t cursor_ = 0;          // next unread position in order_
};

/// Global batches of window start offsets into a token stream, drawn with replacement.
class WindowSampler {
 public:
  /// Windows of `context` inputs plus one shifted target; offsets lie in [0, streamLength-context-1].
  WindowSampler(int64_t streamLength, int context, int64_t globalBatch, uint64_t seed);

  /// The next globalBatch offsets o: inputs = tokens[o, o+T), targets = tokens[o+1, o+T+1).
  std::vector<int64_t> nextGlobalBatch();

 private:
  int64_t streamLength_;
  int context_;
  int64_t globalBatch_;
  std::mt19937_64 rng_;
};

/// Copies the examples `idx` into images (idx.size(), rows*cols) and labels (idx.size()).
void gatherImages(const ImageDataset& ds, const std::vector<int64_t>& idx, float* images, int32_t* labels);

/// Copies windows at `offsets` into inputs and targets, each (offsets.size(), context).
void gatherWindows(const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets, int context,
                   int32_t* inputs, int32_t* targets);

}  // namespace minidp
