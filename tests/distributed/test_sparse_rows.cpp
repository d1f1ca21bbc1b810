// The row-sparse all-reduce of GPT's wte.weight (--sparse-embedding-grad), on the ranks mpirun started (or
// alone): a GPT trained with it equals dense DDP (to the byte on the CPU, whose MPI average is element-wise
// in rank order, and within rounding on CUDA), ranks stay identical, overlap on == off to the byte, with
// gradient accumulation, bf16 on the wire, AdamW, rebuilt buckets, and the dense fallback of a vocabulary no
// larger than the step's ids. And the row gather/scatter kernels: the CPU twin against a direct loop, CUDA
// against the CPU twin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "framework/distributed/ddp.h"
#include "framework/ops/dispatch.h"
#include "framework/ops/ops.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "kernels/rows.h"
#include "models/gpt.h"
#include "tests/distributed/dist_test_env.h"
#include "tests/support/gradcheck.h"
#include "tests/support/parameters.h"

namespace minidp {
namespace {

using distributed::DdpOptions;
using distributed::DistributedDataParallel;
using distributed::GradComm;
using distributed::Overlap;

constexpr int64_t kContext = 6, kRowsPerRank = 2, kSteps = 4;

/// One training run's settings.
struct Setting {
  bool sparse = true;
  Overlap overlap = Overlap::DuringBackward;
  GradComm wire = GradComm::Fp32;
  int64_t accum = 1;
  std::string optimizer = "sgd";
  int64_t vocab = 256;  // above world x accum x rows x context: the sparse path; 8: the dense fallback
  bool rebuild = false;
};

/// What a run leaves: its model, and the bytes of wte's bucket the last step sent.
struct Result {
  std::unique_ptr<models::GPT> model;
  size_t wteBytes = 0, wteDenseBytes = 0;
};

class SparseRows : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    std::string reason;
    comm_ = testing::sharedCommunicator(GetParam(), &reason);
    if (!comm_) GTEST_SKIP() << reason;
    world_ = comm_->worldSize();
    rank_ = comm_->rank();
  }

  /// kSteps steps of a tiny GPT (different initial weights per rank: DDP broadcasts rank 0's), each of
  /// `accum` micro-batches of kRowsPerRank windows per rank.
  Result train(const Setting& run) const {
    Result r;
    r.model = std::make_unique<models::GPT>(models::GptConfig{run.vocab, kContext, 2, 2, 8}, 11 + rank_);
    r.model->to(GetParam(), DType::F32);
    DdpOptions opts{run.overlap, 1200, 300};  // caps in bytes: several buckets
    opts.gradComm = run.wire;
    opts.rebuildBuckets = run.rebuild;
    if (run.sparse) opts.rowSparseParameter = "wte.weight";
    DistributedDataParallel ddp(r.model->namedParameters(), comm_, opts);
    auto optimizer = optim::makeOptimizer(run.optimizer, r.model->parameters(), 0.05, 0.01);
    const int32_t vocab = static_cast<int32_t>(run.vocab);
    for (int64_t step = 0; step < kSteps; ++step) {
      ddp.prepareStep();
      for (int64_t micro = 0; micro < run.accum; ++micro) {
        // The global micro-batch, identical on every rank; this rank takes its rows.
        const uint64_t seed = 100 + 2 * (step * run.accum + micro);
        const Tensor inputs = testing::randomIndices({world_ * kRowsPerRank, kContext}, vocab, seed);
        const Tensor targets = testing::randomIndices({world_ * kRowsPerRank, kContext}, vocab, seed + 1);
        const auto mine = [&](const Tensor& t) {
          return Tensor::alias(t, rank_ * kRowsPerRank * kContext, {kRowsPerRank, kContext}).clone().to(GetParam());
        };
        ddp.setRequireSync(micro + 1 == run.accum);
        if (run.sparse) ddp.addRowIds(mine(inputs));
        Variable loss = r.model->loss(mine(inputs), mine(targets));
        (run.accum > 1 ? ops::scale(loss, 1.0 / static_cast<double>(run.accum)) : loss).backward();
      }
      ddp.finalize();
      optimizer->step();
    }
    const int wte = ddp.plan().slots[0].bucket;  // wte.weight is registered first
    r.wteBytes = ddp.reducer().lastStepTimings()[wte].bytes;
    r.wteDenseBytes = static_cast<size_t>(run.vocab * 8) * sizeof(float);
    if (run.sparse) {
      EXPECT_EQ(ddp.plan().buckets[wte].params.size(), 1u) << "wte.weight shares its bucket\n" << ddp.plan().describe();
    }
    return r;
  }

  /// Sparse with overlap on and off, and dense: on == off to the byte, every rank identical, equal to dense
  /// (to the byte on the CPU). Returns the sparse run's wte bytes on the wire and the dense size.
  std::pair<size_t, size_t> expectSparseEqualsDense(Setting run) const {
    run.sparse = true;
    run.overlap = Overlap::DuringBackward;
    const Result on = train(run);
    run.overlap = Overlap::AfterBackward;
    const Result off = train(run);
    run.sparse = false;
    const Result dense = train(run);
    const std::string bytes = testing::parameterBytes(*on.model);
    EXPECT_TRUE(bytes == testing::parameterBytes(*off.model)) << "overlap on and off differ";
    const std::vector<std::string> all = comm_->allGather(bytes);
    for (int r = 1; r < world_; ++r) EXPECT_TRUE(all[r] == all[0]) << "rank " << r << " differs from rank 0";
    // NCCL over 3+ ranks may sum an element in another order in the packed buffer than in the dense one:
    // one fp32 rounding apart, or one bf16 rounding with bf16 on the wire (2 ranks: a + b = b + a).
    const bool bf16Order = run.wire == GradComm::Bf16 && GetParam() == Device::CUDA && world_ > 2;
    testing::expectParametersNear(*on.model, *dense.model, testing::ParameterField::Data, bf16Order ? 5e-2 : 1e-5);
    if (GetParam() == Device::CPU) {
      EXPECT_TRUE(bytes == testing::parameterBytes(*dense.model)) << "the CPU's sparse run differs from dense";
    }
    EXPECT_EQ(dense.wteBytes, dense.wteDenseBytes) << "dense DDP's wte bucket holds more than wte";
    return {on.wteBytes, on.wteDenseBytes};
  }

  std::shared_ptr<distributed::Communicator> comm_;
  int world_ = 1, rank_ = 0;
};

TEST_P(SparseRows, SgdEqualsDenseAndSendsOnlyTheRows) {
  const auto [sent, dense] = expectSparseEqualsDense(Setting{});
  // world x rows x context ids of 8 floats each.
  EXPECT_EQ(sent, static_cast<size_t>(world_ * kRowsPerRank * kContext * 8) * sizeof(float));
  EXPECT_LT(sent, dense);
}

TEST_P(SparseRows, AdamWWithBf16OnTheWireEqualsDense) {
  Setting run;
  run.optimizer = "adamw";
  run.wire = GradComm::Bf16;
  const auto [sent, dense] = expectSparseEqualsDense(run);
  EXPECT_LT(sent, dense);
}

TEST_P(SparseRows, GradientAccumulationGathersEveryMicroBatchsIds) {
  Setting run;
  run.optimizer = "adamw";
  run.accum = 2;
  const auto [sent, dense] = expectSparseEqualsDense(run);
  EXPECT_EQ(sent, static_cast<size_t>(world_ * 2 * kRowsPerRank * kContext * 8) * sizeof(float));
}

TEST_P(SparseRows, RebuiltBucketsKeepWteAlone) {
  Setting run;
  run.rebuild = true;
  const auto [sent, dense] = expectSparseEqualsDense(run);
  EXPECT_LT(sent, dense);
}

TEST_P(SparseRows, TinyVocabularyFallsBackToTheDenseAllReduce) {
  Setting run;
  run.vocab = 8;  // at most 8 rows, and every step lists at least 12 ids
  const auto [sent, dense] = expectSparseEqualsDense(run);
  EXPECT_EQ(sent, dense) << "the fallback was not taken";
}

INSTANTIATE_TEST_SUITE_P(Devices, SparseRows, ::testing::Values(Device::CPU, Device::CUDA),
                         [](const ::testing::TestParamInfo<Device>& info) { return deviceName(info.param); });

// ids with duplicates; `packed` of a gather holds, for a duplicated id, the same row twice.
const std::vector<int32_t> kIds = {3, 0, 7, 3, 9, 9, 1, 3};
constexpr int64_t kV = 11, kC = 5;

TEST(SparseRowKernels, CpuGatherAndScatterMoveWholeRows) {
  const Tensor grad = testing::randomTensor({kV, kC}, 1, -1, 1, DType::F32);
  const int64_t n = static_cast<int64_t>(kIds.size());
  std::vector<float> packed(n * kC), back(kV * kC, 0.0f);
  kernels::cpu::gatherRows<float>(grad.data<float>(), kIds.data(), n, kC, packed.data());
  kernels::cpu::scatterRows<float>(packed.data(), kIds.data(), n, kC, back.data());
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t c = 0; c < kC; ++c) ASSERT_EQ(packed[k * kC + c], grad.data<float>()[kIds[k] * kC + c]);
  }
  for (int64_t v = 0; v < kV; ++v) {
    const bool listed = std::find(kIds.begin(), kIds.end(), v) != kIds.end();
    for (int64_t c = 0; c < kC; ++c) {
      EXPECT_EQ(back[v * kC + c], listed ? grad.data<float>()[v * kC + c] : 0.0f) << "row " << v;
    }
  }
}

TEST(SparseRowKernels, CudaEqualsTheCpuTwin) {
  if (!runtime::cudaAvailable()) GTEST_SKIP() << "no CUDA device";
#if MINIDP_WITH_CUDA
  for (DType dtype : {DType::F32, DType::F64}) {
    const Tensor grad = testing::randomTensor({kV, kC}, 2, -1, 1, dtype);
    const Tensor ids = Tensor::fromVector(kIds, {static_cast<int64_t>(kIds.size())});
    const int64_t n = ids.numel();
    Tensor packed = Tensor::zeros({n, kC}, dtype, Device::CPU), back = Tensor::zeros({kV, kC}, dtype, Device::CPU);
    const Tensor dGrad = grad.to(Device::CUDA), dIds = ids.to(Device::CUDA);
    Tensor dPacked = Tensor::zeros({n, kC}, dtype, Device::CUDA), dBack = Tensor::zeros({kV, kC}, dtype, Device::CUDA);
    cudaStream_t s = runtime::computeStream();
    MINIDP_DISPATCH_FLOAT(dtype, T, {
      kernels::cpu::gatherRows<T>(grad.data<T>(), ids.data<int32_t>(), n, kC, packed.data<T>());
      kernels::cpu::scatterRows<T>(packed.data<T>(), ids.data<int32_t>(), n, kC, back.data<T>());
      kernels::cuda::gatherRows<T>(dGrad.data<T>(), dIds.data<int32_t>(), n, kC, dPacked.data<T>(), s);
      kernels::cuda::scatterRows<T>(dPacked.data<T>(), dIds.data<int32_t>(), n, kC, dBack.data<T>(), s);
    });
    const Tensor gotPacked = dPacked.to(Device::CPU), gotBack = dBack.to(Device::CPU);
    EXPECT_EQ(std::memcmp(gotPacked.raw(), packed.raw(), packed.nbytes()), 0) << dtypeName(dtype) << " gather";
    EXPECT_EQ(std::memcmp(gotBack.raw(), back.raw(), back.nbytes()), 0) << dtypeName(dtype) << " scatter";
  }
#endif
}

}  // namespace
}  // namespace minidp
