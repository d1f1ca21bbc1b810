// Every dtype and reduction the communicators take, on the ranks mpirun started (or alone): all-reduce by
// sum, average, max and min of F32, F64, I32, BF16, I8, U8 and F16 buffers, against the values computed here
// from every rank's inputs; every rank ends with the same bits; int8 and uint8 sums wrap; a reduce-scatter by
// max and an all-gather of the new dtypes; every dtype by every op through reduce-scatter and the in-place
// all-gather of shards. CPU runs on the mpi (or single) backend, CUDA on nccl (or mpi: MINIDP_TEST_CUDA_COMM).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/distributed/comm/communicator.h"
#include "tests/distributed/dist_test_env.h"

namespace minidp {
namespace {

using distributed::ReduceOp;

template <typename T>
double toDouble(T v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16ToFloat(v);
  } else if constexpr (std::is_same_v<T, fp16>) {
    return fp16ToFloat(v);
  } else {
    return static_cast<double>(v);
  }
}

template <typename T>
T fromDouble(double v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return floatToBf16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, fp16>) {
    return floatToFp16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Rank r's element i: a whole number in [-20, 20] ([0, 40] unsigned), a quarter of it for floating types:
// exact in every dtype, and so are sums over 3 ranks, maxima and minima.
template <typename T>
double inputValue(int rank, int64_t i) {
  const int k = static_cast<int>((i * 7 + rank * 13) % 41);
  if constexpr (std::is_same_v<T, uint8_t>) return k;
  if constexpr (std::is_integral_v<T>) return k - 20;
  return (k - 20) * 0.25;
}

class Collectives : public testing::CommunicatorTest {
 protected:
  // The bytes of `t` (host copy) are the same on every rank.
  void expectSameBitsOnEveryRank(const Tensor& t) {
    const Tensor host = t.to(Device::CPU);
    const std::string bytes(static_cast<const char*>(host.raw()), host.nbytes());
    const std::vector<std::string> all = comm_->allGather(bytes);
    for (int r = 1; r < world_; ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << " holds other bits";
  }

  // All-reduces rank_'s inputValue<T> by every op T takes and checks against the reduction of every rank's.
  // `scatter`: a reduce-scatter instead, then an in-place all-gather of the shards (allGatherShards), so the
  // whole buffer is checked, the same bits on every rank included.
  template <typename T>
  void checkAllReduce(bool scatter = false) {
    const DType dtype = dtypeOf<T>();
    SCOPED_TRACE(dtypeName(dtype) + std::string(scatter ? " reduce-scatter + all-gather of shards" : ""));
    const int64_t n = scatter ? distributed::paddedNumel(37, world_) : 37;
    std::vector<ReduceOp> reduceOps = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};
    if (isFloatingPoint(dtype)) reduceOps.push_back(ReduceOp::Avg);
    for (ReduceOp op : reduceOps) {
      SCOPED_TRACE(distributed::reduceOpName(op));
      std::vector<T> mine(n);
      for (int64_t i = 0; i < n; ++i) mine[i] = fromDouble<T>(inputValue<T>(rank_, i));
      Tensor buffer = Tensor::fromVector(mine, {n}, GetParam());
      if (scatter) {
        comm_->reduceScatter(buffer, op, "reduce-scatter")->wait();
        comm_->allGatherShards(buffer, "all-gather of shards")->wait();
      } else {
        comm_->allReduce(buffer, op, "all-reduce")->wait();
      }
      const std::vector<T> got = buffer.toVector<T>();
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0, max = -1e9, min = 1e9;
        for (int r = 0; r < world_; ++r) {
          const double v = inputValue<T>(r, i);
          sum += v;
          max = std::max(max, v);
          min = std::min(min, v);
        }
        const double value = toDouble(got[i]);
        switch (op) {
          case ReduceOp::Sum: ASSERT_EQ(value, sum) << "element " << i; break;
          case ReduceOp::Max: ASSERT_EQ(value, max) << "element " << i; break;
          case ReduceOp::Min: ASSERT_EQ(value, min) << "element " << i; break;
          case ReduceOp::Avg: {
            // bf16 and fp16: each rank's value times 1/N rounded to the type, and each add rounded; a few
            // roundings of numbers up to 5 (8 and 11 significant bits). fp32 and fp64: the sum scaled once.
            const double step = dtype == DType::BF16 ? 1.0 / 256 : dtype == DType::F16 ? 1.0 / 2048 : 1e-7;
            ASSERT_NEAR(value, sum / world_, 4 * 5 * step) << "element " << i;
            break;
          }
        }
      }
      expectSameBitsOnEveryRank(buffer);
    }
  }
};

TEST_P(Collectives, AllReduceOfEveryDtypeByEveryOp) {
  checkAllReduce<float>();
  checkAllReduce<double>();
  checkAllReduce<int32_t>();
  checkAllReduce<bf16>();
  checkAllReduce<int8_t>();
  checkAllReduce<uint8_t>();
  checkAllReduce<fp16>();
}

// The same through the reduce-scatter path (bf16 and fp16 averages pre-scaled there once, as in the
// all-reduce) and every dtype through the in-place all-gather of shards.
TEST_P(Collectives, ReduceScatterOfEveryDtypeByEveryOp) {
  checkAllReduce<float>(true);
  checkAllReduce<double>(true);
  checkAllReduce<int32_t>(true);
  checkAllReduce<bf16>(true);
  checkAllReduce<int8_t>(true);
  checkAllReduce<uint8_t>(true);
  checkAllReduce<fp16>(true);
}

TEST_P(Collectives, IntegerSumsWrap) {
  // 100 on every rank: N * 100 modulo 256, as two's complement for int8 (2 ranks: 200 -> -56).
  const int64_t n = 5;
  Tensor signedSum = Tensor::fromVector(std::vector<int8_t>(n, 100), {n}, GetParam());
  Tensor unsignedSum = Tensor::fromVector(std::vector<uint8_t>(n, 200), {n}, GetParam());
  comm_->allReduce(signedSum, ReduceOp::Sum, "int8 sum")->wait();
  comm_->allReduce(unsignedSum, ReduceOp::Sum, "uint8 sum")->wait();
  const int wrappedSigned = (world_ * 100) % 256, wrappedUnsigned = (world_ * 200) % 256;
  for (int8_t v : signedSum.toVector<int8_t>()) EXPECT_EQ(v, wrappedSigned < 128 ? wrappedSigned : wrappedSigned - 256);
  for (uint8_t v : unsignedSum.toVector<uint8_t>()) EXPECT_EQ(v, wrappedUnsigned);
}

TEST_P(Collectives, ReduceScatterByMaxAndAllGatherOfSmallDtypes) {
  const int64_t n = distributed::paddedNumel(41, world_), shard = n / world_;
  std::vector<int8_t> mine(n);
  for (int64_t i = 0; i < n; ++i) mine[i] = static_cast<int8_t>(inputValue<int8_t>(rank_, i));
  Tensor buffer = Tensor::fromVector(mine, {n}, GetParam());
  comm_->reduceScatter(buffer, ReduceOp::Max, "reduce-scatter")->wait();
  const std::vector<int8_t> got = buffer.toVector<int8_t>();
  for (int64_t i = rank_ * shard; i < (rank_ + 1) * shard; ++i) {
    double max = -1e9;
    for (int r = 0; r < world_; ++r) max = std::max(max, inputValue<int8_t>(r, i));
    ASSERT_EQ(got[i], max) << "element " << i;
  }

  // Rank r's fp16 (r + 0.5) and uint8 (r + 1) land at [r * 3, r * 3 + 3).
  Tensor half = Tensor::fromVector(std::vector<fp16>(3, floatToFp16(rank_ + 0.5f)), {3}, GetParam());
  Tensor bytes = Tensor::fromVector(std::vector<uint8_t>(3, static_cast<uint8_t>(rank_ + 1)), {3}, GetParam());
  Tensor halves = Tensor::empty({3 * world_}, DType::F16, GetParam());
  Tensor allBytes = Tensor::empty({3 * world_}, DType::U8, GetParam());
  comm_->allGather(half, halves, "gather f16")->wait();
  comm_->allGather(bytes, allBytes, "gather u8")->wait();
  const std::vector<fp16> h = halves.toVector<fp16>();
  const std::vector<uint8_t> b = allBytes.toVector<uint8_t>();
  for (int64_t i = 0; i < 3 * world_; ++i) {
    EXPECT_EQ(fp16ToFloat(h[i]), i / 3 + 0.5f) << "element " << i;
    EXPECT_EQ(b[i], i / 3 + 1) << "element " << i;
  }
}

TEST_P(Collectives, AnAverageOfIntegersIsRefused) {
  Tensor ints = Tensor::fromVector(std::vector<int8_t>(4, 1), {4}, GetParam());
  try {
    comm_->allReduce(ints, ReduceOp::Avg, "avg");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("avg needs a floating-point buffer"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Collectives, ::testing::Values(Device::CPU, Device::CUDA),
                         [](const ::testing::TestParamInfo<Device>& info) { return deviceName(info.param); });

}  // namespace
}  // namespace minidp
