// The sharding contract: same seed, same global batch for any world size; ranks take contiguous slices.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "base/check.h"
#include "data/sampler.h"

namespace minidp {
namespace {

TEST(EpochSampler, ShardsConcatenateToGlobalBatch) {
  for (int world : {1, 2, 3}) {
    EpochSampler sampler(100, 12, 7);
    for (int step = 0; step < 20; ++step) {
      const std::vector<int64_t> global = sampler.nextGlobalBatch();
      std::vector<int64_t> joined;
      for (int rank = 0; rank < world; ++rank) {
        const std::vector<int64_t> local = EpochSampler::shard(global, rank, world);
        EXPECT_EQ(local.size(), size_t(12 / world));
        joined.insert(joined.end(), local.begin(), local.end());
      }
      EXPECT_EQ(joined, global) << "world " << world << " step " << step;
    }
  }
}

TEST(EpochSampler, SameSeedSameBatchesAcrossRanks) {
  // Each rank owns a sampler; with the same seed all of them must agree at every step.
  EpochSampler a(1000, 30, 42), b(1000, 30, 42), other(1000, 30, 43);
  bool differs = false;
  for (int step = 0; step < 100; ++step) {
    const auto batch = a.nextGlobalBatch();
    EXPECT_EQ(batch, b.nextGlobalBatch()) << step;
    differs |= batch != other.nextGlobalBatch();
  }
  EXPECT_TRUE(differs) << "seeds 42 and 43 gave the same batches";
}

TEST(EpochSampler, EpochIsAPermutationAndTailIsDropped) {
  // 103 examples, batches of 10: 10 batches per epoch, the last 3 indices of each epoch are dropped.
  EpochSampler sampler(103, 10, 5);
  std::vector<std::vector<int64_t>> epochs(2);
  for (int step = 0; step < 20; ++step) {
    const auto batch = sampler.nextGlobalBatch();
    EXPECT_EQ(sampler.epoch(), step / 10);
    epochs[step / 10].insert(epochs[step / 10].end(), batch.begin(), batch.end());
  }
  for (auto& seen : epochs) {
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "an index repeats within an epoch";
    EXPECT_EQ(seen.size(), 100u);
    EXPECT_GE(seen.front(), 0);
    EXPECT_LT(seen.back(), 103);
  }
  EXPECT_NE(epochs[0], epochs[1]) << "epochs should drop different tails";

  // With no tail, one epoch visits every index exactly once.
  EpochSampler whole(60, 12, 9);
  std::vector<int64_t> seen;
  for (int step = 0; step < 5; ++step) {
    const auto batch = whole.nextGlobalBatch();
    seen.insert(seen.end(), batch.begin(), batch.end());
  }
  std::vector<int64_t> expected(60);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_NE(seen, expected) << "the permutation should not be the identity";
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, expected);
}

TEST(EpochSampler, RejectsBadArguments) {
  EXPECT_THROW(EpochSampler(5, 10, 0), Error);
  EXPECT_THROW(EpochSampler(5, 0, 0), Error);
  try {
    EpochSampler::shard(std::vector<int64_t>(10), 0, 3);
    FAIL() << "10 rows over 3 ranks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not split evenly over 3 ranks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(EpochSampler::shard(std::vector<int64_t>(4), 2, 2), Error);
}

TEST(WindowSampler, WindowsInRangeAndTargetsShifted) {
  std::vector<int32_t> tokens(50);
  std::iota(tokens.begin(), tokens.end(), 1000);
  const int context = 8;
  WindowSampler sampler(50, context, 6, 3), same(50, context, 6, 3);
  std::vector<int32_t> inputs(6 * context), targets(6 * context);
  int64_t lo = 50, hi = -1;
  for (int step = 0; step < 200; ++step) {
    const auto offsets = sampler.nextGlobalBatch();
    EXPECT_EQ(offsets, same.nextGlobalBatch());
    for (int64_t o : offsets) lo = std::min(lo, o), hi = std::max(hi, o);
    gatherWindows(tokens, offsets, context, inputs.data(), targets.data());
    for (size_t b = 0; b < offsets.size(); ++b) {
      for (int t = 0; t < context; ++t) {
        ASSERT_EQ(inputs[b * context + t], 1000 + offsets[b] + t);
        ASSERT_EQ(targets[b * context + t], inputs[b * context + t] + 1);
      }
    }
  }
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 50 - context - 1);  // 1200 draws over 42 offsets reach both ends
  EXPECT_THROW(WindowSampler(8, 8, 1, 0), Error);
  EXPECT_THROW(gatherWindows(tokens, {42}, context, inputs.data(), targets.data()), Error);
}

TEST(GatherImages, CopiesRowsAndLabels) {
  ImageDataset ds;
  ds.count = 4;
  ds.rows = 1;
  ds.cols = 2;
  ds.images = {0.0f, 0.1f, 1.0f, 1.1f, 2.0f, 2.1f, 3.0f, 3.1f};
  ds.labels = {10, 11, 12, 13};
  std::vector<float> images(3 * 2);
  std::vector<int32_t> labels(3);
  gatherImages(ds, {3, 0, 2}, images.data(), labels.data());
  EXPECT_EQ(images, (std::vector<float>{3.0f, 3.1f, 0.0f, 0.1f, 2.0f, 2.1f}));
  EXPECT_EQ(labels, (std::vector<int32_t>{13, 10, 12}));
  EXPECT_THROW(gatherImages(ds, {4}, images.data(), labels.data()), Error);
}

}  // namespace
}  // namespace minidp
