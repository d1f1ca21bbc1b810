// Token sampling: temperature and top-k against probabilities worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "train/sampling.h"

namespace minidp {
namespace {

// Probabilities 0.1, 0.2, 0.3, 0.4: candidates in the order 3, 2, 1, 0, cumulative 0.4, 0.7, 0.9, 1.
const std::vector<double> kLogits = {std::log(1.0), std::log(2.0), std::log(3.0), std::log(4.0)};

TEST(Sampling, InvertsTheCumulativeDistribution) {
  EXPECT_EQ(train::sampleToken(kLogits, 1, 0, 0.39), 3);
  EXPECT_EQ(train::sampleToken(kLogits, 1, 0, 0.41), 2);
  EXPECT_EQ(train::sampleToken(kLogits, 1, 0, 0.69), 2);
  EXPECT_EQ(train::sampleToken(kLogits, 1, 0, 0.71), 1);
  EXPECT_EQ(train::sampleToken(kLogits, 1, 0, 0.95), 0);
}

TEST(Sampling, TopKRenormalisesOverTheLargest) {
  // Top 2: 4/7 and 3/7.
  EXPECT_EQ(train::sampleToken(kLogits, 1, 2, 0.57), 3);
  EXPECT_EQ(train::sampleToken(kLogits, 1, 2, 0.58), 2);
  EXPECT_EQ(train::sampleToken(kLogits, 1, 2, 0.999), 2);
  EXPECT_EQ(train::sampleToken(kLogits, 1, 1, 0.999), 3);
}

TEST(Sampling, TemperatureFlattensAndZeroIsGreedy) {
  // Temperature 2: weights sqrt(4, 3, 2, 1), the first cumulative 2 / 6.1463 = 0.32540.
  EXPECT_EQ(train::sampleToken(kLogits, 2, 0, 0.3250), 3);
  EXPECT_EQ(train::sampleToken(kLogits, 2, 0, 0.3258), 2);
  EXPECT_EQ(train::sampleToken(kLogits, 0, 0, 0.99), 3);
  EXPECT_EQ(train::sampleToken({1.0, 5.0, 5.0}, 0, 0, 0.5), 1) << "ties keep the lower index";
}

}  // namespace
}  // namespace minidp
