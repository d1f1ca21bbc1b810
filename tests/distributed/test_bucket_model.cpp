// The bucket cost model (the automatic bucket cap) on synthetic timings: the link fit, the backward profile of a
// step record, the modelled exposed time of a plan (worked by hand), what each hook puts on the link, and the
// cap it picks.
#include <gtest/gtest.h>

#include <memory>

#include "framework/distributed/gradient/bucket_model.h"

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
  // bf16 on the wire (the bf16 hook's cost of two 1 MB fp32 gradients): half the bytes. Bucket 0 ends 3.1,
  // bucket 1 runs 4 to 5.1.
  const std::unique_ptr<CommHook> bf16 = makeCommHook({"bf16"});
  const BucketWire half = [&](const Bucket& b) {
    return bf16->wireCost(std::vector<Shape>(b.params.size(), Shape{512, 512}), DType::F32, 2);
  };
  EXPECT_NEAR(modelledExposedMs(plan, profile, link, half), 1.1, 1e-9);
}

TEST(BucketModel, ABucketCostsItsWiresCollectivesAndBytes) {
  // Four 1 MB parameters ready in reverse at 1..4 ms, backward ends at 4; buckets {3, 2, 1} and {0} (a
  // row-sparse one, say); 0.1 ms + 1 ms per MB. Bucket 0 ends at 3 + 3.1 = 6.1; bucket 1 then costs 1.1 ms
  // (its size) or, sent as two collectives of a quarter MB in all (rows and their ids), 0.45 ms.
  BucketPlan plan;
  plan.buckets = {{DType::F32, 3 * 262144, {3, 2, 1}}, {DType::F32, 262144, {0}}};
  plan.slots.resize(4);
  const BackwardProfile profile{{4, 3, 2, 1}, 4};
  const LinkCost link{0.1, 1.0 / kMb};
  EXPECT_NEAR(modelledExposedMs(plan, profile, link, wholeBucket), 3.2, 1e-9);
  const BucketWire rows = [](const Bucket& b) {
    return b.params == std::vector<int>{0} ? WireCost{2, 0.25 * kMb} : wholeBucket(b);
  };
  EXPECT_NEAR(modelledExposedMs(plan, profile, link, rows), 2.55, 1e-9);
}

TEST(BucketModel, EachHookSaysWhatItPutsOnTheLink) {
  // A (768, 3072) weight, a (768) bias and a (4, 4) matrix, fp32.
  const std::vector<Shape> shapes = {{768, 3072}, {768}, {4, 4}};
  const double numel = 768.0 * 3072 + 768 + 16;
  const WireCost all = makeCommHook({"allreduce"})->wireCost(shapes, DType::F32, 2);
  EXPECT_EQ(all.collectives, 1);
  EXPECT_EQ(all.bytes, 4 * numel);
  EXPECT_EQ(makeCommHook({"allreduce"})->wireCost(shapes, DType::F64, 2).bytes, 8 * numel);
  const WireCost bf16 = makeCommHook({"bf16"})->wireCost(shapes, DType::F32, 2);
  EXPECT_EQ(bf16.collectives, 1);
  EXPECT_EQ(bf16.bytes, 2 * numel);
  // PowerSGD at rank 4: the weight goes as P (768 x 4) in the U|P sum and Q (3072 x 4) in the Q average; the
  // bias (rank 1 would not halve it) and the (4, 4) matrix ((4 + 4) x 4 x 2 >= 16) go as they are, in U.
  CommHookOptions psgd;
  psgd.name = "powersgd";
  psgd.flags.set("powersgd-rank", 4);
  const WireCost low = makeCommHook(psgd)->wireCost(shapes, DType::F32, 2);
  EXPECT_EQ(low.collectives, 2);
  EXPECT_EQ(low.bytes, 4 * (768.0 * 4 + 768 + 16 + 3072.0 * 4));
  // Nothing compressible: U alone, one collective.
  const WireCost dense = makeCommHook(psgd)->wireCost({{768}, {4, 4}}, DType::F32, 2);
  EXPECT_EQ(dense.collectives, 1);
  EXPECT_EQ(dense.bytes, 4 * (768.0 + 16));
  // A (16, 3, 5, 5) convolution kernel is viewed as 16 x 75: (16 + 75) x 4 x 2 < 1200, compressed.
  const WireCost conv = makeCommHook(psgd)->wireCost({{16, 3, 5, 5}}, DType::F32, 3);
  EXPECT_EQ(conv.collectives, 2);
  EXPECT_EQ(conv.bytes, 4 * (16.0 * 4 + 75.0 * 4));
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
  std::vector<CapChoice> choices = modelCaps(params, profile, {0.01, 0.5 / kMb}, caps, 1 << 20, wholeBucket, best);
  ASSERT_EQ(choices.size(), caps.size());
  EXPECT_EQ(choices[best].capBytes, 1u << 20);
  EXPECT_NEAR(choices[0].exposedMs, 0.51, 1e-9);
  // 20 ms per collective: the fewest buckets win.
  choices = modelCaps(params, profile, {20, 0.5 / kMb}, caps, 8 << 20, wholeBucket, best);
  EXPECT_EQ(choices[best].capBytes, 8u << 20);
  for (const CapChoice& c : choices) EXPECT_LE(choices[best].exposedMs, c.exposedMs);
}

}  // namespace
}  // namespace minidp::distributed
