// What a comm hook says of itself: the runs its registry entry refuses (a registered hook's as the built-in
// ones', PowerSGD's in its own words), and its wire dtype, which the row-sparse wrapper packs its rows in
// whatever the wrapped hook is called (on the emulated link: 4 identical ranks in this process).
#include <gtest/gtest.h>

#include "framework/distributed/comm/backends/emulated_communicator.h"
#include "framework/distributed/gradient/comm_hook.h"
#include "framework/distributed/gradient/hooks/row_sparse.h"

namespace minidp::distributed {
namespace {

/// The bucket averaged as it is, in fp32, but saying that its collectives send bf16.
class SaysBf16OnTheWire : public CommHook {
 public:
  std::string name() const override { return "test-says-bf16"; }
  DType wireDType(DType) const override { return DType::BF16; }
  std::shared_ptr<Work> reduce(const GradBucket& bucket, Communicator& comm) override {
    return comm.allReduce(bucket.buffer, ReduceOp::Avg, "bucket " + std::to_string(bucket.index));
  }
};

TEST(CommHookRegistry, ARegisteredHooksRefusalsAreItsEntrys) {
  registerCommHook(
      {"test-no-zero", "refuses --zero 1", [](const CommHookOptions&) { return makeCommHook(CommHookOptions{}); },
       [](const HookUsage& usage) {
         return usage.zeroStage != 0 ? std::string("--comm-hook test-no-zero: not with --zero 1") : std::string();
       }});
  registerCommHook(
      {"test-any-run", "refuses nothing", [](const CommHookOptions&) { return makeCommHook(CommHookOptions{}); }});
  HookUsage usage;
  EXPECT_EQ(findCommHook("test-no-zero").usageProblem(usage), "");
  usage.zeroStage = 1;
  EXPECT_EQ(findCommHook("test-no-zero").usageProblem(usage), "--comm-hook test-no-zero: not with --zero 1");
  EXPECT_EQ(findCommHook("test-any-run").usageProblem(usage), "");  // the default filled in
  EXPECT_EQ(findCommHook("allreduce").usageProblem(usage), "");
  try {
    findCommHook("no-such-hook");
    ADD_FAILURE() << "an unknown hook was found";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce, bf16, powersgd"), std::string::npos) << e.what();
  }
}

TEST(CommHookRegistry, PowerSgdRefusesShardingGraphsAndFp64) {
  const auto refusal = [](auto change) {
    HookUsage usage;
    change(usage);
    return findCommHook("powersgd").usageProblem(usage);
  };
  EXPECT_EQ(refusal([](HookUsage&) {}), "");
  EXPECT_EQ(refusal([](HookUsage& u) { u.device = Device::CUDA; }), "");
  EXPECT_EQ(refusal([](HookUsage& u) { u.zeroStage = 1; }),
            "--comm-hook powersgd with --zero 1 is not supported (its factors are all-reduced, not sharded)");
  EXPECT_EQ(refusal([](HookUsage& u) { u.cudaGraph = true; }),
            "--comm-hook powersgd with --cuda-graph is not supported (its step counter chooses the collectives on "
            "the host)");
  EXPECT_EQ(refusal([](HookUsage& u) { u.gradDType = DType::F64; }),
            "--comm-hook powersgd needs fp32 gradients: not with --dtype fp64");
}

TEST(CommHookWire, EachHookSaysItsWireDType) {
  CommHookOptions opts;
  EXPECT_EQ(makeCommHook(opts)->wireDType(DType::F32), DType::F32);
  EXPECT_EQ(makeCommHook(opts)->wireDType(DType::F64), DType::F64);
  opts.name = "powersgd";
  EXPECT_EQ(makeCommHook(opts)->wireDType(DType::F32), DType::F32);
  opts.name = "bf16";
  EXPECT_EQ(makeCommHook(opts)->wireDType(DType::F32), DType::BF16);
  EXPECT_EQ(RowSparseHook(makeCommHook(opts), 0).wireDType(DType::F32), DType::BF16);
  EXPECT_EQ(RowSparseHook(std::make_unique<SaysBf16OnTheWire>(), 0).wireDType(DType::F32), DType::BF16);
}

/// A (16, 4) row-sparse gradient whose rows 3 and 5 hold 1 + 2^-10 (bf16 keeps 8 significant bits: 1),
/// reduced by rows over `inner` on 4 identical emulated ranks; the reduced gradient.
std::vector<float> rowsReducedOver(std::unique_ptr<CommHook> inner) {
  constexpr int64_t V = 16, C = 4;
  EmulatedCommunicator comm(4, 1000, 0, false, 0, true);
  GradBucket bucket;
  bucket.buffer = Tensor::zeros({V * C}, DType::F32, Device::CPU);
  bucket.entries = {BucketEntry{0, "wte.weight", 0, {V, C}}};
  RowSparseHook rows(std::move(inner), 0);
  rows.setup({bucket}, comm);
  rows.beginStep();
  rows.addRowIds(Tensor::fromVector(std::vector<int32_t>{3, 5}, {2}));  // K x world = 8 < 2 V: by rows
  for (int64_t row : {3, 5}) {
    for (int64_t c = 0; c < C; ++c) bucket.buffer.data<float>()[row * C + c] = 1.0f + 0x1.0p-10f;
  }
  rows.reduce(bucket, comm)->wait();
  return bucket.buffer.toVector<float>();
}

TEST(CommHookWire, RowsTravelInTheWrappedHooksWireDTypeWhateverItsName) {
  const std::vector<float> fp32 = rowsReducedOver(makeCommHook(CommHookOptions{}));
  const std::vector<float> bf16 = rowsReducedOver(std::make_unique<SaysBf16OnTheWire>());
  for (size_t k = 0; k < fp32.size(); ++k) {
    const bool sent = k / 4 == 3 || k / 4 == 5;
    EXPECT_EQ(fp32[k], sent ? 1.0f + 0x1.0p-10f : 0.0f) << k;
    EXPECT_EQ(bf16[k], sent ? 1.0f : 0.0f) << k;
  }
}

}  // namespace
}  // namespace minidp::distributed
