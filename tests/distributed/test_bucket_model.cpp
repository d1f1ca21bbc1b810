// The bucket cost model (--bucket-mb auto) on synthetic timings: the link fit, the backward profile of a
// step record, the modelled exposed time of a plan (worked by hand), and the cap it picks.
#include <gtest/gtest.h>

#include "framework/distributed/bucket_model.h"

namespace minidp::distributed {
namespace {

constexpr double kMb = 1048576.0;

TEST(BucketModel, FitsLatencyAndBandwidth) {
  // 0.05 ms + 1 ms per 10 MB, at four sizes.
  std::vector<std::pair<double, double>> samples;
  for (double mb : {0.25, 1.0, 8.0, 32.0}) samples.emplace_back(mb * kMb, 0.05 + 0.1 * mb);
  const LinkCost cost = fitLinkCost(samples);
  EXPECT_NEAR(cost.alphaMs, 0.05, 1e-9);
  EXPECT_NEAR(cost.msPerByte * kMb, 0.1, 1e-9);
  EXPECT_NEAR(cost.ms(4 * kMb), 0.45, 1e-9);
  // Noise that would give a negative latency gives none.
  EXPECT_EQ(fitLinkCost({{1 * kMb, 0.09}, {2 * kMb, 0.2}}).alphaMs, 0.0);
  EXPECT_THROW(fitLinkCost({{kMb, 1.0}, {kMb, 2.0}}), Error);
}

TEST(BucketModel, ProfileFromTheLayerSpansOfAStep) {
  runtime::StepRecord step;
  step.phases = {{"forward", 0, 10}, {"backward", 10, 20}, {"finalize", 20, 21}};
  step.layers = {{"h.1", 10, 13}, {"h.0", 13, 18}};
  const BackwardProfile p = profileFromStep(step, {"h.0.w", "h.1.w", "h.1.b", "ln_f.weight"});
  EXPECT_EQ(p.endMs, 10);
  EXPECT_EQ(p.readyMs, (std::vector<double>{8, 3, 3, 10}));
}

TEST(BucketModel, ExposedTimeOfAPlanWorkedByHand) {
  // Four 1 MB parameters, ready in reverse at 1, 2, 3, 4 ms; backward ends at 4 ms. Buckets {3, 2} and
  // {1, 0}; 0.1 ms + 1 ms per MB. Bucket 0: ready at 2, ends 4.1. Bucket 1: ready at 4, starts at 4.1,
  // ends 6.2: 2.2 ms after backward.
  BucketPlan plan;
  plan.buckets = {{DType::F32, 2 * 262144, {3, 2}}, {DType::F32, 2 * 262144, {1, 0}}};
  plan.slots.resize(4);
  const BackwardProfile profile{{4, 3, 2, 1}, 4};
  const LinkCost link{0.1, 1.0 / kMb};
  EXPECT_NEAR(modelledExposedMs(plan, profile, link), 2.2, 1e-9);
  // bf16 on the wire: half the bytes. Bucket 0 ends 3.1, bucket 1 runs 4 to 5.1.
  EXPECT_NEAR(modelledExposedMs(plan, profile, link, 0.5), 1.1, 1e-9);
}

TEST(BucketModel, ARowSparseBucketCostsItsModelledBytes) {
  // Four 1 MB parameters ready in reverse at 1..4 ms, backward ends at 4; buckets {3, 2, 1} and {0} (the
  // row-sparse one); 0.1 ms + 1 ms per MB. Bucket 0 ends at 3 + 3.1 = 6.1; bucket 1 then costs 1.1 ms
  // (its size) or, modelled as a quarter MB (its rows), 0.35 ms.
  BucketPlan plan;
  plan.buckets = {{DType::F32, 3 * 262144, {3, 2, 1}}, {DType::F32, 262144, {0}}};
  plan.slots.resize(4);
  const BackwardProfile profile{{4, 3, 2, 1}, 4};
  const LinkCost link{0.1, 1.0 / kMb};
  std::vector<ParamInfo> params(4, ParamInfo{"p", 262144, DType::F32});
  EXPECT_NEAR(modelledExposedMs(plan, profile, link, 1, params), 3.2, 1e-9);
  params[0].solo = true;
  params[0].modelledBytes = 0.25 * kMb;
  EXPECT_NEAR(modelledExposedMs(plan, profile, link, 1, params), 2.45, 1e-9);
  // A modelled size counts only for a bucket of its own: here parameter 3 shares bucket 0.
  params[3].modelledBytes = 0.25 * kMb;
  EXPECT_NEAR(modelledExposedMs(plan, profile, link, 1, params), 2.45, 1e-9);
}

TEST(BucketModel, SmallCapsOnAFastLinkLargeCapsOnASlowOne) {
  // Eight 1 MB parameters, ready one per ms in reverse registration order; backward ends at 8 ms.
  std::vector<ParamInfo> params;
  BackwardProfile profile;
  for (int i = 0; i < 8; ++i) {
    params.push_back({"p" + std::to_string(i), 262144, DType::F32});
    profile.readyMs.push_back(8 - i);
  }
  profile.endMs = 8;
  const std::vector<size_t> caps = {1 << 20, 2 << 20, 4 << 20, 8 << 20};
  size_t best = 0;
  // Negligible latency: a bucket per parameter hides all but the last one (0.51 ms).
  std::vector<CapChoice> choices = modelCaps(params, profile, {0.01, 0.5 / kMb}, caps, 1 << 20, 1, best);
  ASSERT_EQ(choices.size(), caps.size());
  EXPECT_EQ(choices[best].capBytes, 1u << 20);
  EXPECT_NEAR(choices[0].exposedMs, 0.51, 1e-9);
  // 20 ms per collective: the fewest buckets win.
  choices = modelCaps(params, profile, {20, 0.5 / kMb}, caps, 8 << 20, 1, best);
  EXPECT_EQ(choices[best].capBytes, 8u << 20);
  for (const CapChoice& c : choices) EXPECT_LE(choices[best].exposedMs, c.exposedMs);
}

}  // namespace
}  // namespace minidp::distributed
