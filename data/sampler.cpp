#include "data/sampler.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace minidp {

namespace {

// Uniform in [0, bound) by rejection: draws below 2^64 mod bound are redrawn, so every residue is
// equally likely. std::uniform_int_distribution is avoided because it differs between standard libraries.
uint64_t uniformBelow(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  uint64_t r = rng();
  while (r < threshold) r = rng();
  return r % bound;
}

}  // namespace

EpochSampler::EpochSampler(int64_t datasetSize, int64_t globalBatch, uint64_t seed)
    : datasetSize_(datasetSize), globalBatch_(globalBatch), seed_(seed) {
  MINIDP_CHECK(globalBatch > 0, "global batch must be positive, got " << globalBatch);
  MINIDP_CHECK(datasetSize >= globalBatch,
               "dataset of " << datasetSize << " examples cannot fill a global batch of " << globalBatch);
  startEpoch(0);
}

void EpochSampler::startEpoch(int64_t epoch) {
  epoch_ = epoch;
  cursor_ = 0;
  order_.resize(datasetSize_);
  std::iota(order_.begin(), order_.end(), int64_t{0});
  std::mt19937_64 rng(seed_ + static_cast<uint64_t>(epoch));
  for (int64_t i = datasetSize_ - 1; i > 0; --i) {
    std::swap(order_[i], order_[uniformBelow(rng, static_cast<uint64_t>(i) + 1)]);
  }
}

std::vector<int64_t> EpochSampler::nextGlobalBatch() {
  if (cursor_ + globalBatch_ > datasetSize_) startEpoch(epoch_ + 1);
  std::vector<int64_t> batch(order_.begin() + cursor_, order_.begin() + cursor_ + globalBatch_);
  cursor_ += globalBatch_;
  return batch;
}

std::vector<int64_t> EpochSampler::shard(const std::vector<int64_t>& global, int rank, int world) {
  MINIDP_CHECK(world > 0 && rank >= 0 && rank < world, "rank " << rank << " is outside a world of " << world);
  const int64_t total = static_cast<int64_t>(global.size());
  MINIDP_CHECK(total % world == 0,
               "global batch of " << total << " rows does not split evenly over " << world << " ranks");
  const int64_t local = total / world;
  return std::vector<int64_t>(global.begin() + rank * local, global.begin() + (rank + 1) * local);
}

WindowSampler::WindowSampler(int64_t streamLength, int context, int64_t globalBatch, uint64_t seed)
    : streamLength_(streamLength), context_(context), globalBatch_(globalBatch), rng_(seed) {
  MINIDP_CHECK(context > 0, "context must be positive, got " << context);
  MINIDP_CHECK(globalBatch > 0, "global batch must be positive, got " << globalBatch);
  MINIDP_CHECK(streamLength > context, "token stream of " << streamLength << " tokens is too short for a window of "
                                                          << context << " inputs plus one target");
}

std::vector<int64_t> WindowSampler::nextGlobalBatch() {
  std::vector<int64_t> offsets(globalBatch_);
  const uint64_t choices = static_cast<uint64_t>(streamLength_ - context_);
  for (auto& o : offsets) o = static_cast<int64_t>(uniformBelow(rng_, choices));
  return offsets;
}

void gatherImages(const ImageDataset& ds, const std::vector<int64_t>& idx, float* images, int32_t* labels) {
  const int64_t pixels = ds.rows * ds.cols;
  for (size_t b = 0; b < idx.size(); ++b) {
    const int64_t i = idx[b];
    MINIDP_CHECK(i >= 0 && i < ds.count, "example index " << i << " is outside a dataset of " << ds.count);
    std::copy_n(ds.images.begin() + i * pixels, pixels, images + b * pixels);
    labels[b] = ds.labels[i];
  }
}

void gatherWindows(const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets, int context,
                   int32_t* inputs, int32_t* targets) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (size_t b = 0; b < offsets.size(); ++b) {
    const int64_t o = offsets[b];
    MINIDP_CHECK(o >= 0 && o + context < n,
                 "window at " << o << " of " << context << "+1 tokens runs past a stream of " << n);
    std::copy_n(tokens.begin() + o, context, inputs + b * context);
    std::copy_n(tokens.begin() + o + 1, context, targets + b * context);
  }
}

}  // namespace minidp
