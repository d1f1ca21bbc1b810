// DistributedDataParallel end to end, on the ranks mpirun started (or alone): averaged gradients equal
// the single-process gradients of the concatenated batch; parameters stay bit-identical across ranks
// and between overlap on and off, with buckets rebuilt from the ready order or not; gradient accumulation;
// mismatched models fail on every rank.
// CPU runs on the mpi (or single) backend, CUDA on nccl (on mpi where ranks share a GPU); float32 and float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>

#include "framework/distributed/comm/backends/emulated_communicator.h"
#include "framework/distributed/gradient/ddp.h"
#include "framework/distributed/gradient/zero.h"
#include "framework/ops/ops.h"
#include "framework/optim/grad_clip.h"
#include "framework/runtime/device.h"
#include "framework/runtime/step_timer.h"
#include "framework/tensor/tensor_math.h"
#include "framework/testing/gradcheck.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "tests/distributed/dist_test_env.h"
#include "tests/support/cuda_skip.h"
#include "tests/support/parameters.h"

namespace minidp {
namespace {

using distributed::Communicator;
using distributed::DdpOptions;
using distributed::DistributedDataParallel;
using distributed::Overlap;
using distributed::overlapName;

const std::vector<int64_t> kDims = {8, 24, 16, 4};
// A tiny GPT: vocabulary 16, context 6, `layers` blocks of 2 heads over width 8.
models::GptConfig tinyGpt(int64_t layers = 2) { return models::GptConfig{16, 6, layers, 2, 8}; }
constexpr int64_t kRowsPerRank = 6;
// Small caps, so that the tiny model spreads over several buckets.
const DdpOptions kSmallBuckets{Overlap::DuringBackward, 1200, 300};  // caps in bytes

struct Batch {
  Tensor inputs, targets;
};

/// The global batch of `rows` rows for `seed`, identical on every rank: MLP features and class labels, or
/// GPT token windows and next tokens.
Batch globalBatch(const std::string& model, int64_t rows, uint64_t seed, DType dtype) {
  if (model == "gpt") {
    const models::GptConfig c = tinyGpt();
    return {testing::randomIndices({rows, c.context}, static_cast<int32_t>(c.vocab), seed),
            testing::randomIndices({rows, c.context}, static_cast<int32_t>(c.vocab), seed + 1)};
  }
  return {testing::randomTensor({rows, kDims.front()}, seed, -1, 1, dtype),
          testing::randomIndices({rows}, static_cast<int32_t>(kDims.back()), seed + 1)};
}
/// Rows [first, first + count) of a batch (rows are the first dimension of inputs and targets).
Batch rowsOf(const Batch& b, int64_t first, int64_t count, Device device) {
  const auto rows = [&](const Tensor& t) {
    Shape shape = t.shape();
    const int64_t perRow = t.numel() / shape[0];
    shape[0] = count;
    return Tensor::alias(t, first * perRow, shape).clone().to(device);
  };
  return {rows(b.inputs), rows(b.targets)};
}

void sgdStep(const nn::Module& model, double lr) {
  NoGradGuard noGrad;
  for (auto& [name, p] : model.namedParameters()) {
    Tensor data = p.data();
    ops::addInPlace(data, ops::scale(p.grad(), -lr));
  }
}

struct Setup {
  std::string model;
  Device device;
  DType dtype;
};

std::string setupName(const ::testing::TestParamInfo<Setup>& info) {
  return info.param.model + "_" + deviceName(info.param.device) + "_" + dtypeName(info.param.dtype);
}
void PrintTo(const Setup& s, std::ostream* os) {
  *os << s.model << " " << deviceName(s.device) << " " << dtypeName(s.dtype);
}

class Ddp : public ::testing::TestWithParam<Setup> {
 protected:
  void SetUp() override {
    std::string reason;
    comm_ = testing::sharedCommunicator(GetParam().device, &reason);
    if (!comm_) GTEST_SKIP() << reason;
    world_ = comm_->worldSize();
    rank_ = comm_->rank();
  }
  /// The MLP with `dims`, or the tiny GPT with `gptLayers` blocks.
  std::unique_ptr<models::Model> model(uint64_t seed, const std::vector<int64_t>& dims = kDims,
                                       int64_t gptLayers = 2) const {
    std::unique_ptr<models::Model> m;
    if (GetParam().model == "gpt") {
      m = std::make_unique<models::GPT>(tinyGpt(gptLayers), seed);
    } else {
      m = std::make_unique<models::MLP>(dims, seed);
    }
    m->to(GetParam().device, GetParam().dtype);
    return m;
  }
  Batch global(int64_t rows, uint64_t seed) const {
    return globalBatch(GetParam().model, rows, seed, GetParam().dtype);
  }
  double tolerance() const { return GetParam().dtype == DType::F64 ? 1e-6 : 1e-5; }
  Batch myRows(const Batch& global) const { return rowsOf(global, rank_ * kRowsPerRank, kRowsPerRank, device()); }
  Device device() const { return GetParam().device; }

  std::shared_ptr<Communicator> comm_;
  int world_ = 1, rank_ = 0;
};

TEST_P(Ddp, AveragedGradientsEqualTheFullBatchGradients) {
  const Batch global = this->global(world_ * kRowsPerRank, 3);
  auto reference = model(5);
  reference->loss(global.inputs.to(device()), global.targets.to(device())).backward();
  for (Overlap overlap : {Overlap::DuringBackward, Overlap::AfterBackward}) {
    auto m = model(5);
    DdpOptions opts = kSmallBuckets;
    opts.overlap = overlap;
    DistributedDataParallel ddp(m->namedParameters(), comm_, opts);
    EXPECT_GE(ddp.plan().buckets.size(), 3u) << ddp.plan().describe();
    const Batch mine = myRows(global);
    ddp.prepareStep();
    m->loss(mine.inputs, mine.targets).backward();
    ddp.finalize();
    SCOPED_TRACE(std::string("overlap ") + overlapName(overlap));
    testing::expectParametersNear(*m, *reference, testing::ParameterField::Grad, tolerance());
  }
}

TEST_P(Ddp, TenStepsKeepRanksBitIdenticalWithOverlapOnAndOff) {
  const double lr = 0.1;
  const auto train = [&](Overlap overlap) {
    auto m = model(11 + rank_);  // different initial weights per rank: DDP must broadcast rank 0's
    DdpOptions opts = kSmallBuckets;
    opts.overlap = overlap;
    DistributedDataParallel ddp(m->namedParameters(), comm_, opts);
    for (uint64_t step = 0; step < 10; ++step) {
      const Batch mine = myRows(global(world_ * kRowsPerRank, 100 + step));
      ddp.prepareStep();
      m->loss(mine.inputs, mine.targets).backward();
      ddp.finalize();
      sgdStep(*m, lr);
    }
    return m;
  };
  auto on = train(Overlap::DuringBackward), off = train(Overlap::AfterBackward);
  const std::string bytes = testing::parameterBytes(*on);
  EXPECT_TRUE(bytes == testing::parameterBytes(*off)) << "overlap on and off differ";
  const std::vector<std::string> all = comm_->allGather(bytes);
  for (int r = 1; r < world_; ++r) EXPECT_TRUE(all[r] == all[0]) << "rank " << r << " differs from rank 0";

  // The same ten steps in one process on the global batch: the DDP run is that run, up to rounding.
  auto reference = model(11);
  for (uint64_t step = 0; step < 10; ++step) {
    const Batch global = this->global(world_ * kRowsPerRank, 100 + step);
    reference->zeroGrad();
    reference->loss(global.inputs.to(device()), global.targets.to(device())).backward();
    sgdStep(*reference, lr);
  }
  testing::expectParametersNear(*on, *reference, testing::ParameterField::Data, 10 * tolerance());
}

// Rebuilt buckets move the gradients, not their values. The parameters are handed to DDP rotated by half,
// so that the ready order differs from the reverse of the listing and the rebuilt plan differs from the
// first one.
TEST_P(Ddp, RebuiltBucketsKeepRanksBitIdenticalAndTheNumbers) {
  std::string rebuiltPlan;
  const auto train = [&](Overlap overlap, bool rebuild) {
    auto m = model(11 + rank_);
    nn::NamedParameters params = m->namedParameters();
    std::rotate(params.begin(), params.begin() + params.size() / 2, params.end());
    DdpOptions opts = kSmallBuckets;
    opts.overlap = overlap;
    opts.rebuildBuckets = rebuild;
    DistributedDataParallel ddp(params, comm_, opts);
    const std::string firstPlan = ddp.plan().describe();
    for (uint64_t step = 0; step < 10; ++step) {
      const Batch mine = myRows(global(world_ * kRowsPerRank, 100 + step));
      ddp.prepareStep();
      m->loss(mine.inputs, mine.targets).backward();
      ddp.finalize();
      EXPECT_EQ(ddp.rebuiltLastStep(), rebuild && step == 0) << "step " << step;
      sgdStep(*m, 0.1);
    }
    if (rebuild) {
      EXPECT_NE(ddp.plan().describe(), firstPlan) << "the ready order gave the first plan again";
      if (rebuiltPlan.empty()) rebuiltPlan = ddp.plan().describe();
      EXPECT_EQ(ddp.plan().describe(), rebuiltPlan) << "overlap " << overlapName(overlap);
      const std::vector<std::string> plans = comm_->allGather(rebuiltPlan);
      for (int r = 1; r < world_; ++r) EXPECT_EQ(plans[r], plans[0]) << "rank " << r << " planned differently";
    }
    return m;
  };
  auto on = train(Overlap::DuringBackward, true), off = train(Overlap::AfterBackward, true);
  auto plain = train(Overlap::DuringBackward, false);
  const std::string bytes = testing::parameterBytes(*on);
  EXPECT_TRUE(bytes == testing::parameterBytes(*off)) << "overlap on and off differ with rebuilt buckets";
  const std::vector<std::string> all = comm_->allGather(bytes);
  for (int r = 1; r < world_; ++r) EXPECT_TRUE(all[r] == all[0]) << "rank " << r << " differs from rank 0";
  if (world_ <= 2) {
    // Each averaged element is (a + b) / 2 or (a / 2 + b / 2), whatever bucket and offset hold it: a + b
    // == b + a exactly, so the layout cannot change a bit.
    EXPECT_TRUE(bytes == testing::parameterBytes(*plain)) << "rebuilt and first buckets differ";
  } else {
    // With three or more ranks the summation order of an element may depend on the message size or its
    // offset (MPI's algorithm choice, NCCL's ring chunks): equal up to rounding.
    testing::expectParametersNear(*on, *plain, testing::ParameterField::Data, tolerance());
  }
}

// An automatic bucket cap (bucketCapBytes 0) is DDP's own: it measures the link, profiles the first step of
// the timer it observes, and at endStep() re-plans every rank under rank 0's choice, reporting it; the
// gradients keep their values. Without a timer, endStep() says what is missing.
TEST_P(Ddp, AutomaticBucketCapIsChosenAfterTheFirstTimedStep) {
  const Batch global = this->global(world_ * kRowsPerRank, 3);
  auto reference = model(5);
  reference->loss(global.inputs.to(device()), global.targets.to(device())).backward();
  auto m = model(5);
  DdpOptions opts;
  opts.bucketCapBytes = 0;
  opts.firstBucketCapBytes = 300;
  runtime::StepTimer timer(device());
  DistributedDataParallel ddp(m->namedParameters(), comm_, opts);
  ddp.observe(timer);
  EXPECT_EQ(ddp.bucketCapBytes(), DdpOptions{}.bucketCapBytes) << "the start plan's cap";
  const Batch mine = myRows(global);
  timer.beginStep(runtime::Phase::Forward);
  ddp.prepareStep();
  ddp.beginMicroBatch(mine.inputs, true);
  m->loss(mine.inputs, mine.targets).backward();
  ddp.finalize();
  timer.endStep();
  const std::string report = ddp.endStep();
  EXPECT_NE(report.find("bucket cap auto: "), std::string::npos) << report;
  EXPECT_NE(report.find(ddp.describePlan()), std::string::npos) << report;
  EXPECT_EQ(ddp.endStep(), "") << "chosen once";
  const std::string mineCap = std::to_string(ddp.bucketCapBytes()) + " " + ddp.describePlan();
  for (const std::string& theirs : comm_->allGather(mineCap)) EXPECT_EQ(theirs, mineCap);
  testing::expectParametersNear(*m, *reference, testing::ParameterField::Grad, tolerance());

  auto untimed = model(5);
  DistributedDataParallel alone(untimed->namedParameters(), comm_, opts);
  alone.prepareStep();
  untimed->loss(mine.inputs, mine.targets).backward();
  alone.finalize();
  try {
    alone.endStep();
    ADD_FAILURE() << "an automatic cap without a timed step";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("observe(timer)"), std::string::npos) << e.what();
  }

  // ZeRO keeps its first plan (ZeRO-3: one bucket per unit): the automatic cap is refused under every stage,
  // on every rank alike before any collective.
  for (int stage = 1; stage <= 3; ++stage) {
    auto sharded = model(5);
    DdpOptions zero = opts;
    zero.zeroStage = stage;
    try {
      DistributedDataParallel refused(sharded->namedParameters(), comm_, zero);
      ADD_FAILURE() << "an automatic cap with ZeRO-" << stage;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("automatic bucket cap"), std::string::npos) << e.what();
    }
  }
}

TEST_P(Ddp, GradientAccumulationOfTwoHalvesEqualsOneBatch) {
  const Batch global = this->global(world_ * kRowsPerRank, 21);
  auto reference = model(9);
  reference->loss(global.inputs.to(device()), global.targets.to(device())).backward();
  auto m = model(9);
  DistributedDataParallel ddp(m->namedParameters(), comm_, kSmallBuckets);
  const int64_t half = kRowsPerRank / 2;
  ddp.prepareStep();
  for (int micro = 0; micro < 2; ++micro) {
    ddp.setRequireSync(micro == 1);
    const Batch rows = rowsOf(global, rank_ * kRowsPerRank + micro * half, half, device());
    ops::scale(m->loss(rows.inputs, rows.targets), 0.5).backward();
    if (micro == 0) {
      for (const auto& t : ddp.reducer().lastStepTimings()) EXPECT_EQ(t.work, nullptr) << "bucket " << t.bucket;
    }
  }
  ddp.finalize();
  testing::expectParametersNear(*m, *reference, testing::ParameterField::Grad, tolerance());
}

TEST_P(Ddp, DifferentModelsFailOnEveryRankWithAMessage) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  const std::string dt = dtypeName(GetParam().dtype);
  // Rank 1 differs: a wider first layer, then one layer more.
  const std::vector<std::pair<std::vector<int64_t>, std::string>> cases = {
      {{8, 25, 16, 4},
       "parameter #0 is 'layers.0.weight " + dt + " [25, 8]' on rank 1 but 'layers.0.weight " + dt +
           " [24, 8]' on rank 0"},
      {{8, 24, 16, 4, 4}, "parameter #6 is 'layers.3.weight " + dt + " [4, 4]' on rank 1 but '(none)' on rank 0"}};
  if (GetParam().model == "gpt") {
    // Rank 1 has a third block: the first difference is its first parameter against ln_f.weight.
    auto m = model(1, kDims, rank_ == 1 ? 3 : 2);
    std::string message;
    try {
      DistributedDataParallel ddp(m->namedParameters(), comm_, kSmallBuckets);
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("'h.2.ln_1.weight " + dt + " [8]' on rank 1 but 'ln_f.weight " + dt + " [8]' on rank 0"),
              std::string::npos)
        << "message: " << message;
    EXPECT_TRUE(comm_->allAgree(true));
    return;
  }
  for (const auto& [dims, expected] : cases) {
    auto m = model(1, rank_ == 1 ? dims : kDims);
    const auto start = std::chrono::steady_clock::now();
    std::string message;
    try {
      DistributedDataParallel ddp(m->namedParameters(), comm_, kSmallBuckets);
    } catch (const Error& e) {
      message = e.what();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(message.find(expected), std::string::npos) << "message: " << message;
    EXPECT_LT(seconds, 10.0);
  }
  EXPECT_TRUE(comm_->allAgree(true)) << "the communicator is still usable";
}

// ZeRO-1 and bf16 on the wire, 50 optimizer steps of each configuration from the same start.
struct WireRun {
  Overlap overlap = Overlap::DuringBackward;
  std::string hook = "allreduce";  // CommHookOptions::name
  int zero = 0;
  distributed::ZeroGather gather = distributed::ZeroGather::End;
  std::string optimizer = "adamw";
  double clipGradNorm = 0;  // > 0: every step's gradients clipped to this global norm
  int prefetch = 1;          // ZeRO-3: units in flight
  bool keepGathered = false;  // ZeRO-3: a unit kept from forward to backward
  int microBatches = 1;       // micro-batches per step, the rank's rows split evenly
  std::optional<DType> paramDType;  // ZeRO-3: the units gathered (and computed) in this dtype
  bool roundedReference = false;    // plain DDP whose forward and backward read the parameters rounded to bf16
  int checkpointEvery = 0;          // > 0: every that many steps the state is gathered as a checkpoint takes it
};

class DdpWire : public Ddp {
 protected:
  static constexpr int kSteps = 50;
  /// `steps` optimizer steps of `run` from the same start; `keep`, when given, receives the optimizer.
  std::unique_ptr<models::Model> train(const WireRun& run, int steps = kSteps,
                                       std::unique_ptr<optim::Optimizer>* keep = nullptr) {
    auto m = model(11 + rank_);
    DdpOptions opts = kSmallBuckets;
    opts.overlap = run.overlap;
    opts.commHook.name = run.hook;
    opts.zeroStage = run.zero;
    DistributedDataParallel ddp(m->namedParameters(), comm_, opts);
    std::unique_ptr<optim::Optimizer> optimizer;
    if (run.zero >= 1) {
      optimizer = std::make_unique<distributed::ShardedOptimizer>(ddp, run.optimizer, 1e-2, 0.01, run.gather,
                                                                  run.prefetch, run.keepGathered, run.paramDType);
    } else {
      optimizer = optim::makeOptimizer(run.optimizer, m->namedParameters(), 1e-2, 0.01);
    }
    optim::GradClipper clipper(run.clipGradNorm, GetParam().dtype, device());
    if (run.clipGradNorm > 0) optimizer->setGradScale(clipper.scale());
    for (int step = 0; step < steps; ++step) {
      const Batch mine = myRows(global(world_ * kRowsPerRank, 300 + step));
      ddp.prepareStep();
      const int64_t rows = kRowsPerRank / run.microBatches;
      // The reference of ZeRO-3's bf16 gathers: the parameters rounded for forward and backward, the update
      // applied to the unrounded ones.
      std::vector<Tensor> masters;
      if (run.roundedReference) {
        for (Variable p : m->parameters()) {
          masters.push_back(p.data().clone());
          p.data().copyFrom(p.data().toDType(DType::BF16).toDType(p.dtype()));
        }
      }
      for (int k = 0; k < run.microBatches; ++k) {
        ddp.setRequireSync(k + 1 == run.microBatches);
        const Batch part = rowsOf(mine, k * rows, rows, device());
        Variable loss = m->loss(part.inputs, part.targets);
        (run.microBatches > 1 ? ops::scale(loss, 1.0 / run.microBatches) : loss).backward();
      }
      ddp.finalize();
      for (size_t i = 0; i < masters.size(); ++i) {
        Variable p = m->parameters()[i];
        p.data().copyFrom(masters[i]);
      }
      if (run.clipGradNorm > 0) ddp.computeGradNorm(clipper);
      optimizer->step();
      if (run.checkpointEvery > 0 && (step + 1) % run.checkpointEvery == 0 && step + 1 < steps) {
        optimizer->checkpointState();  // ZeRO-3: every unit gathered, exactly
        if (run.zero == 3) static_cast<distributed::ShardedOptimizer&>(*optimizer).releaseAll();
      }
    }
    // ZeRO-3: between steps no unit holds memory; then the units gathered again (a collective), so that the
    // model is whole once the optimizer goes.
    if (run.zero == 3) {
      auto& sharded = static_cast<distributed::ShardedOptimizer&>(*optimizer);
      EXPECT_EQ(sharded.gatheredUnits(), 0u);
      sharded.gatherAll();
    }
    if (keep) *keep = std::move(optimizer);
    return m;
  }
  /// Every rank holds the bits of rank 0.
  void expectRanksIdentical(const nn::Module& m, const std::string& what) {
    const std::vector<std::string> all = comm_->allGather(testing::parameterBytes(m));
    for (int r = 1; r < world_; ++r) EXPECT_TRUE(all[r] == all[0]) << what << ": rank " << r << " differs from rank 0";
  }
};

TEST_P(DdpWire, ZeroOneMatchesDdpAfterFiftySteps) {
  auto ddp = train({});
  auto zeroEnd = train({Overlap::DuringBackward, "allreduce", 1, distributed::ZeroGather::End});
  auto zeroOverlap = train({Overlap::DuringBackward, "allreduce", 1, distributed::ZeroGather::Overlap});
  auto zeroOff = train({Overlap::AfterBackward, "allreduce", 1, distributed::ZeroGather::End});
  // The gathers in the forward's order, each waited on where the next forward reads its parameters.
  auto zeroForward = train({Overlap::DuringBackward, "allreduce", 1, distributed::ZeroGather::Forward});
  const std::string bytes = testing::parameterBytes(*zeroEnd);
  EXPECT_TRUE(bytes == testing::parameterBytes(*zeroOverlap)) << "gather at the end and overlapped differ";
  EXPECT_TRUE(bytes == testing::parameterBytes(*zeroForward)) << "gather at the end and in the forward differ";
  EXPECT_TRUE(bytes == testing::parameterBytes(*zeroOff)) << "overlap on and off differ under ZeRO-1";
  expectRanksIdentical(*zeroEnd, "ZeRO-1");
  // Sharding changes who computes an element's update, not the update: DDP's numbers up to rounding
  // (CPU: the same reduction to rank 0, so usually the same bits).
  EXPECT_LE(testing::maxParameterError(*zeroEnd, *ddp), 100 * tolerance());
  // And the run did train: 50 steps of lr 1e-2 moved the weights well away from the start.
  EXPECT_GT(testing::maxParameterError(*zeroEnd, *model(11)), 1e-2);
}

// ZeRO-2 reduces the same buckets from a scratch buffer and keeps only the shards: ZeRO-1's bits. ZeRO-3
// gathers each unit before its forward and its backward and reduce-scatters a bucket per unit: DDP's numbers
// (the same bits where the reduction order per element is the same: MPI sums to rank 0 element by element),
// overlap on == off, any prefetch depth and keeping the units gathered the same bits, every rank the same
// bits; two micro-batches of half the rows each near one of all the rows.
TEST_P(DdpWire, ZeroTwoAndThreeMatchZeroOneAndDdp) {
  constexpr int kShort = 20;
  auto ddp = train({}, kShort);
  auto one = train({Overlap::DuringBackward, "allreduce", 1}, kShort);
  auto two = train({Overlap::DuringBackward, "allreduce", 2}, kShort);
  auto twoOff = train({Overlap::AfterBackward, "allreduce", 2}, kShort);
  EXPECT_TRUE(testing::parameterBytes(*one) == testing::parameterBytes(*two)) << "ZeRO-2 differs from ZeRO-1";
  EXPECT_TRUE(testing::parameterBytes(*two) == testing::parameterBytes(*twoOff)) << "ZeRO-2 overlap on != off";
  expectRanksIdentical(*two, "ZeRO-2");
  auto three = train({Overlap::DuringBackward, "allreduce", 3}, kShort);
  WireRun off{Overlap::AfterBackward, "allreduce", 3};
  auto threeOff = train(off, kShort);
  WireRun deep{Overlap::DuringBackward, "allreduce", 3};
  deep.prefetch = 3;
  deep.keepGathered = true;
  auto threeDeep = train(deep, kShort);
  const std::string bytes = testing::parameterBytes(*three);
  EXPECT_TRUE(bytes == testing::parameterBytes(*threeOff)) << "ZeRO-3 overlap on != off";
  EXPECT_TRUE(bytes == testing::parameterBytes(*threeDeep)) << "ZeRO-3 prefetch 3, kept gathered, differs";
  expectRanksIdentical(*three, "ZeRO-3");
  EXPECT_LE(testing::maxParameterError(*three, *ddp), 100 * tolerance());
  if (device() == Device::CPU && world_ <= 2) {
    EXPECT_TRUE(bytes == testing::parameterBytes(*ddp)) << "ZeRO-3 differs from DDP (a + b sums alike)";
  }
  WireRun halves{Overlap::DuringBackward, "allreduce", 3};
  halves.microBatches = 2;
  auto accumulated = train(halves, kShort);
  expectRanksIdentical(*accumulated, "ZeRO-3, two micro-batches");
  EXPECT_LE(testing::maxParameterError(*accumulated, *three), 100 * tolerance());
}

// ZeRO-3 with the units gathered in bf16 (FSDP2's param_dtype): each rank rounds its shard, so forward and
// backward read every parameter rounded to bf16, and the update goes to the unrounded shards. That is plain
// DDP whose parameters are rounded for forward and backward (the same bits where the reduction order is the
// same); overlap on == off, prefetch 3 kept gathered and a checkpoint every 5 steps (its exact gather freed
// after it) the same bits; every rank the same bits; and not the run of exact gathers.
TEST_P(DdpWire, ZeroThreeBf16GathersRoundTheParametersOnly) {
  constexpr int kShort = 20;
  WireRun reference;
  reference.roundedReference = true;
  auto rounded = train(reference, kShort);
  WireRun run{Overlap::DuringBackward, "allreduce", 3};
  auto exact = train(run, kShort);
  run.paramDType = DType::BF16;
  auto three = train(run, kShort);
  WireRun off = run;
  off.overlap = Overlap::AfterBackward;
  auto threeOff = train(off, kShort);
  WireRun deep = run;
  deep.prefetch = 3;
  deep.keepGathered = true;
  deep.checkpointEvery = 5;
  auto threeDeep = train(deep, kShort);
  const std::string bytes = testing::parameterBytes(*three);
  EXPECT_TRUE(bytes == testing::parameterBytes(*threeOff)) << "ZeRO-3 bf16 gathers: overlap on != off";
  EXPECT_TRUE(bytes == testing::parameterBytes(*threeDeep))
      << "ZeRO-3 bf16 gathers: prefetch 3, kept gathered, a checkpoint every 5 steps, differs";
  expectRanksIdentical(*three, "ZeRO-3 bf16 gathers");
  EXPECT_LE(testing::maxParameterError(*three, *rounded), 100 * tolerance());
  if (device() == Device::CPU && world_ <= 2) {
    EXPECT_TRUE(bytes == testing::parameterBytes(*rounded)) << "ZeRO-3 bf16 gathers differ from DDP on rounded "
                                                               "parameters (a + b sums alike)";
  }
  // Rounding to 8 significant bits moves the gradients by about 2^-9 relative: the runs part.
  EXPECT_GT(testing::maxParameterError(*three, *exact), 1e3 * tolerance()) << "the gathers rounded nothing";
}

// The ops' bf16 copy of a weight of a unit gathered in bf16 is a view of the gathered bf16 buffer: the same
// bits as a cast of the (rounded) fp32 parameter, the same memory at every call (no cast made, none to keep);
// a padded copy (more rows) is a cast; exact gathers (gatherAll, a checkpoint's) and fp32 gathers have none.
TEST_P(DdpWire, ZeroThreeBf16WeightCopiesViewTheGatheredBuffer) {
  if (GetParam().dtype != DType::F32) GTEST_SKIP() << "bf16 compute copies are of fp32 weights";
  auto m = model(11);
  DdpOptions opts;
  opts.zeroStage = 3;
  DistributedDataParallel ddp(m->namedParameters(), comm_, opts);
  {
    auto other = model(11);
    DistributedDataParallel plain(other->namedParameters(), comm_, opts);
    distributed::ShardedOptimizer fp32(plain, "sgd", 0.1, 0, distributed::ZeroGather::End);
    EXPECT_EQ(fp32.weightCopies(), nullptr) << "units gathered in fp32 have no bf16 buffer to view";
  }
  distributed::ShardedOptimizer sharded(ddp, "sgd", 0.1, 0, distributed::ZeroGather::End, 1, false, DType::BF16);
  ASSERT_NE(sharded.weightCopies(), nullptr);
  const auto bytesOf = [](const Tensor& t) {
    const Tensor host = t.to(Device::CPU);
    return std::string(static_cast<const char*>(host.raw()), host.nbytes());
  };
  const ops::WeightCopySource::Installed installed(sharded.weightCopies());
  const std::vector<Variable> params = m->parameters();
  const Variable& first = *std::find_if(params.begin(), params.end(), [](const Variable& v) { return v.shape().size() == 2; });
  // The first weight's copy, held as autograd holds it from forward to backward.
  const Tensor held = ops::weightCopy(first.data());
  const std::string heldBytes = bytesOf(held);
  int checked = 0;
  for (const Variable& p : params) {  // in registration order, as a forward reads them: units gathered and freed
    if (p.shape().size() != 2) continue;
    const Tensor w = p.data();  // the read gathers its unit (the before-use hook) and waits for it
    const Tensor a = ops::weightCopy(w), b = ops::weightCopy(w);
    ASSERT_TRUE(a.defined());
    EXPECT_EQ(a.dtype(), DType::BF16);
    EXPECT_EQ(a.shape(), w.shape());
    EXPECT_EQ(a.raw(), b.raw()) << "a view of the gathered buffer is the same memory at every call";
    EXPECT_NE(a.raw(), w.raw());
    EXPECT_TRUE(bytesOf(a) == bytesOf(w.toDType(DType::BF16))) << "not the bits of a cast";
    EXPECT_TRUE(bytesOf(w) == bytesOf(w.toDType(DType::BF16).toDType(DType::F32)))
        << "the gathered fp32 parameter holds the rounded values";
    const Tensor rows = ops::weightCopy(w, w.size(0));  // the head's copy where the vocabulary needs no padding
    EXPECT_EQ(rows.raw(), a.raw()) << "a copy of the weight's own rows is the same view";
    EXPECT_EQ(rows.shape(), w.shape());
    const Tensor padded = ops::weightCopy(w, w.size(0) + 8), again = ops::weightCopy(w, w.size(0) + 8);
    EXPECT_NE(padded.raw(), again.raw()) << "a padded copy is a cast of its own";
    ++checked;
  }
  EXPECT_GT(checked, 0);
  // GPT's units are its blocks: reading the later ones freed the first unit, and the held copy with it. Reading
  // its weight again (as backward's gather does) brings the memory back under the held view, with the same bits.
  if (GetParam().model == "gpt") {
    EXPECT_FALSE(held.memoryResident()) << "the first unit was not freed: nothing below tests a gather again";
  }
  EXPECT_TRUE(first.data().defined());
  EXPECT_TRUE(held.memoryResident());
  EXPECT_TRUE(bytesOf(held) == heldBytes) << "the held view reads other bits after the unit was gathered again";
  sharded.gatherAll();  // exact: no bf16 buffer, so no view; the copy is a cast of the unrounded parameter
  const Tensor w = first.data();
  EXPECT_NE(ops::weightCopy(w).raw(), ops::weightCopy(w).raw()) << "an exact gather has no bf16 buffer to view";
}

// The norm grad-norm clipping needs under ZeRO-1: each rank's partial sums over its shards, all-gathered
// and added in rank order, equal the norm of the whole averaged gradient that plain DDP holds, to the same
// bits on every rank.
TEST_P(DdpWire, ZeroGradNormIsTheWholeGradientsNorm) {
  const Batch mine = myRows(global(world_ * kRowsPerRank, 500));
  double want = 0;
  {
    auto m = model(11);
    DistributedDataParallel ddp(m->namedParameters(), comm_, kSmallBuckets);
    ddp.prepareStep();
    m->loss(mine.inputs, mine.targets).backward();
    ddp.finalize();
    for (const auto& [name, p] : m->namedParameters()) {
      for (double g : p.grad().toDType(DType::F64).toVector<double>()) want += g * g;
    }
  }
  auto m = model(11);
  DdpOptions opts = kSmallBuckets;
  opts.zeroStage = 1;
  DistributedDataParallel ddp(m->namedParameters(), comm_, opts);
  distributed::ShardedOptimizer optimizer(ddp, "sgd", 0.1, 0, distributed::ZeroGather::End);
  ddp.prepareStep();
  m->loss(mine.inputs, mine.targets).backward();
  ddp.finalize();
  optim::GradClipper clipper(0, GetParam().dtype, device());
  ddp.computeGradNorm(clipper);
  const double norm = clipper.norm();
  EXPECT_GT(want, 0);
  EXPECT_NEAR(norm * norm, want, 1e-5 * want);
  std::string bits(sizeof norm, '\0');
  std::memcpy(bits.data(), &norm, sizeof norm);
  const std::vector<std::string> all = comm_->allGather(bits);
  for (int r = 1; r < world_; ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << "'s norm differs";
  // Optimizer state per rank: 1/N of the (padded) elements, SGD's momentum only.
  const int64_t padding = world_ * static_cast<int64_t>(ddp.plan().buckets.size());  // under N per bucket
  EXPECT_GE(optimizer.stateElements() * world_, optimizer.unshardedStateElements());
  EXPECT_LE(optimizer.stateElements() * world_, optimizer.unshardedStateElements() + padding);
}

// --clip-grad-norm under ZeRO-1 clips as plain DDP does. SGD, whose steps scale with the gradient, so the
// clip shows in the weights (AdamW's normalised steps hide most of a coefficient).
TEST_P(DdpWire, ZeroOneClipsLikeDdpAfterFiftySteps) {
  WireRun clipped;
  clipped.optimizer = "sgd";
  clipped.clipGradNorm = 0.5;
  auto ddp = train(clipped);
  WireRun zero = clipped;
  zero.zero = 1;
  auto zeroEnd = train(zero);
  zero.gather = distributed::ZeroGather::Overlap;
  zero.overlap = Overlap::AfterBackward;
  auto zeroOverlap = train(zero);
  EXPECT_TRUE(testing::parameterBytes(*zeroEnd) == testing::parameterBytes(*zeroOverlap))
      << "overlap on and off differ under ZeRO-1 with clipping";
  expectRanksIdentical(*zeroEnd, "ZeRO-1 with clipping");
  const double allowed = 100 * tolerance();
  EXPECT_LE(testing::maxParameterError(*zeroEnd, *ddp), allowed);
  // The clip did bite: without it the same 50 steps end several times the allowed difference away.
  WireRun unclipped = clipped;
  unclipped.clipGradNorm = 0;
  EXPECT_GT(testing::maxParameterError(*train(unclipped), *ddp), 3 * allowed);
}

// Checkpoints under ZeRO-1: the gathered state holds plain DDP's names and values; plain DDP's state
// restored into a fresh ShardedOptimizer (each rank keeps its shard) gathers back to the same bits.
TEST_P(DdpWire, ZeroCheckpointStateIsDdpsState) {
  for (const std::string name : {"sgd", "adamw"}) {
    WireRun run;
    run.optimizer = name;
    std::unique_ptr<optim::Optimizer> plain, sharded;
    train(run, 5, &plain);
    run.zero = 1;
    train(run, 5, &sharded);
    const std::vector<std::pair<std::string, Tensor>> want = plain->state(), got = sharded->checkpointState();
    // Only rank 0 compares: no ASSERT, every rank must reach the collectives below.
    if (rank_ != 0) {
      EXPECT_TRUE(got.empty()) << "only rank 0 receives the gathered state";
    } else if (got.size() != want.size()) {
      ADD_FAILURE() << name << ": " << got.size() << " state tensors gathered, plain DDP holds " << want.size();
    } else {
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].first, want[i].first) << name;
        EXPECT_LE(testing::relativeError(got[i].second, want[i].second), 100 * tolerance())
            << name << " " << want[i].first;
      }
    }
    auto m = model(11);
    DdpOptions opts = kSmallBuckets;
    opts.zeroStage = 1;
    DistributedDataParallel ddp(m->namedParameters(), comm_, opts);
    distributed::ShardedOptimizer restored(ddp, name, 1e-2, 0.01, distributed::ZeroGather::End);
    restored.restoreState([&want](const std::string& key) {
      for (const auto& [n, t] : want) {
        if (n == key) return t;
      }
      throw Error("no state " + key);
    });
    const std::vector<std::pair<std::string, Tensor>> back = restored.checkpointState();
    if (rank_ == 0 && back.size() != want.size()) {
      ADD_FAILURE() << name << ": " << back.size() << " state tensors after the restore";
    } else if (rank_ == 0) {
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(testing::relativeError(back[i].second, want[i].second), 0.0) << name << " " << want[i].first;
      }
    }
    const std::vector<double> last = want.back().second.toDType(DType::F64).toVector<double>();
    EXPECT_TRUE(std::any_of(last.begin(), last.end(), [](double v) { return v != 0; })) << name << ": no state yet";
  }
}

TEST_P(DdpWire, Bf16OnTheWireIsIdenticalOnRanksAndOverlapAndNearFp32) {
  if (GetParam().dtype != DType::F32) GTEST_SKIP() << "bf16 on the wire compresses fp32 gradients";
  // SGD: AdamW's normalised steps turn any difference in a near-zero gradient into a full step of
  // lr, so its runs part by far more than the gradients do (tens of percent after 50 steps).
  const auto sgd = [](Overlap overlap, std::string wire, int zero) {
    return WireRun{overlap, wire, zero, distributed::ZeroGather::Overlap, "sgd"};
  };
  auto fp32 = train(sgd(Overlap::DuringBackward, "allreduce", 0));
  auto on = train(sgd(Overlap::DuringBackward, "bf16", 0));
  auto off = train(sgd(Overlap::AfterBackward, "bf16", 0));
  auto zero = train(sgd(Overlap::DuringBackward, "bf16", 1));
  EXPECT_TRUE(testing::parameterBytes(*on) == testing::parameterBytes(*off))
      << "overlap on and off differ with bf16 on the wire";
  expectRanksIdentical(*on, "bf16");
  expectRanksIdentical(*zero, "bf16 + ZeRO-1");
  // bf16 keeps 8 significant bits (relative rounding 2^-9 per gradient element): the weights stay within
  // a percent of the fp32 run, yet not equal to it.
  const double error = testing::maxParameterError(*on, *fp32);
  EXPECT_LE(error, 1e-2);
  EXPECT_GT(error, 0.0) << "bf16 on the wire changed nothing: are the gradients really rounded?";
  EXPECT_LE(testing::maxParameterError(*zero, *on), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Backends, DdpWire,
                         ::testing::Values(Setup{"mlp", Device::CPU, DType::F64}, Setup{"mlp", Device::CPU, DType::F32},
                                           Setup{"gpt", Device::CPU, DType::F32},
                                           Setup{"mlp", Device::CUDA, DType::F32},
                                           Setup{"gpt", Device::CUDA, DType::F32}),
                         setupName);

// The collectives ZeRO-1 and bf16 on the wire add, on the CPU (mpi / single) and CUDA (nccl).
using WireCollectives = testing::CommunicatorTest;

// What NCCL's ncclAvg on bf16 computes: each rank's values rounded to bf16, pre-multiplied by bf16(1/N)
// (rounded), summed with one rounding per add; identical on every rank; the reduce-scatter's shard is the
// all-reduce's.
TEST_P(WireCollectives, Bf16AverageIsNcclsPreMultipliedSum) {
  const int world = comm_->worldSize(), rank = comm_->rank();
  const int64_t n = distributed::paddedNumel(999, world);
  const auto values = [&](int r) { return testing::randomTensor({n}, 50 + r, -1, 1, DType::F32); };
  // Through the bf16 hook, on one bucket of n elements.
  const auto reduceBf16 = [&](Tensor buffer, distributed::Reduction reduction) {
    const distributed::GradBucket bucket{0, buffer, {}, reduction};
    std::unique_ptr<distributed::CommHook> hook = distributed::makeCommHook({"bf16"});
    hook->setup({bucket}, *comm_);
    hook->reduce(bucket, *comm_)->wait();
  };
  Tensor buffer = values(rank).to(GetParam());
  reduceBf16(buffer, distributed::Reduction::AllReduce);
  const std::vector<float> got = buffer.toVector<float>();
  const std::vector<std::string> all =
      comm_->allGather(std::string(reinterpret_cast<const char*>(got.data()), got.size() * sizeof(float)));
  for (int r = 1; r < world; ++r) EXPECT_TRUE(all[r] == all[0]) << "rank " << r << " holds other bits";

  const float scale = bf16ToFloat(floatToBf16(1.0f / static_cast<float>(world)));
  std::vector<float> reference(n, 0.0f), average(n, 0.0f);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> x = values(r).toVector<float>();
    for (int64_t i = 0; i < n; ++i) {
      const float term = bf16ToFloat(floatToBf16(bf16ToFloat(floatToBf16(x[i])) * scale));
      reference[i] = r == 0 ? term : bf16ToFloat(floatToBf16(reference[i] + term));
      average[i] += x[i] / static_cast<float>(world);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(bf16ToFloat(floatToBf16(got[i])), got[i]) << "element " << i << " is not a bf16 value";
    // Two ranks: one add, whatever the order. More: the summation order is the library's (MPI's reduction
    // tree, NCCL's ring), so only the distance to the exact average is checked.
    if (world <= 2) ASSERT_EQ(got[i], reference[i]) << "element " << i;
    ASSERT_NEAR(got[i], average[i], 4.0 / 256) << "element " << i;
  }

  Tensor scattered = values(rank).to(GetParam());
  reduceBf16(scattered, distributed::Reduction::ReduceScatter);
  const int64_t shard = n / world;
  const std::vector<float> mine = scattered.toVector<float>();
  for (int64_t i = rank * shard; i < (rank + 1) * shard; ++i) {
    ASSERT_NEAR(mine[i], got[i], GetParam() == Device::CPU ? 0.0 : 4.0 / 256) << "element " << i;
  }
}

TEST_P(WireCollectives, Fp32ReduceScatterAndAllGatherShards) {
  const int world = comm_->worldSize(), rank = comm_->rank();
  const int64_t n = distributed::paddedNumel(1001, world), shard = n / world;
  // Rank r holds (r + 1) * x: the average is (N + 1) / 2 * x.
  Tensor x = testing::randomTensor({n}, 61, -1, 1, DType::F32);
  Tensor buffer = ops::scale(x, rank + 1.0).to(GetParam());
  comm_->reduceScatter(buffer, distributed::ReduceOp::Avg, "bucket 0")->wait();
  const std::vector<float> got = buffer.toVector<float>(), want = ops::scale(x, (world + 1) / 2.0).toVector<float>();
  for (int64_t i = rank * shard; i < (rank + 1) * shard; ++i) ASSERT_NEAR(got[i], want[i], 1e-6) << "element " << i;

  // Shard r holds r + 1 on rank r and -1 elsewhere; after the gather every rank holds r + 1 in shard r.
  std::vector<float> params(n, -1.0f);
  for (int64_t i = rank * shard; i < (rank + 1) * shard; ++i) params[i] = static_cast<float>(rank + 1);
  Tensor gathered = Tensor::fromVector(params, {n}, GetParam());
  comm_->allGatherShards(gathered, "gather 0")->wait();
  const std::vector<float> out = gathered.toVector<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<float>(i / shard + 1)) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Devices, WireCollectives, ::testing::Values(Device::CPU, Device::CUDA),
                         [](const ::testing::TestParamInfo<Device>& info) { return deviceName(info.param); });

TEST_P(Ddp, DifferentOptionsFailOnEveryRankWithAMessage) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  // Rank 1 plans other buckets, or would rebuild them: both must stop every rank at construction.
  DdpOptions otherCap = kSmallBuckets, otherRebuild = kSmallBuckets;
  otherCap.bucketCapBytes *= 2;
  otherRebuild.rebuildBuckets = true;
  for (const DdpOptions& other : {otherCap, otherRebuild}) {
    auto m = model(1);
    std::string message;
    try {
      DistributedDataParallel ddp(m->namedParameters(), comm_, rank_ == 1 ? other : kSmallBuckets);
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("ranks hold different DDP settings: DDP setting #0 is 'overlap on bucket-bytes"),
              std::string::npos)
        << "message: " << message;
    EXPECT_NE(message.find("on rank 1 but"), std::string::npos) << "message: " << message;
  }
  EXPECT_TRUE(comm_->allAgree(true)) << "the communicator is still usable";
}

TEST_P(Ddp, MovingTheModelAfterDdpIsAnError) {
  auto m = model(1);
  DistributedDataParallel ddp(m->namedParameters(), comm_, kSmallBuckets);
  const DType other = GetParam().dtype == DType::F32 ? DType::F64 : DType::F32;
  try {
    m->to(device(), other);
    ADD_FAILURE() << "to() after DDP must throw: the gradients would leave their buckets";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DistributedDataParallel"), std::string::npos) << e.what();
  }
  m->to(device(), GetParam().dtype);  // the same device and dtype: nothing moves, no error
}

INSTANTIATE_TEST_SUITE_P(Backends, Ddp,
                         ::testing::Values(Setup{"mlp", Device::CPU, DType::F64}, Setup{"mlp", Device::CPU, DType::F32},
                                           Setup{"gpt", Device::CPU, DType::F64}, Setup{"gpt", Device::CPU, DType::F32},
                                           Setup{"mlp", Device::CUDA, DType::F64},
                                           Setup{"mlp", Device::CUDA, DType::F32},
                                           Setup{"gpt", Device::CUDA, DType::F64},
                                           Setup{"gpt", Device::CUDA, DType::F32}),
                         setupName);

// The emulated link changes timing only: N identical ranks average to the same bits as world 1.
TEST(EmulatedDdp, SameBitsAsWorldOne) {
  for (Device device : {Device::CPU, Device::CUDA}) {
    if (device == Device::CUDA && !runtime::cudaAvailable()) continue;
    distributed::CommOptions opts;
    opts.cuda = device == Device::CUDA;
    opts.backend = "single";
    auto single = distributed::makeCommunicator(opts, nullptr);
    auto emulated = std::make_shared<distributed::EmulatedCommunicator>(4, 50, 5, opts.cuda, 4, true);
    const auto train = [&](std::shared_ptr<Communicator> comm) {
      auto m = std::make_unique<models::MLP>(kDims, 13);
      m->to(device, DType::F32);
      DistributedDataParallel ddp(m->namedParameters(), comm, kSmallBuckets);
      for (uint64_t step = 0; step < 3; ++step) {
        const Batch b = rowsOf(globalBatch("mlp", kRowsPerRank, 40 + step, DType::F32), 0, kRowsPerRank, device);
        ddp.prepareStep();
        m->loss(b.inputs, b.targets).backward();
        ddp.finalize();
        sgdStep(*m, 0.1);
      }
      return testing::parameterBytes(*m);
    };
    EXPECT_TRUE(train(single) == train(emulated)) << deviceName(device);
  }
}

/// The emulated link on the CPU, its collective buffers from elsewhere (Tensor::fromExternal over memory a
/// release function holds), counted.
class ExternalBuffers : public distributed::EmulatedCommunicator {
 public:
  struct Counts {
    int allocated = 0;
    std::atomic<int> released{0};
  };
  explicit ExternalBuffers(std::shared_ptr<Counts> counts)
      : EmulatedCommunicator(4, 50, 5, false, 4, true), counts_(std::move(counts)) {}
  Tensor allocateCommBuffer(int64_t numel, DType dtype, Device device) override {
    ++counts_->allocated;
    auto memory = std::make_shared<Tensor>(Tensor::empty({numel}, dtype, device));
    return Tensor::fromExternal(memory->raw(), {numel}, dtype, device,
                                [memory, counts = counts_](void*) mutable {
                                  memory.reset();
                                  ++counts->released;
                                });
  }

 private:
  std::shared_ptr<Counts> counts_;
};

// A communicator's collective buffers are ordinary tensors unless the backend says otherwise (NCCL's
// registered and symmetric buffers: compiled, not run here); DDP takes its buckets from there, and training on
// buffers from elsewhere gives the same bits, each buffer released once.
TEST(CommBuffers, DdpOnTheCommunicatorsBuffersIsIdentical) {
  distributed::CommOptions opts;
  opts.backend = "single";
  auto single = distributed::makeCommunicator(opts, nullptr);
  const Tensor buffer = single->allocateCommBuffer(10, DType::F64, Device::CPU);
  EXPECT_EQ(buffer.shape(), Shape{10});
  EXPECT_EQ(buffer.dtype(), DType::F64);
  EXPECT_EQ(buffer.device(), Device::CPU);
  EXPECT_TRUE(buffer.ownsStorageAlone());

  auto counts = std::make_shared<ExternalBuffers::Counts>();
  size_t buckets = 0;
  const auto train = [&](std::shared_ptr<Communicator> comm) {
    auto m = std::make_unique<models::MLP>(kDims, 13);
    DistributedDataParallel ddp(m->namedParameters(), comm, kSmallBuckets);
    buckets = ddp.plan().buckets.size();
    for (uint64_t step = 0; step < 3; ++step) {
      const Batch b = rowsOf(globalBatch("mlp", kRowsPerRank, 40 + step, DType::F32), 0, kRowsPerRank, Device::CPU);
      ddp.prepareStep();
      m->loss(b.inputs, b.targets).backward();
      ddp.finalize();
      sgdStep(*m, 0.1);
    }
    return testing::parameterBytes(*m);
  };
  const std::string plain = train(std::make_shared<distributed::EmulatedCommunicator>(4, 50, 5, false, 4, true));
  EXPECT_TRUE(plain == train(std::make_shared<ExternalBuffers>(counts)));
  EXPECT_GE(buckets, 3u);
  EXPECT_EQ(counts->allocated, static_cast<int>(buckets));
  EXPECT_EQ(counts->released.load(), counts->allocated);
}

// CUDA collectives on the comm stream: the emulated link's events span the modelled time and the comm
// stream holds a buffer until its collective completes; NCCL averages to the same bits on every rank and
// broadcasts.
TEST(CudaCommunicators, EmulatedLinkTakesTheModelledTimeOnTheCommStream) {
  MINIDP_SKIP_WITHOUT_CUDA();
  // 4 MB at 1 GB/s over 8 ranks: 0.1 ms + 1.75 * 4.19 ms.
  distributed::EmulatedCommunicator comm(8, 1, 100, true, 8, true);
  Tensor host = testing::randomTensor({1 << 20}, 17, -1, 1, DType::F32);
  Tensor buffer = host.to(Device::CUDA);
  const double modelledMs = comm.modelledSeconds(buffer.nbytes()) * 1e3;
  auto work = comm.allReduce(buffer, distributed::ReduceOp::Avg, "bucket 0");
  work->wait();
  runtime::synchronize();
  const distributed::WorkTiming t = work->timing();
  EXPECT_GE(t.finishedMs - t.startedMs, 0.99 * modelledMs);
  // The upper bound only catches a grossly wrong model: under mpirun every rank's spin shares this GPU
  // with the others (and ctest runs other GPU tests beside it), which stretched 7.4 ms to 13.7 ms once.
  EXPECT_LE(t.finishedMs - t.startedMs, 3.0 * modelledMs + 20.0);
  Tensor back = buffer.to(Device::CPU);
  EXPECT_EQ(std::memcmp(back.raw(), host.raw(), host.nbytes()), 0);
}

// The comm stream holds a collective's buffer until it completes (record_stream): a caller that drops
// both the work and the buffer right after the launch does not hand the block back to the allocator
// while the comm stream still uses it.
TEST(CudaCommunicators, CommStreamHoldsTheBufferUntilTheCollectiveCompletes) {
  MINIDP_SKIP_WITHOUT_CUDA();
  distributed::EmulatedCommunicator comm(8, 0.1, 100, true, 8, true);  // 4 MB: about 70 ms on the link
  Tensor buffer = Tensor::zeros({1 << 20}, DType::F32, Device::CUDA);
  const void* block = buffer.raw();
  comm.allReduce(buffer, distributed::ReduceOp::Avg, "bucket 0");
  buffer = Tensor();
  Tensor next = Tensor::zeros({1 << 20}, DType::F32, Device::CUDA);
  EXPECT_NE(next.raw(), block) << "the block was reused while the comm stream still used it";
  runtime::synchronize();
}

TEST(CudaCommunicators, AverageAndBroadcast) {
  std::string reason;
  auto comm = testing::sharedCommunicator(Device::CUDA, &reason);
  if (!comm) GTEST_SKIP() << reason;
  EXPECT_EQ(comm->name(), testing::cudaTestBackend());
  for (DType dtype : {DType::F32, DType::F64}) {
    // Rank r holds (r + 1) * x: the average is (N + 1) / 2 * x.
    Tensor x = testing::randomTensor({1000}, 23, -1, 1, dtype);
    Tensor buffer = ops::scale(x, comm->rank() + 1.0).to(Device::CUDA);
    auto work = comm->allReduce(buffer, distributed::ReduceOp::Avg, "bucket 0");
    work->wait();
    EXPECT_LE(testing::relativeError(buffer, ops::scale(x, (comm->worldSize() + 1) / 2.0)), 1e-6);
    const std::vector<std::string> all =
        comm->allGather(std::string(static_cast<const char*>(buffer.to(Device::CPU).raw()), buffer.nbytes()));
    for (const std::string& bytes : all) EXPECT_TRUE(bytes == all[0]) << "ranks hold different bits";
    Tensor b = ops::scale(x, comm->rank() + 2.0).to(Device::CUDA);
    comm->broadcast(b, 0);
    EXPECT_EQ(testing::relativeError(b, ops::scale(x, 2.0)), 0.0);
  }
}

// The watchdog thread calls MPI_Abort while the MPI thread may sit in a collective: MPI must allow calls
// from several threads (MPI_THREAD_SERIALIZED, asked for before, does not).
TEST(MpiEnvironment, GrantsMultipleThreadsForAbortsFromTheWatchdog) {
  distributed::MpiEnvironment* env = testing::mpiEnvironment();
  if (!env) GTEST_SKIP() << "not started by mpirun";
  EXPECT_EQ(env->threadLevel(), MPI_THREAD_MULTIPLE);
}

}  // namespace
}  // namespace minidp
