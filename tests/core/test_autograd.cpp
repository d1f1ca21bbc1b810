// The autograd engine: accumulation, the grad-ready hook contract, deep graphs, elementwise gradients.
#include <gtest/gtest.h>

#include <vector>

#include "framework/ops/ops.h"
#include "framework/tensor/tensor_math.h"
#include "framework/testing/gradcheck.h"

namespace minidp {
namespace {

using testing::gradcheck;
using testing::randomTensor;

Variable leaf(const Shape& shape, uint64_t seed) { return Variable(randomTensor(shape, seed), true); }

TEST(Autograd, GradientsAccumulateUntilZeroed) {
  Variable x = leaf({3}, 1);
  for (int i = 0; i < 2; ++i) ops::sum(ops::scale(x, 2.0)).backward();
  for (double g : x.grad().toVector<double>()) EXPECT_EQ(g, 4.0);
  x.zeroGrad();
  for (double g : x.grad().toVector<double>()) EXPECT_EQ(g, 0.0);
}

// An op that adds 3 into the gradient `target(0)` offers for its input (leafGradTarget or heldGradTarget)
// when there is one, counting the times, and returns the gradient (3) otherwise.
Variable addsThreeVia(Tensor (*target)(size_t), const Variable& x, int& added) {
  return Variable::fromOp(x.data().clone(), {x}, [target, &added](const Tensor& g) {
    Tensor into = target(0);
    Tensor three = ops::full(g.shape(), 3.0, g.dtype(), g.device());
    if (!into.defined()) return std::vector<Tensor>{three};
    ++added;
    ops::addInPlace(into, three);
    return std::vector<Tensor>{Tensor()};
  });
}

Tensor leafTarget(size_t index) { return leafGradTarget(index); }
Variable addsThreeDirectly(const Variable& x, int& direct) { return addsThreeVia(leafTarget, x, direct); }

// A non-leaf with three contributions, two of them one tensor (an add's backward passes its gradient to
// both inputs): accumulating in place into a shared gradient would change the other copy and give 4w.
TEST(Autograd, SharedGradientsAreNotAccumulatedInPlace) {
  Variable x = leaf({5}, 2), w = leaf({5}, 3);
  Variable h = ops::scale(x, 1.0);  // a non-leaf, consumed three times
  Variable z = ops::add(ops::add(h, h), h);
  ops::sum(ops::mul(z, w)).backward();
  const std::vector<double> wv = w.data().toVector<double>(), gx = x.grad().toVector<double>();
  for (size_t i = 0; i < wv.size(); ++i) EXPECT_EQ(gx[i], 3 * wv[i]);
  EXPECT_EQ(w.grad().toVector<double>(), ops::scale(x.data(), 3.0).toVector<double>());
}

TEST(Autograd, OpsAccumulateIntoAnInstalledLeafGradient) {
  Variable x = leaf({3}, 4);
  int direct = 0, fired = 0;
  x.addGradReadyHook([&](Variable&) { ++fired; });
  // First backward: no gradient installed yet, so the op returns it and the engine accumulates.
  ops::sum(addsThreeDirectly(x, direct)).backward();
  EXPECT_EQ(direct, 0);
  // Then the installed gradient (as the reducer's bucket view would be) receives the contribution itself.
  Tensor installed = x.grad();
  ops::sum(ops::add(addsThreeDirectly(x, direct), ops::scale(x, 2.0))).backward();
  EXPECT_EQ(direct, 1);
  EXPECT_EQ(fired, 2);
  EXPECT_TRUE(x.grad().sharesStorage(installed));
  for (double g : x.grad().toVector<double>()) EXPECT_EQ(g, 3.0 + 3.0 + 2.0);
  EXPECT_THROW(leafGradTarget(0), Error);  // outside a backward
}

// An op that writes 3 into its input's installed gradient: overwriting it where leafGradTarget says it holds
// zeros, adding otherwise; records what it was told.
Variable writesThree(const Variable& x, std::vector<bool>& told) {
  return Variable::fromOp(x.data().clone(), {x}, [&told](const Tensor& g) {
    bool zero = false;
    Tensor target = leafGradTarget(0, &zero);
    told.push_back(zero);
    const Tensor three = ops::full(g.shape(), 3.0, g.dtype(), g.device());
    if (zero) {
      target.copyFrom(three);
    } else {
      ops::addInPlace(target, three);
    }
    return std::vector<Tensor>{Tensor()};
  });
}

// markGradZero lets the first contribution overwrite the gradient, once: the promise is deliberately false
// here (the gradient holds 7), so an overwrite shows as 3 instead of 10.
TEST(Autograd, AGradientMarkedZeroIsOverwrittenByTheFirstContributionOnly) {
  Variable x = leaf({3}, 8);
  x.setGrad(ops::full({3}, 7.0, DType::F64, Device::CPU));
  EXPECT_FALSE(x.gradKnownZero());
  x.markGradZero();
  std::vector<bool> told;
  ops::sum(writesThree(x, told)).backward();  // overwrites: 3
  ops::sum(writesThree(x, told)).backward();  // the promise ended: 3 + 3
  EXPECT_EQ(told, (std::vector<bool>{true, false}));
  for (double g : x.grad().toVector<double>()) EXPECT_EQ(g, 6.0);
  // A contribution the engine adds ends it too.
  x.markGradZero();
  ops::sum(ops::scale(x, 2.0)).backward();
  EXPECT_FALSE(x.gradKnownZero());
  // setGrad ends it.
  x.markGradZero();
  x.setGrad(ops::full({3}, 1.0, DType::F64, Device::CPU));
  EXPECT_FALSE(x.gradKnownZero());
  // Two contributions in one backward: only the first overwrites.
  x.markGradZero();
  ops::sum(ops::add(writesThree(x, told), writesThree(x, told))).backward();
  EXPECT_EQ(told, (std::vector<bool>{true, false, true, false}));
  for (double g : x.grad().toVector<double>()) EXPECT_EQ(g, 6.0);
  EXPECT_THROW(Variable(ops::full({1}, 0.0, DType::F64, Device::CPU), true).markGradZero(), Error);
}

// A leaf an op takes at two inputs gets two contributions from it, in an order the op chooses: never told
// zeros.
TEST(Autograd, ALeafTakenTwiceByOneOpIsNeverToldZeros) {
  Variable x = leaf({2}, 9);
  x.setGrad(ops::full({2}, 0.0, DType::F64, Device::CPU));
  x.markGradZero();
  std::vector<bool> told;
  Variable y = Variable::fromOp(ops::add(x.data(), x.data()), {x, x}, [&told](const Tensor& g) {
    for (size_t i = 0; i < 2; ++i) {
      bool zero = true;
      Tensor target = leafGradTarget(i, &zero);
      told.push_back(zero);
      ops::addInPlace(target, g);
    }
    return std::vector<Tensor>{Tensor(), Tensor()};
  });
  ops::sum(y).backward();
  EXPECT_EQ(told, (std::vector<bool>{false, false}));
  for (double g : x.grad().toVector<double>()) EXPECT_EQ(g, 2.0);
}

Variable addsThreeIntoHeld(const Variable& x, int& added) { return addsThreeVia(heldGradTarget, x, added); }

// The residual pattern: a non-leaf h feeds two ops, and the one whose backward runs second adds into the
// gradient the first gave (here 2, from scale). Backward runs the consumers in reverse order of the
// depth-first walk over the graph, so the op listed first in the add runs last.
TEST(Autograd, OpsAddIntoTheGradientHeldForANonLeaf) {
  Variable x = leaf({4}, 5);
  int added = 0;
  Variable h = ops::scale(x, 1.0);
  ops::sum(ops::add(addsThreeIntoHeld(h, added), ops::scale(h, 2.0))).backward();
  EXPECT_EQ(added, 1);  // scale's gradient was held alone: added into
  for (double g : x.grad().toVector<double>()) EXPECT_EQ(g, 5.0);
  // Run first, nothing is held yet: the op returns its gradient and the engine adds.
  x.zeroGrad();
  Variable h2 = ops::scale(x, 1.0);
  ops::sum(ops::add(ops::scale(h2, 2.0), addsThreeIntoHeld(h2, added))).backward();
  EXPECT_EQ(added, 1);
  for (double g : x.grad().toVector<double>()) EXPECT_EQ(g, 5.0);
  // A held gradient that is also another node's (an add passes one tensor to both inputs) is not offered.
  x.zeroGrad();
  Variable y = leaf({4}, 6);
  Variable h3 = ops::scale(x, 1.0);
  ops::sum(ops::add(addsThreeIntoHeld(h3, added), ops::add(h3, y))).backward();
  EXPECT_EQ(added, 1);
  for (double g : x.grad().toVector<double>()) EXPECT_EQ(g, 4.0);
  // A leaf is never offered (its installed gradient is leafGradTarget's).
  x.zeroGrad();
  ops::sum(addsThreeIntoHeld(x, added)).backward();
  EXPECT_EQ(added, 1);
  EXPECT_THROW(heldGradTarget(0), Error);  // outside a backward
}

TEST(Autograd, HookFiresOnceAfterLastContribution) {
  // y = sum(x * x + x + other * x): x has three consumer edges (mul(x, x) is one: square); the hook must see
  // the full gradient 2x + 1 + other.
  Variable x = leaf({4}, 2);
  Variable other = leaf({4}, 3);
  int fired = 0;
  std::vector<double> seen;
  x.addGradReadyHook([&](Variable& v) {
    ++fired;
    seen = v.grad().toVector<double>();
  });
  int otherFired = 0;
  other.addGradReadyHook([&](Variable&) { ++otherFired; });
  Variable y = ops::sum(ops::add(ops::add(ops::mul(x, x), x), ops::mul(other, x)));
  y.backward();
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(otherFired, 1);
  std::vector<double> xv = x.data().toVector<double>(), ov = other.data().toVector<double>();
  ASSERT_EQ(seen.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(seen[i], 2 * xv[i] + 1 + ov[i]);
}

TEST(Autograd, OneNodeTakingAVariableTwiceGivesBothGradients) {
  // add(x, x) and sub(x, x) record x as both inputs: two edges of one node. The gradients are 2 and 0 (plus
  // the 1 of the last term), and the hook fires once, after both edges.
  Variable x = leaf({4}, 6);
  int fired = 0;
  std::vector<double> seen;
  x.addGradReadyHook([&](Variable& v) {
    ++fired;
    seen = v.grad().toVector<double>();
  });
  ops::sum(ops::add(ops::add(x, x), ops::add(ops::sub(x, x), x))).backward();
  EXPECT_EQ(fired, 1);
  ASSERT_EQ(seen.size(), 4u);
  for (double g : seen) EXPECT_EQ(g, 2.0 + 0.0 + 1.0);
}

TEST(Autograd, HookOrderFollowsGraphAndFiresAgainNextBackward) {
  // a is used early in the chain, b late: b's gradient is final first.
  Variable a = leaf({2}, 4), b = leaf({2}, 5);
  std::vector<char> order;
  a.addGradReadyHook([&](Variable&) { order.push_back('a'); });
  b.addGradReadyHook([&](Variable&) { order.push_back('b'); });
  for (int step = 0; step < 2; ++step) ops::sum(ops::mul(ops::relu(ops::scale(a, 3.0)), b)).backward();
  EXPECT_EQ(order, (std::vector<char>{'b', 'a', 'b', 'a'}));
}

TEST(Autograd, UnusedParameterGetsNoHook) {
  Variable used = leaf({2}, 6), unused = leaf({2}, 7);
  bool fired = false;
  unused.addGradReadyHook([&](Variable&) { fired = true; });
  ops::sum(used).backward();
  EXPECT_FALSE(fired);
  EXPECT_FALSE(unused.grad().defined());
}

TEST(Autograd, DeepChainDoesNotOverflowTheStack) {
  Variable x = leaf({1}, 8);
  Variable y = x;
  for (int i = 0; i < 200000; ++i) y = ops::scale(y, 1.0);
  ops::sum(y).backward();
  EXPECT_DOUBLE_EQ(x.grad().toVector<double>()[0], 1.0);
}

TEST(Autograd, SecondBackwardThroughAFreedGraphIsAnError) {
  Variable x = leaf({3}, 20);
  Variable y = ops::sum(ops::mul(x, x));
  y.backward();
  EXPECT_THROW(y.backward(), Error);
  Variable z = ops::sum(ops::scale(x, 1.0));
  Variable w = ops::scale(z, 2.0);
  z.backward();
  EXPECT_THROW(w.backward(), Error);  // w's graph runs through z's freed part
}

TEST(Autograd, BackwardFromAScalarLeafSetsItsGradient) {
  Variable x = leaf({1}, 21);
  int fired = 0;
  x.addGradReadyHook([&](Variable&) { ++fired; });
  x.backward();
  EXPECT_EQ(x.grad().toVector<double>()[0], 1.0);
  EXPECT_EQ(fired, 1);
}

TEST(Autograd, NoGradRecordsNothing) {
  Variable x = leaf({2}, 9);
  NoGradGuard guard;
  Variable y = ops::scale(x, 2.0);
  EXPECT_FALSE(y.requiresGrad());
}

TEST(Gradcheck, Elementwise) {
  std::string report;
  EXPECT_LT(gradcheck([](auto& in) { return ops::add(in[0], in[1]); }, {leaf({3, 4}, 10), leaf({3, 4}, 11)}, &report),
            1e-7)
      << report;
  EXPECT_LT(gradcheck([](auto& in) { return ops::mul(in[0], in[1]); }, {leaf({3, 4}, 12), leaf({3, 4}, 13)}, &report),
            1e-7)
      << report;
  EXPECT_LT(gradcheck([](auto& in) { return ops::scale(in[0], -1.5); }, {leaf({5}, 14)}, &report), 1e-7) << report;
  EXPECT_LT(gradcheck([](auto& in) { return ops::relu(in[0]); }, {leaf({4, 5}, 15)}, &report), 1e-7) << report;
  EXPECT_LT(gradcheck([](auto& in) { return ops::gelu(in[0]); }, {Variable(randomTensor({4, 5}, 16, -3.0, 3.0), true)},
                      &report),
            1e-7)
      << report;
}

}  // namespace
}  // namespace minidp
