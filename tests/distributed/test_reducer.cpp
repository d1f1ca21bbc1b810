// The reducer with a recording communicator: launch order is bucket order whatever the ready order,
// gradients are views into the buckets, errors name the parameter, overlap off launches at finalize,
// DDP's hooks launch during backward, and DDP's rebuild moves the buckets to rank 0's observed ready
// order once, keeping the gradients.
#include <gtest/gtest.h>

#include "framework/distributed/gradient/ddp.h"
#include "framework/distributed/gradient/reducer.h"
#include "framework/ops/ops.h"
#include "framework/testing/gradcheck.h"

namespace minidp::distributed {
namespace {

/// Records the tags of the all-reduces it is asked for; they complete at once. allGather answers its own
/// bytes for both ranks; with `rank0` (another instance that already made the same calls), it plays
/// rank 1 and answers rank0's bytes of the same call as rank 0's.
class RecordingCommunicator : public Communicator {
 public:
  explicit RecordingCommunicator(const RecordingCommunicator* rank0 = nullptr) : rank0_(rank0) {}
  int rank() const override { return rank0_ ? 1 : 0; }
  int worldSize() const override { return 2; }
  std::string name() const override { return "recording"; }
  std::string describe() const override { return "recording"; }
  bool supports(Device) const override { return true; }
  std::shared_ptr<Work> allReduce(Tensor buffer, ReduceOp, const std::string& tag) override {
    launched.push_back(tag);
    return std::make_shared<CompletedWork>(tag, buffer.nbytes());
  }
  std::shared_ptr<Work> reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) override {
    return allReduce(buffer, op, tag);
  }
  std::shared_ptr<Work> allGather(Tensor input, Tensor, const std::string& tag) override {
    launched.push_back(tag);
    return std::make_shared<CompletedWork>(tag, input.nbytes());
  }
  std::shared_ptr<Work> allGatherShards(Tensor buffer, const std::string& tag) override {
    launched.push_back(tag);
    return std::make_shared<CompletedWork>(tag, buffer.nbytes());
  }
  std::shared_ptr<Work> enqueue(const std::string& tag, Tensor, const std::function<void(cudaStream_t)>& task) override {
    task(nullptr);
    return std::make_shared<CompletedWork>(tag, 0);
  }
  void broadcast(Tensor&, int) override {}
  std::vector<std::string> allGather(const std::string& bytes) override {
    gathered.push_back(bytes);
    if (!rank0_) return {bytes, bytes};
    return {rank0_->gathered.at(gathered.size() - 1), bytes};
  }
  void abort() noexcept override {}
  std::vector<std::string> launched;
  std::vector<std::string> gathered;

 private:
  const RecordingCommunicator* rank0_;
};

using Tags = std::vector<std::string>;

nn::NamedParameters makeParams(int count, int64_t numel) {
  nn::NamedParameters params;
  for (int i = 0; i < count; ++i) {
    params.emplace_back("w" + std::to_string(i), Variable(testing::randomTensor({numel}, 1 + i), true));
  }
  return params;
}

BucketPlan planOf(const nn::NamedParameters& params, size_t capBytes) {
  std::vector<ParamInfo> infos;
  for (const auto& [name, p] : params) infos.push_back({name, p.data().numel(), p.dtype()});
  return planBuckets(infos, capBytes, capBytes);
}

// Four parameters of 80 bytes, one bucket each: parameter i is in bucket 3 - i.
struct OneBucketEach : ::testing::Test {
  nn::NamedParameters params = makeParams(4, 10);
  std::shared_ptr<RecordingCommunicator> comm = std::make_shared<RecordingCommunicator>();
  Reducer reducer(Overlap overlap) { return Reducer(params, planOf(params, 80), comm, overlap); }
};

TEST_F(OneBucketEach, LaunchesInBucketOrderWhateverTheReadyOrder) {
  Reducer r = reducer(Overlap::DuringBackward);
  ASSERT_EQ(r.plan().buckets.size(), 4u);
  r.prepareStep();
  r.markReady(1);  // bucket 2: waits for 0 and 1
  EXPECT_EQ(comm->launched, Tags{});
  r.markReady(3);  // bucket 0
  EXPECT_EQ(comm->launched, (Tags{"bucket 0"}));
  r.markReady(0);  // bucket 3: waits for 1
  EXPECT_EQ(comm->launched, (Tags{"bucket 0"}));
  r.markReady(2);  // bucket 1: releases 1, 2, 3
  EXPECT_EQ(comm->launched, (Tags{"bucket 0", "bucket 1", "bucket 2", "bucket 3"}));
  r.finalize();
  for (const BucketTiming& t : r.lastStepTimings()) {
    EXPECT_GE(t.launchMs, t.readyMs);
    ASSERT_NE(t.work, nullptr);
  }
}

TEST_F(OneBucketEach, OverlapOffLaunchesEverythingAtFinalizeInOrder) {
  Reducer r = reducer(Overlap::AfterBackward);
  r.prepareStep();
  for (size_t i : {2, 0, 3, 1}) r.markReady(i);
  EXPECT_EQ(comm->launched, Tags{});
  r.finalize();
  EXPECT_EQ(comm->launched, (Tags{"bucket 0", "bucket 1", "bucket 2", "bucket 3"}));
}

TEST_F(OneBucketEach, MarkedTwiceNamesTheParameter) {
  Reducer r = reducer(Overlap::DuringBackward);
  r.prepareStep();
  r.markReady(2);
  try {
    r.markReady(2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'w2' was marked ready twice"), std::string::npos) << e.what();
  }
}

TEST_F(OneBucketEach, NeverMarkedNamesTheParameterAtFinalize) {
  Reducer r = reducer(Overlap::DuringBackward);
  r.prepareStep();
  for (size_t i : {0, 1, 3}) r.markReady(i);
  try {
    r.finalize();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'w2' got no gradient in this step"), std::string::npos) << e.what();
  }
}

TEST_F(OneBucketEach, SyncOffMarksNothing) {
  Reducer r = reducer(Overlap::DuringBackward);
  r.prepareStep();
  r.setRequireSync(false);
  for (size_t i = 0; i < 4; ++i) r.markReady(i);
  EXPECT_EQ(comm->launched, Tags{});
  EXPECT_THROW(r.finalize(), Error);
  r.setRequireSync(true);
  for (size_t i = 0; i < 4; ++i) r.markReady(i);  // the synced backward marks each parameter once
  r.finalize();
  EXPECT_EQ(comm->launched.size(), 4u);
}

TEST_F(OneBucketEach, MarkReadyOutsideAStepIsAnError) {
  Reducer r = reducer(Overlap::DuringBackward);
  EXPECT_THROW(r.markReady(0), Error);
}

TEST(Reducer, GradientsAreViewsIntoTheBucket) {
  nn::NamedParameters params = makeParams(3, 7);
  auto comm = std::make_shared<RecordingCommunicator>();
  Reducer r(params, planOf(params, 1 << 20), comm, Overlap::DuringBackward);
  ASSERT_EQ(r.plan().buckets.size(), 1u);
  const Tensor& bucket = r.bucketBuffer(0);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& grad = params[i].second.grad();
    EXPECT_TRUE(grad.sharesStorage(bucket)) << params[i].first;
    EXPECT_EQ(static_cast<const char*>(grad.raw()) - static_cast<const char*>(bucket.raw()),
              r.plan().slots[i].offset * 8);
  }
  // Backward accumulates into the bucket itself; prepareStep zeroes it.
  r.prepareStep();
  Variable& w1 = params[1].second;
  for (int pass = 0; pass < 2; ++pass) ops::sum(ops::scale(w1, 3.0)).backward();
  const std::vector<double> values = bucket.toVector<double>();
  const int64_t offset = r.plan().slots[1].offset;
  for (int64_t k = 0; k < bucket.numel(); ++k) {
    EXPECT_EQ(values[k], k >= offset && k < offset + 7 ? 6.0 : 0.0) << "element " << k;
  }
  r.markReady(0);
  r.markReady(1);
  r.markReady(2);
  r.finalize();
  r.prepareStep();
  for (double v : bucket.toVector<double>()) EXPECT_EQ(v, 0.0);
}

TEST(Reducer, DdpHooksLaunchDuringBackwardWithOverlapOn) {
  for (Overlap overlap : {Overlap::DuringBackward, Overlap::AfterBackward}) {
    // y = sum(relu(w2 * relu(w1 * relu(w0 * x)))): w2's gradient is ready first.
    nn::NamedParameters params = makeParams(3, 10);
    const Variable x(testing::randomTensor({10}, 9));
    const auto backward = [&] {
      Variable h = x;
      for (auto& [name, w] : params) h = ops::relu(ops::mul(w, h));
      ops::sum(h).backward();
    };
    auto comm = std::make_shared<RecordingCommunicator>();
    {
      DistributedDataParallel ddp(params, comm, DdpOptions{overlap, 80, 80});
      ASSERT_EQ(ddp.plan().buckets.size(), 3u);
      ddp.prepareStep();
      backward();
      EXPECT_EQ(comm->launched.size(), overlap == Overlap::DuringBackward ? 3u : 0u)
          << "overlap " << overlapName(overlap);
      ddp.finalize();
      EXPECT_EQ(comm->launched, (Tags{"bucket 0", "bucket 1", "bucket 2"}));
      EXPECT_FALSE(ddp.rebuiltLastStep()) << "rebuild is opt-in";
    }
    backward();  // the DDP and its hooks are gone: no launch, no dangling reducer
    EXPECT_EQ(comm->launched.size(), 3u);
  }
}

std::vector<int> paramsOfBuckets(const BucketPlan& plan) {
  std::vector<int> out;
  for (const Bucket& b : plan.buckets) out.insert(out.end(), b.params.begin(), b.params.end());
  return out;
}

// Two DDPs play rank 0 and rank 1; four parameters of 80 bytes, one bucket each (first: bucket k holds
// parameter 3 - k). The ranks see different ready orders; both rebuild to rank 0's, once.
TEST(Reducer, DdpRebuildsTheBucketsInRankZerosReadyOrderOnce) {
  const DdpOptions opts{Overlap::DuringBackward, 80, 80, true};
  nn::NamedParameters params0 = makeParams(4, 10), params1 = makeParams(4, 10);
  auto comm0 = std::make_shared<RecordingCommunicator>();
  auto comm1 = std::make_shared<RecordingCommunicator>(comm0.get());
  DistributedDataParallel rank0(params0, comm0, opts), rank1(params1, comm1, opts);
  ASSERT_EQ(paramsOfBuckets(rank0.plan()), (std::vector<int>{3, 2, 1, 0}));
  const std::vector<int> observed = {1, 3, 0, 2};
  // Step 1: distinct gradients, which the recording all-reduce leaves as they are.
  std::vector<Tensor> grads;
  for (int i = 0; i < 4; ++i) grads.push_back(testing::randomTensor({10}, 100 + i));
  const auto firstStep = [&](DistributedDataParallel& ddp, nn::NamedParameters& params, const std::vector<int>& order) {
    ddp.prepareStep();
    for (int i = 0; i < 4; ++i) {
      Tensor grad = params[i].second.grad();
      grad.copyFrom(grads[i]);
    }
    for (int i : order) ddp.reducer().markReady(i);
    ddp.finalize();
    EXPECT_TRUE(ddp.rebuiltLastStep());
    EXPECT_EQ(paramsOfBuckets(ddp.plan()), observed) << "rank " << ddp.communicator().rank();
    for (int i = 0; i < 4; ++i) {
      const Tensor& grad = params[i].second.grad();
      EXPECT_TRUE(grad.sharesStorage(ddp.reducer().bucketBuffer(ddp.plan().slots[i].bucket))) << i;
      EXPECT_EQ(grad.toVector<double>(), grads[i].toVector<double>()) << "parameter " << i << " lost its gradient";
    }
  };
  firstStep(rank0, params0, observed);
  firstStep(rank1, params1, {3, 2, 1, 0});
  // Step 2 in the observed order: each gradient now completes the next bucket, which launches at once.
  comm0->launched.clear();
  rank0.prepareStep();
  for (size_t k = 0; k < observed.size(); ++k) {
    rank0.reducer().markReady(observed[k]);
    EXPECT_EQ(comm0->launched.size(), k + 1) << "after parameter " << observed[k];
  }
  rank0.finalize();
  EXPECT_FALSE(rank0.rebuiltLastStep());
  // Step 3 in another order: no second rebuild.
  rank0.prepareStep();
  for (int i : {2, 0, 3, 1}) rank0.reducer().markReady(i);
  rank0.finalize();
  EXPECT_FALSE(rank0.rebuiltLastStep());
  EXPECT_EQ(paramsOfBuckets(rank0.plan()), observed);
}

// The order comes from the hooks: w0 is used last in forward, so its gradient is ready first.
TEST(Reducer, DdpRebuildFollowsTheBackwardOrder) {
  nn::NamedParameters params = makeParams(3, 10);
  const Variable x(testing::randomTensor({10}, 9));
  auto comm = std::make_shared<RecordingCommunicator>();
  DistributedDataParallel ddp(params, comm, DdpOptions{Overlap::DuringBackward, 80, 80, true});
  ASSERT_EQ(paramsOfBuckets(ddp.plan()), (std::vector<int>{2, 1, 0}));
  ddp.prepareStep();
  // y = sum(relu(w0 * relu(w2 * relu(w1 * x))))
  Variable h = x;
  for (int i : {1, 2, 0}) h = ops::relu(ops::mul(params[i].second, h));
  ops::sum(h).backward();
  ddp.finalize();
  EXPECT_TRUE(ddp.rebuiltLastStep());
  EXPECT_EQ(paramsOfBuckets(ddp.plan()), (std::vector<int>{0, 2, 1}));
}

TEST(Reducer, RebuildInsideAStepIsAnError) {
  nn::NamedParameters params = makeParams(2, 4);
  Reducer r(params, planOf(params, 1 << 20), std::make_shared<RecordingCommunicator>(), Overlap::DuringBackward);
  r.prepareStep();
  EXPECT_THROW(r.rebuild(planOf(params, 32)), Error);
}

TEST(Reducer, DdpRejectsAParameterListedTwice) {
  nn::NamedParameters params = makeParams(2, 4);
  params.emplace_back("alias", params[0].second);
  try {
    DistributedDataParallel ddp(params, std::make_shared<RecordingCommunicator>());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'alias' is the same Variable as 'w0'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace minidp::distributed
