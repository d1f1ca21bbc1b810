// Bucket planning: reverse registration order, the small first and last buckets, the cap, oversized
// parameters, one dtype per bucket, determinism.
#include <gtest/gtest.h>

#include <random>

#include "framework/distributed/bucket_plan.h"

namespace minidp::distributed {
namespace {

double mib(double bytes) { return bytes / 1048576.0; }

std::vector<ParamInfo> f32Params(const std::vector<int64_t>& numels) {
  std::vector<ParamInfo> out;
  for (size_t i = 0; i < numels.size(); ++i) out.push_back({"p" + std::to_string(i), numels[i], DType::F32});
  return out;
}

TEST(BucketPlan, FirstAndLastBucketsAreSmallTheOthersUseTheCap) {
  // Seven parameters of 400 bytes; the first cap fits two, the cap three.
  const BucketPlan plan = planBuckets(f32Params({100, 100, 100, 100, 100, 100, 100}), mib(1200), mib(800));
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
  const BucketPlan plan = planBuckets(f32Params({30, 40, 20, 50, 200, 10}), mib(4000), mib(400));
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
  const BucketPlan large = planBuckets(f32Params({1000, 10, 10}), mib(8000), mib(400));
  ASSERT_EQ(large.buckets.size(), 2u);
  EXPECT_EQ(large.buckets[0].params, (std::vector<int>{2, 1}));
  EXPECT_EQ(large.buckets[1].params, (std::vector<int>{0}));
}

TEST(BucketPlan, OversizedParameterGetsABucketOfItsOwn) {
  // 200, 1200, 200, 200 bytes; first cap 400, cap 800.
  const BucketPlan plan = planBuckets(f32Params({50, 300, 50, 50}), mib(800), mib(400));
  ASSERT_EQ(plan.buckets.size(), 3u);
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{3, 2}));
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{1}));
  EXPECT_EQ(plan.buckets[2].params, (std::vector<int>{0}));
}

TEST(BucketPlan, LargeFirstParameterIsBucketZeroAlone) {
  const BucketPlan plan = planBuckets(f32Params({10, 10, 1000}), mib(8000), mib(400));
  ASSERT_EQ(plan.buckets.size(), 2u);
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{2}));
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{1, 0}));
}

TEST(BucketPlan, OneDtypePerBucketInCompletionOrder) {
  std::vector<ParamInfo> params = {
      {"a", 100, DType::F64}, {"b", 100, DType::F32}, {"c", 100, DType::F64}, {"d", 100, DType::F32}};
  const BucketPlan plan = planBuckets(params, 1, 1);
  ASSERT_EQ(plan.buckets.size(), 2u);
  // The F32 bucket's earliest parameter (b) comes after the F64 bucket's (a): it is complete first.
  EXPECT_EQ(plan.buckets[0].dtype, DType::F32);
  EXPECT_EQ(plan.buckets[0].params, (std::vector<int>{3, 1}));
  EXPECT_EQ(plan.buckets[1].dtype, DType::F64);
  EXPECT_EQ(plan.buckets[1].params, (std::vector<int>{2, 0}));
  EXPECT_EQ(plan.buckets[1].bytes(), 1600u);
}

TEST(BucketPlan, InvariantsOnManyParametersAndDeterministic) {
  std::mt19937_64 rng(5);
  std::vector<ParamInfo> params;
  for (int i = 0; i < 60; ++i) {
    params.push_back({"p" + std::to_string(i), static_cast<int64_t>(1 + rng() % 3000),
                      rng() % 4 == 0 ? DType::F64 : DType::F32});
  }
  const size_t cap = 16000, firstCap = 4000;
  const BucketPlan plan = planBuckets(params, mib(cap), mib(firstCap));
  std::vector<int> seen(params.size(), 0);
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const Bucket& bucket = plan.buckets[b];
    int64_t offset = 0;
    int previous = static_cast<int>(params.size());
    for (int p : bucket.params) {
      ++seen[p];
      EXPECT_LT(p, previous) << "reverse registration order inside a bucket";
      previous = p;
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
  // Each dtype's last bucket: its first-registered parameters, as many as fit the first cap.
  for (DType dtype : {DType::F32, DType::F64}) {
    int last = -1;
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      if (plan.buckets[b].dtype == dtype) last = static_cast<int>(b);
    }
    ASSERT_GE(last, 0);
    std::vector<int> prefix;  // the dtype's parameters in registration order, while they fit the first cap
    size_t bytes = 0;
    for (size_t p = 0; p < params.size(); ++p) {
      if (params[p].dtype != dtype) continue;
      const size_t size = static_cast<size_t>(params[p].numel) * dtypeSize(dtype);
      if (!prefix.empty() && bytes + size > firstCap) break;
      prefix.insert(prefix.begin(), static_cast<int>(p));
      bytes += size;
    }
    EXPECT_EQ(plan.buckets[last].params, prefix) << dtypeName(dtype);
  }

  const BucketPlan again = planBuckets(params, mib(cap), mib(firstCap));
  EXPECT_EQ(again.describe(), plan.describe());
  ASSERT_EQ(again.buckets.size(), plan.buckets.size());
  for (size_t b = 0; b < plan.buckets.size(); ++b) EXPECT_EQ(again.buckets[b].params, plan.buckets[b].params);
}

TEST(BucketPlan, DescribeNamesBucketsBytesAndParameters) {
  const std::string text = planBuckets(f32Params({100, 100, 100, 100}), mib(800), mib(400)).describe();
  EXPECT_NE(text.find("bucket plan: 3 bucket(s), 1600 bytes"), std::string::npos) << text;
  EXPECT_NE(text.find("bucket 0: F32, 400 bytes, 1 parameter(s): p3"), std::string::npos) << text;
  EXPECT_NE(text.find("bucket 1: F32, 800 bytes, 2 parameter(s): p2 p1"), std::string::npos) << text;
  EXPECT_NE(text.find("bucket 2: F32, 400 bytes, 1 parameter(s): p0"), std::string::npos) << text;
}

TEST(BucketPlan, RejectsNonPositiveCaps) {
  EXPECT_THROW(planBuckets(f32Params({1}), 0, 1), Error);
  EXPECT_THROW(planBuckets(f32Params({1}), 1, -1), Error);
}

}  // namespace
}  // namespace minidp::distributed
