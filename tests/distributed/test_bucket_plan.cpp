// Bucket planning: reverse registration order or a given (observed ready) order, the small first and
// last buckets, the cap, oversized parameters, one dtype per bucket, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "framework/distributed/gradient/bucket_plan.h"

namespace minidp::distributed {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

std::vector<ParamInfo> f32Params(const std::vector<int64_t>& numels) {
  std::vector<ParamInfo> out;
  for (size_t i = 0; i < numels.size(); ++i) out.push_back({"p" + std::to_string(i), numels[i], DType::F32});
  return out;
}

TEST(BucketPlan, FirstAndLastBucketsAreSmallTheOthersUseTheCap) {
  // Seven parameters of 400 bytes; the first cap fits two, the cap three.
  const BucketPlan plan = planBuckets(f32Params({100, 100, 100, 100, 100, 100, 100}), 1200, 800);
  ASSERT_EQ(plan.buckets.size(), 3u);
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{6, 5}));
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{4, 3, 2}));
  EXPECT_EQ(plan.buckets[2].params, (std::vector<int>{1, 0}));
  EXPECT_EQ(plan.slots[6].bucket, 0);
  EXPECT_EQ(plan.slots[6].offset, 0);
  EXPECT_EQ(plan.slots[5].offset, 100);
  EXPECT_EQ(plan.slots[2].bucket, 1);
  EXPECT_EQ(plan.slots[2].offset, 200);
  EXPECT_EQ(plan.slots[0].bucket, 2);
  EXPECT_EQ(plan.slots[0].offset, 100);
  EXPECT_EQ(plan.buckets[1].bytes(), 1200u);
  EXPECT_EQ(plan.buckets[2].bytes(), 800u);
}

TEST(BucketPlan, LastBucketHoldsTheFirstRegisteredUnderTheSmallCap) {
  // 120, 160, 80, 200, 800, 40 bytes; first cap 400, cap 4000. Forward from p0: p0 + p1 + p2 = 360 bytes
  // fit the first cap, p3 would not (560), though it would fit the cap.
  const BucketPlan plan = planBuckets(f32Params({30, 40, 20, 50, 200, 10}), 4000, 400);
  ASSERT_EQ(plan.buckets.size(), 3u);
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{5}));
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{4, 3}));
  EXPECT_EQ(plan.buckets[2].params, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(plan.buckets[2].bytes(), 360u);
  EXPECT_EQ(plan.slots[2].offset, 0);
  EXPECT_EQ(plan.slots[1].offset, 20);
  EXPECT_EQ(plan.slots[0].offset, 60);
  EXPECT_EQ(plan.slots[0].bucket, 2);

  // A first parameter larger than the first cap is the last bucket alone.
  const BucketPlan large = planBuckets(f32Params({1000, 10, 10}), 8000, 400);
  ASSERT_EQ(large.buckets.size(), 2u);
  EXPECT_EQ(large.buckets[0].params, (std::vector<int>{2, 1}));
  EXPECT_EQ(large.buckets[1].params, (std::vector<int>{0}));
}

TEST(BucketPlan, SoloParameterGetsABucketOfItsOwnWhereTheWalkReachesIt) {
  // Five parameters of 40 bytes, first cap 100, cap 1000. p0 (GPT's wte, walked last) would join the last
  // bucket; solo, it comes after it, alone.
  std::vector<ParamInfo> params = f32Params({10, 10, 10, 10, 10});
  params[0].solo = true;
  const BucketPlan plan = planBuckets(params, 1000, 100);
  ASSERT_EQ(plan.buckets.size(), 3u) << plan.describe();
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{4, 3}));
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{2, 1}));
  EXPECT_EQ(plan.buckets[2].params, (std::vector<int>{0}));
  EXPECT_EQ(plan.slots[0].offset, 0);
  // In the middle of the walk, it closes the open bucket; the walk goes on in a new one.
  params[0].solo = false;
  params[3].solo = true;
  const BucketPlan middle = planBuckets(params, 1000, 100);
  ASSERT_EQ(middle.buckets.size(), 4u) << middle.describe();
  EXPECT_EQ(middle.buckets[0].params, (std::vector<int>{4}));
  EXPECT_EQ(middle.buckets[1].params, (std::vector<int>{3}));
  EXPECT_EQ(middle.buckets[2].params, (std::vector<int>{2}));
  EXPECT_EQ(middle.buckets[3].params, (std::vector<int>{1, 0}));
  EXPECT_EQ(middle.slots[3].bucket, 1);
  EXPECT_EQ(middle.slots[2].offset, 0);
}

TEST(BucketPlan, OversizedParameterGetsABucketOfItsOwn) {
  // 200, 1200, 200, 200 bytes; first cap 400, cap 800.
  const BucketPlan plan = planBuckets(f32Params({50, 300, 50, 50}), 800, 400);
  ASSERT_EQ(plan.buckets.size(), 3u);
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{3, 2}));
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{1}));
  EXPECT_EQ(plan.buckets[2].params, (std::vector<int>{0}));
}

TEST(BucketPlan, LargeFirstParameterIsBucketZeroAlone) {
  const BucketPlan plan = planBuckets(f32Params({10, 10, 1000}), 8000, 400);
  ASSERT_EQ(plan.buckets.size(), 2u);
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{2}));
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{1, 0}));
}

TEST(BucketPlan, OneDtypePerBucketInCompletionOrder) {
  std::vector<ParamInfo> params = {
      {"a", 100, DType::F64}, {"b", 100, DType::F32}, {"c", 100, DType::F64}, {"d", 100, DType::F32}};
  const BucketPlan plan = planBuckets(params, kMiB, kMiB);
  ASSERT_EQ(plan.buckets.size(), 2u);
  // The F32 bucket's earliest parameter (b) comes after the F64 bucket's (a): it is complete first.
  EXPECT_EQ(plan.buckets[0].dtype, DType::F32);
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{3, 1}));
  EXPECT_EQ(plan.buckets[1].dtype, DType::F64);
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{2, 0}));
  EXPECT_EQ(plan.buckets[1].bytes(), 1600u);
}

// The rules, checked on `plan` of `params` walked in `order` (registration indices).
void checkInvariants(const std::vector<ParamInfo>& params, const std::vector<int>& order, const BucketPlan& plan,
                     size_t cap, size_t firstCap) {
  std::vector<int> position(params.size());
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = static_cast<int>(k);
  std::vector<int> seen(params.size(), 0);
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const Bucket& bucket = plan.buckets[b];
    int64_t offset = 0;
    int previous = -1;
    for (int p : bucket.params) {
      ++seen[p];
      EXPECT_GT(position[p], previous) << "walk order inside a bucket";
      previous = position[p];
      EXPECT_EQ(params[p].dtype, bucket.dtype);
      EXPECT_EQ(plan.slots[p].bucket, static_cast<int>(b));
      EXPECT_EQ(plan.slots[p].offset, offset);
      EXPECT_EQ(plan.slots[p].numel, params[p].numel);
      offset += params[p].numel;
    }
    EXPECT_EQ(bucket.numel, offset);
    if (bucket.params.size() > 1) EXPECT_LE(bucket.bytes(), cap) << "bucket " << b;
  }
  for (size_t p = 0; p < params.size(); ++p) EXPECT_EQ(seen[p], 1) << "parameter " << p;
  if (plan.buckets[0].params.size() > 1) EXPECT_LE(plan.buckets[0].bytes(), firstCap);
  // Each dtype's last bucket: the end of the walk, as many of its parameters as fit the first cap.
  for (DType dtype : {DType::F32, DType::F64}) {
    int last = -1;
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      if (plan.buckets[b].dtype == dtype) last = static_cast<int>(b);
    }
    ASSERT_GE(last, 0);
    std::vector<int> suffix;  // the dtype's parameters back from the end of the walk, while they fit
    size_t bytes = 0;
    for (auto k = order.rbegin(); k != order.rend(); ++k) {
      if (params[*k].dtype != dtype) continue;
      const size_t size = static_cast<size_t>(params[*k].numel) * dtypeSize(dtype);
      if (!suffix.empty() && bytes + size > firstCap) break;
      suffix.insert(suffix.begin(), *k);
      bytes += size;
    }
    EXPECT_EQ(plan.buckets[last].params, suffix) << dtypeName(dtype);
  }
}

TEST(BucketPlan, InvariantsOnManyParametersAndDeterministic) {
  std::mt19937_64 rng(5);
  std::vector<ParamInfo> params;
  for (int i = 0; i < 60; ++i) {
    params.push_back(
        {"p" + std::to_string(i), static_cast<int64_t>(1 + rng() % 3000), rng() % 4 == 0 ? DType::F64 : DType::F32});
  }
  const size_t cap = 16000, firstCap = 4000;
  std::vector<int> reverse(params.size());
  for (size_t k = 0; k < reverse.size(); ++k) reverse[k] = static_cast<int>(params.size() - 1 - k);
  const BucketPlan plan = planBuckets(params, cap, firstCap);
  checkInvariants(params, reverse, plan, cap, firstCap);
  std::vector<int> shuffled = reverse;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  const BucketPlan inOrder = planBucketsInOrder(params, shuffled, cap, firstCap);
  checkInvariants(params, shuffled, inOrder, cap, firstCap);

  const BucketPlan again = planBuckets(params, cap, firstCap);
  EXPECT_EQ(again.describe(), plan.describe());
  ASSERT_EQ(again.buckets.size(), plan.buckets.size());
  for (size_t b = 0; b < plan.buckets.size(); ++b) EXPECT_EQ(again.buckets[b].params, plan.buckets[b].params);
}

TEST(BucketPlan, InOrderWalksTheGivenOrderWithTheSameCaps) {
  // Seven parameters of 400 bytes; the first cap fits two, the cap three. The last bucket is the end of
  // the order (3, 4), bucket 0 its start.
  const BucketPlan plan =
      planBucketsInOrder(f32Params({100, 100, 100, 100, 100, 100, 100}), {2, 5, 0, 6, 1, 3, 4}, 1200, 800);
  ASSERT_EQ(plan.buckets.size(), 3u);
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{2, 5}));
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{0, 6, 1}));
  EXPECT_EQ(plan.buckets[2].params, (std::vector<int>{3, 4}));
  EXPECT_EQ(plan.slots[5].bucket, 0);
  EXPECT_EQ(plan.slots[5].offset, 100);
  EXPECT_EQ(plan.slots[1].bucket, 1);
  EXPECT_EQ(plan.slots[1].offset, 200);
  EXPECT_EQ(plan.slots[4].bucket, 2);
  EXPECT_EQ(plan.slots[4].offset, 100);
}

TEST(BucketPlan, InOrderLastBucketsOfSeveralDtypesFollowTheOrder) {
  std::vector<ParamInfo> params = {
      {"a", 100, DType::F64}, {"b", 100, DType::F32}, {"c", 100, DType::F64}, {"d", 100, DType::F32}};
  // The F64 bucket's final parameter (c) comes before the F32 bucket's (b) in the order: it is first,
  // unlike in reverse registration order (OneDtypePerBucketInCompletionOrder).
  const BucketPlan plan = planBucketsInOrder(params, {0, 3, 2, 1}, kMiB, kMiB);
  ASSERT_EQ(plan.buckets.size(), 2u);
  EXPECT_EQ(plan.buckets[0].dtype, DType::F64);
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{0, 2}));
  EXPECT_EQ(plan.buckets[1].dtype, DType::F32);
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{3, 1}));
}

TEST(BucketPlan, InOrderRejectsAnOrderThatIsNotAPermutation) {
  const std::vector<ParamInfo> params = f32Params({1, 1, 1});
  for (const std::vector<int>& order : std::vector<std::vector<int>>{{0, 0, 1}, {0, 1}, {0, 1, 3}, {-1, 0, 1}}) {
    EXPECT_THROW(planBucketsInOrder(params, order, kMiB, kMiB), Error) << ::testing::PrintToString(order);
  }
}

TEST(BucketPlan, DescribeNamesBucketsBytesAndParameters) {
  const std::string text = planBuckets(f32Params({100, 100, 100, 100}), 800, 400).describe();
  EXPECT_NE(text.find("bucket plan: 3 bucket(s), 1600 bytes"), std::string::npos) << text;
  EXPECT_NE(text.find("bucket 0: F32, 400 bytes, 1 parameter(s): p3"), std::string::npos) << text;
  EXPECT_NE(text.find("bucket 1: F32, 800 bytes, 2 parameter(s): p2 p1"), std::string::npos) << text;
  EXPECT_NE(text.find("bucket 2: F32, 400 bytes, 1 parameter(s): p0"), std::string::npos) << text;
}

TEST(BucketPlan, RejectsNonPositiveCaps) {
  EXPECT_THROW(planBuckets(f32Params({1}), 0, 1), Error);
  EXPECT_THROW(planBuckets(f32Params({1}), 1, 0), Error);
}

TEST(BucketPlan, MibToBytesRoundsToTheNearestByte) {
  EXPECT_EQ(mibToBytes(25), 26214400u);
  EXPECT_EQ(mibToBytes(0.02), 20972u);  // 20971.52 bytes
  EXPECT_EQ(mibToBytes(0), 0u);
  EXPECT_DOUBLE_EQ(bytesToMib(3 * kMiB / 2), 1.5);
}

// ZeRO-3's units: a block of a module list each, the embeddings before the first block with the first, the
// final norm and head with the last; buckets from the last unit to the first, reverse registration inside.
TEST(BucketPlan, UnitsAreBlocksWithTheEmbeddingsFirstAndTheHeadLast) {
  EXPECT_EQ(unitOf("h.3.attn.c_attn.weight"), "h.3");
  EXPECT_EQ(unitOf("model.layers.12.mlp.up_proj.weight"), "model.layers.12");
  EXPECT_EQ(unitOf("layers.0.bias"), "layers.0");
  EXPECT_EQ(unitOf("wte.weight"), "");
  const std::vector<std::string> names = {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.mlp.c_fc.weight",
                                          "h.1.ln_1.weight", "ln_f.weight", "lm_head.weight"};
  std::vector<ParamInfo> params;
  for (size_t i = 0; i < names.size(); ++i) params.push_back(ParamInfo{names[i], static_cast<int64_t>(10 + i), DType::F32});
  const BucketPlan plan = planUnits(params);
  ASSERT_EQ(plan.buckets.size(), 3u) << plan.describe();
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{6, 5, 4}));  // h.1 with the final norm and head
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{3, 2}));     // h.0
  EXPECT_EQ(plan.buckets[2].params, (std::vector<int>{1, 0}));     // the embeddings
  EXPECT_EQ(plan.slots[5].offset, 16);                             // after lm_head's 16 elements
  EXPECT_EQ(plan.buckets[0].numel, 16 + 15 + 14);
  // A model of blocks only (the MLP): a unit per block, the first block is unit 0.
  const BucketPlan mlp = planUnits({{"layers.0.weight", 4}, {"layers.0.bias", 2}, {"layers.1.weight", 4}});
  ASSERT_EQ(mlp.buckets.size(), 2u);
  EXPECT_EQ(mlp.buckets[1].params, (std::vector<int>{1, 0}));
  // No blocks at all: one unit.
  EXPECT_EQ(planUnits({{"weight", 4}, {"bias", 2}}).buckets.size(), 1u);
}

}  // namespace
}  // namespace minidp::distributed
