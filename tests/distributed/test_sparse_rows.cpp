// The row gather of GPT's wte.weight (--sparse-embedding-grad), on the ranks mpirun started (or alone): a
// GPT trained with it equals dense DDP (to the byte on 2 CPU ranks, where a + b = b + a and both halve it
// exactly; within rounding otherwise: the ranks' rows are added in rank order, and with bf16 on the wire in
// fp32, where dense DDP sums in bf16), ranks stay identical, overlap on == off to the byte, with gradient
// accumulation, bf16 on the wire, AdamW, rebuilt buckets, and the dense fallback when the rows would not be
// cheaper. Each rank sends only its own rows. And the row kernels: the CPU twins against direct loops, CUDA
// against the CPU twins.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "framework/distributed/gradient/ddp.h"
#include "framework/ops/ops.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "framework/tensor/dispatch.h"
#include "framework/testing/gradcheck.h"
#include "kernels/rows.h"
#include "models/gpt.h"
#include "tests/distributed/dist_test_env.h"
#include "tests/support/cuda_skip.h"
#include "tests/support/parameters.h"

namespace minidp {
namespace {

using distributed::DdpOptions;
using distributed::DistributedDataParallel;
using distributed::Overlap;

constexpr int64_t kContext = 6, kRowsPerRank = 2, kSteps = 4;

/// One training run's settings.
struct Setting {
  bool sparse = true;
  Overlap overlap = Overlap::DuringBackward;
  std::string hook = "allreduce";  // the comm hook of the other buckets (bf16: the rows travel in bf16)
  int64_t accum = 1;
  std::string optimizer = "sgd";
  int64_t vocab = 256;  // above world x accum x rows x context / 2: the sparse path; 8: the dense fallback
  bool rebuild = false;
};

/// What a run leaves: its model, and the bytes of wte's bucket the last step sent.
struct Result {
  std::unique_ptr<models::GPT> model;
  size_t wteBytes = 0, wteDenseBytes = 0;
};

class SparseRows : public testing::CommunicatorTest {
 protected:

  /// kSteps steps of a tiny GPT (different initial weights per rank: DDP broadcasts rank 0's), each of
  /// `accum` micro-batches of kRowsPerRank windows per rank.
  Result train(const Setting& run) const {
    Result r;
    r.model = std::make_unique<models::GPT>(models::GptConfig{run.vocab, kContext, 2, 2, 8}, 11 + rank_);
    r.model->to(GetParam(), DType::F32);
    DdpOptions opts{run.overlap, 1200, 300};  // caps in bytes: several buckets
    opts.commHook.name = run.hook;
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
  /// (to the byte on 2 CPU ranks with fp32 on the wire). Returns the sparse run's wte bytes on the wire
  /// (the rows this rank sends) and the dense size.
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
    // The rows are added in rank order, in fp32 also with bf16 on the wire: an element's sum may round
    // differently from the dense all-reduce's (in bf16 there, once more). 2 ranks in fp32: a + b = b + a.
    const bool bf16 = run.hook == "bf16";
    testing::expectParametersNear(*on.model, *dense.model, testing::ParameterField::Data, bf16 ? 5e-2 : 1e-5);
    if (GetParam() == Device::CPU && !bf16 && world_ <= 2) {
      EXPECT_TRUE(bytes == testing::parameterBytes(*dense.model)) << "the CPU's sparse run differs from dense";
    }
    EXPECT_EQ(dense.wteBytes, dense.wteDenseBytes) << "dense DDP's wte bucket holds more than wte";
    return {on.wteBytes, on.wteDenseBytes};
  }
};

// What wte's bucket sends: alone, the whole gradient (the dense path: nothing to gather); with others, this
// rank's `ids` rows (distinct or padding) of 8 floats each.
size_t expectedBytes(int world, int64_t ids, size_t dense) {
  return world == 1 ? dense : static_cast<size_t>(ids * 8) * sizeof(float);
}

TEST_P(SparseRows, SgdEqualsDenseAndSendsOnlyTheRows) {
  const auto [sent, dense] = expectSparseEqualsDense(Setting{});
  EXPECT_EQ(sent, expectedBytes(world_, kRowsPerRank * kContext, dense));
}

TEST_P(SparseRows, AdamWWithBf16OnTheWireEqualsDense) {
  Setting run;
  run.optimizer = "adamw";
  run.hook = "bf16";
  const auto [sent, dense] = expectSparseEqualsDense(run);
  EXPECT_EQ(sent, expectedBytes(world_, kRowsPerRank * kContext, dense));
}

TEST_P(SparseRows, GradientAccumulationGathersEveryMicroBatchsIds) {
  Setting run;
  run.optimizer = "adamw";
  run.accum = 2;
  const auto [sent, dense] = expectSparseEqualsDense(run);
  EXPECT_EQ(sent, expectedBytes(world_, 2 * kRowsPerRank * kContext, dense));
}

TEST_P(SparseRows, RebuiltBucketsKeepWteAlone) {
  Setting run;
  run.rebuild = true;
  const auto [sent, dense] = expectSparseEqualsDense(run);
  EXPECT_EQ(sent, expectedBytes(world_, kRowsPerRank * kContext, dense));
}

TEST_P(SparseRows, VocabularyOfSeveralScanChunks) {
  Setting run;
  run.vocab = 3000;  // the CUDA listing scans 1024 rows at a time: three chunks
  run.optimizer = "adamw";
  const auto [sent, dense] = expectSparseEqualsDense(run);
  EXPECT_EQ(sent, expectedBytes(world_, kRowsPerRank * kContext, dense));
}

TEST_P(SparseRows, TinyVocabularyFallsBackToTheDenseAllReduce) {
  Setting run;
  run.vocab = 8;  // 12 ids per rank: 8 rows, which world >= 2 ranks would gather at 8 x world >= 2 x 8
  const auto [sent, dense] = expectSparseEqualsDense(run);
  EXPECT_EQ(sent, dense) << "the fallback was not taken";
}

TEST_P(SparseRows, RanksWithDifferentIdCountsAreRefused) {
  if (world_ == 1) GTEST_SKIP() << "needs 2 or more ranks (mpirun -np 2)";
  models::GPT model(models::GptConfig{256, kContext, 2, 2, 8}, 11);
  model.to(GetParam(), DType::F32);
  DdpOptions opts{Overlap::DuringBackward, 1200, 300};
  opts.rowSparseParameter = "wte.weight";
  DistributedDataParallel ddp(model.namedParameters(), comm_, opts);
  // Rank 0 one window of ids, the others two: the gathers would not match.
  const int64_t rows = rank_ == 0 ? 1 : 2;
  const Tensor inputs = testing::randomIndices({rows, kContext}, 256, 7).to(GetParam());
  ddp.prepareStep();
  ddp.addRowIds(inputs);
  try {
    model.loss(inputs, inputs).backward();
    ddp.finalize();
    ADD_FAILURE() << "different id counts were not refused";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("every rank must pass as many"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, SparseRows, ::testing::Values(Device::CPU, Device::CUDA),
                         [](const ::testing::TestParamInfo<Device>& info) { return deviceName(info.param); });

// ids with duplicates, in two chunks (micro-batches); 6 distinct rows of 11, listed in a capacity of 8.
const std::vector<int32_t> kIds = {3, 0, 7, 3, 9, 9, 1, 3};
const std::vector<int32_t> kMoreIds = {10, 0, 7};
constexpr int64_t kV = 11, kC = 5, kCapacity = 8;

/// The kernels' results, on the CPU.
struct RowResults {
  std::vector<int32_t> list;
  Tensor packed, packedBf16, added, addedBf16;
};

/// Lists kIds + kMoreIds, packs `grad`'s rows (its dtype, and bf16 for F32), adds them into `base`; then
/// packs and adds them again by the list reversed (a second rank's rows); CUDA with `cuda`.
RowResults runRowKernels(const Tensor& grad, const Tensor& base, bool cuda) {
  const Device device = cuda ? Device::CUDA : Device::CPU;
  const DType dtype = grad.dtype();
  const Tensor a = Tensor::fromVector(kIds, {8}).to(device), b = Tensor::fromVector(kMoreIds, {3}).to(device);
  Tensor marks = Tensor::zeros({kV}, DType::I32, device), list = Tensor::zeros({2 * kCapacity}, DType::I32, device);
  const Tensor g = grad.to(device);
  Tensor packed = Tensor::zeros({kCapacity, kC}, dtype, device), packedBf16 = Tensor::zeros({kCapacity, kC}, DType::BF16, device);
  Tensor added = base.clone().to(device), addedBf16 = base.clone().to(device);
  if (!cuda) {
    kernels::cpu::markRows(a.data<int32_t>(), a.numel(), kV, marks.data<int32_t>());
    kernels::cpu::markRows(b.data<int32_t>(), b.numel(), kV, marks.data<int32_t>());
    kernels::cpu::listMarkedRows(marks.data<int32_t>(), kV, list.data<int32_t>(), kCapacity);
  } else {
#if MINIDP_WITH_CUDA
    cudaStream_t s = runtime::computeStream();
    kernels::cuda::markRows(a.data<int32_t>(), a.numel(), kV, marks.data<int32_t>(), s);
    kernels::cuda::markRows(b.data<int32_t>(), b.numel(), kV, marks.data<int32_t>(), s);
    kernels::cuda::listMarkedRows(marks.data<int32_t>(), kV, list.data<int32_t>(), kCapacity, s);
#endif
  }
  // The second rank's list: the first reversed (distinct ids in another order, padding first).
  std::vector<int32_t> first = list.to(Device::CPU).toVector<int32_t>();
  first.resize(kCapacity);
  std::vector<int32_t> second(first.rbegin(), first.rend());
  const Tensor secondIds = Tensor::fromVector(second, {kCapacity}).to(device);
  Tensor packed2 = Tensor::zeros({kCapacity, kC}, dtype, device);
  MINIDP_DISPATCH_FLOAT(dtype, T, {
    const T* from = g.data<T>();
    const int32_t* ids = list.data<int32_t>();
    if (!cuda) {
      kernels::cpu::gatherRows<T, T>(from, ids, kCapacity, kC, packed.data<T>());
      kernels::cpu::scatterAddRows<T, T>(packed.data<T>(), ids, kCapacity, kC, added.data<T>());
      kernels::cpu::gatherRows<T, T>(from, secondIds.data<int32_t>(), kCapacity, kC, packed2.data<T>());
      kernels::cpu::scatterAddRows<T, T>(packed2.data<T>(), secondIds.data<int32_t>(), kCapacity, kC, added.data<T>());
    } else {
#if MINIDP_WITH_CUDA
      cudaStream_t s = runtime::computeStream();
      kernels::cuda::gatherRows<T, T>(from, ids, kCapacity, kC, packed.data<T>(), s);
      kernels::cuda::scatterAddRows<T, T>(packed.data<T>(), ids, kCapacity, kC, added.data<T>(), s);
      kernels::cuda::gatherRows<T, T>(from, secondIds.data<int32_t>(), kCapacity, kC, packed2.data<T>(), s);
      kernels::cuda::scatterAddRows<T, T>(packed2.data<T>(), secondIds.data<int32_t>(), kCapacity, kC, added.data<T>(), s);
#endif
    }
  });
  if (dtype == DType::F32) {  // bf16 rows: packed from fp32, added into fp32
    const int32_t* ids = list.data<int32_t>();
    if (!cuda) {
      kernels::cpu::gatherRows<float, bf16>(g.data<float>(), ids, kCapacity, kC, packedBf16.data<bf16>());
      kernels::cpu::scatterAddRows<bf16, float>(packedBf16.data<bf16>(), ids, kCapacity, kC, addedBf16.data<float>());
    } else {
#if MINIDP_WITH_CUDA
      cudaStream_t s = runtime::computeStream();
      kernels::cuda::gatherRows<float, bf16>(g.data<float>(), ids, kCapacity, kC, packedBf16.data<bf16>(), s);
      kernels::cuda::scatterAddRows<bf16, float>(packedBf16.data<bf16>(), ids, kCapacity, kC, addedBf16.data<float>(), s);
#endif
    }
  }
  return {first, packed.to(Device::CPU), packedBf16.to(Device::CPU), added.to(Device::CPU), addedBf16.to(Device::CPU)};
}

TEST(SparseRowKernels, CpuListsDistinctRowsPacksAndAddsThem) {
  const Tensor grad = testing::randomTensor({kV, kC}, 1, -1, 1, DType::F32);
  const Tensor base = testing::randomTensor({kV, kC}, 2, -1, 1, DType::F32);
  const RowResults r = runRowKernels(grad, base, false);
  EXPECT_EQ(r.list, (std::vector<int32_t>{0, 1, 3, 7, 9, 10, -1, -1}));
  const float* g = grad.data<float>();
  for (int64_t k = 0; k < kCapacity; ++k) {
    for (int64_t c = 0; c < kC; ++c) {
      const float want = r.list[k] < 0 ? 0.0f : g[r.list[k] * kC + c];
      ASSERT_EQ(r.packed.data<float>()[k * kC + c], want) << "row " << k;
      ASSERT_EQ(r.packedBf16.data<bf16>()[k * kC + c].bits, floatToBf16(want).bits) << "row " << k;
    }
  }
  for (int64_t v = 0; v < kV; ++v) {
    const bool listed = std::find(r.list.begin(), r.list.end(), v) != r.list.end();
    for (int64_t c = 0; c < kC; ++c) {
      const float b = base.data<float>()[v * kC + c], x = g[v * kC + c];
      // Listed rows: base + x (the first list) + x (the second, the same rows reversed); the rest: base.
      EXPECT_EQ(r.added.data<float>()[v * kC + c], listed ? (b + x) + x : b) << "row " << v;
      EXPECT_EQ(r.addedBf16.data<float>()[v * kC + c], listed ? b + bf16ToFloat(floatToBf16(x)) : b) << "row " << v;
    }
  }
}

TEST(SparseRowKernels, ListingSpansSeveralScanChunks) {
  // Rows at the CUDA scan's 1024-row chunk edges, repeated, over V = 2500; capacity 10 (7 distinct).
  const std::vector<int32_t> ids = {2499, 0, 1023, 1024, 2047, 2048, 5, 1024, 2499, 0};
  constexpr int64_t V = 2500, capacity = 10;
  const std::vector<int32_t> want = {0, 5, 1023, 1024, 2047, 2048, 2499, -1, -1, -1};
  std::vector<int32_t> marks(V, 0), list(capacity, 7);
  kernels::cpu::markRows(ids.data(), static_cast<int64_t>(ids.size()), V, marks.data());
  kernels::cpu::listMarkedRows(marks.data(), V, list.data(), capacity);
  EXPECT_EQ(list, want);
  MINIDP_SKIP_WITHOUT_CUDA() << " (the CPU twin passed)";
#if MINIDP_WITH_CUDA
  const Tensor dIds = Tensor::fromVector(ids, {static_cast<int64_t>(ids.size())}).to(Device::CUDA);
  Tensor dMarks = Tensor::zeros({V}, DType::I32, Device::CUDA), dList = Tensor::zeros({capacity}, DType::I32, Device::CUDA);
  kernels::cuda::markRows(dIds.data<int32_t>(), dIds.numel(), V, dMarks.data<int32_t>(), runtime::computeStream());
  kernels::cuda::listMarkedRows(dMarks.data<int32_t>(), V, dList.data<int32_t>(), capacity, runtime::computeStream());
  EXPECT_EQ(dList.to(Device::CPU).toVector<int32_t>(), want);
#endif
}

TEST(SparseRowKernels, CudaEqualsTheCpuTwins) {
  MINIDP_SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::F32, DType::F64}) {
    const Tensor grad = testing::randomTensor({kV, kC}, 3, -1, 1, dtype);
    const Tensor base = testing::randomTensor({kV, kC}, 4, -1, 1, dtype);
    const RowResults want = runRowKernels(grad, base, false), got = runRowKernels(grad, base, true);
    EXPECT_EQ(got.list, want.list) << dtypeName(dtype);
    EXPECT_EQ(std::memcmp(got.packed.raw(), want.packed.raw(), want.packed.nbytes()), 0) << dtypeName(dtype) << " gather";
    EXPECT_EQ(std::memcmp(got.added.raw(), want.added.raw(), want.added.nbytes()), 0) << dtypeName(dtype) << " add";
    if (dtype != DType::F32) continue;
    EXPECT_EQ(std::memcmp(got.packedBf16.raw(), want.packedBf16.raw(), want.packedBf16.nbytes()), 0) << "bf16 gather";
    EXPECT_EQ(std::memcmp(got.addedBf16.raw(), want.addedBf16.raw(), want.addedBf16.nbytes()), 0) << "bf16 add";
  }
}

}  // namespace
}  // namespace minidp
