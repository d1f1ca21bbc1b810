// Communicator pieces that need no second rank: the comm thread's FIFO, the single backend, the
// emulated CPU link (bits unchanged, modelled time, non-blocking launch; the sums, maxima and minima of
// identical ranks in every dtype), the watchdog (timeouts, health check, holding released works), the factory.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "framework/distributed/comm/backends/emulated_communicator.h"
#include "framework/distributed/job/comm_thread.h"
#include "framework/distributed/job/watchdog.h"
#include "framework/runtime/device.h"
#include "framework/testing/gradcheck.h"

namespace minidp::distributed {
namespace {

TEST(CommThread, RunsTasksInPostOrderAndRethrowsErrors) {
  CommThread thread;
  std::vector<int> order;
  std::vector<std::shared_ptr<CpuWork>> works;
  for (int i = 0; i < 5; ++i) {
    works.push_back(thread.post(
        [&order, i] {
          std::this_thread::sleep_for(std::chrono::milliseconds(5 - i));
          order.push_back(i);
        },
        "task " + std::to_string(i), 0));
  }
  works.back()->wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  for (auto& w : works) {
    EXPECT_TRUE(w->completed());
    const WorkTiming t = w->timing();
    EXPECT_LE(t.launchedMs, t.startedMs);
    EXPECT_LE(t.startedMs, t.finishedMs);
  }
  auto failing = thread.post([] { MINIDP_CHECK(false, "collective failed"); }, "bad", 0);
  EXPECT_THROW(failing->wait(), Error);
}

TEST(SingleCommunicator, IsTheDefaultWithoutMpirunAndTheIdentity) {
  CommOptions opts;
  auto comm = makeCommunicator(opts, nullptr);
  EXPECT_EQ(comm->name(), "single");
  EXPECT_EQ(comm->worldSize(), 1);
  Tensor x = testing::randomTensor({33}, 4);
  Tensor before = x.clone();
  comm->allReduce(x, distributed::ReduceOp::Avg, "bucket 0")->wait();
  EXPECT_EQ(std::memcmp(x.raw(), before.raw(), x.nbytes()), 0);
  EXPECT_TRUE(comm->allAgree(true));
  EXPECT_FALSE(comm->allAgree(false));
}

TEST(CommunicatorFactory, RejectsBackendsThatCannotWork) {
  CommOptions opts;
  opts.backend = "mpi";
  EXPECT_THROW(makeCommunicator(opts, nullptr), Error);  // not under mpirun
  opts.backend = "carrier-pigeon";
  EXPECT_THROW(makeCommunicator(opts, nullptr), Error);
  opts.backend = "emulated";
  opts.emulatedWorld = 4;
  auto emulated = makeCommunicator(opts, nullptr);
  EXPECT_EQ(emulated->name(), "emulated");
  EXPECT_EQ(emulated->worldSize(), 4);
  EXPECT_NE(emulated->describe().find("NOT a multi-rank run"), std::string::npos) << emulated->describe();
}

TEST(CommunicatorFactory, BuildsEachBackendOfTheTableByItsName) {
  const std::vector<std::string> names = commBackendNames();
  ASSERT_EQ(names.size(), commBackends().size() + 1);
  EXPECT_EQ(names.front(), "auto");
  const std::string help = commBackendHelp();
  for (const CommBackend& b : commBackends()) {
    EXPECT_NE(std::find(names.begin(), names.end(), b.name), names.end()) << b.name;
    EXPECT_NE(help.find(b.name + ": " + b.description), std::string::npos) << help;
  }
  // The backends that run on the CPU without mpirun come out of makeCommunicator under their own name.
  for (const std::string name : {"single", "emulated"}) {
    CommOptions opts;
    opts.backend = name;
    EXPECT_EQ(makeCommunicator(opts, nullptr)->name(), name);
  }
}

// A backend's refusals of the device are known from the settings alone (a usage error before any work), and
// makeCommunicator refuses the same.
TEST(CommunicatorFactory, BackendsRefuseTheOtherDevicesTensorsFromTheSettings) {
  CommOptions opts;
  EXPECT_EQ(commSettingsProblem(opts, "nccl"), "--comm nccl averages CUDA tensors; use mpi for --device cpu");
  EXPECT_EQ(commSettingsProblem(opts, "mpi"), "");
  opts.cuda = true;
  EXPECT_EQ(commSettingsProblem(opts, "mpi"), "");  // staged through pinned host buffers
  EXPECT_EQ(commSettingsProblem(opts, "nccl"), "");
  opts.cuda = false;
  opts.backend = "nccl";
  try {
    makeCommunicator(opts, nullptr);
    ADD_FAILURE() << "--comm nccl built on the CPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("averages CUDA tensors"), std::string::npos) << e.what();
  }
}

TEST(EmulatedCommunicator, CpuLinkKeepsBitsTakesTheModelledTimeAndDoesNotBlockTheCaller) {
  // 8 MB at 1 GB/s over 4 ranks: 1 ms + 1.5 * 8 ms = 13 ms.
  EmulatedCommunicator comm(4, 1.0, 1000, false, 0, true);
  Tensor x = testing::randomTensor({1 << 21}, 6, -1, 1, DType::F32);
  Tensor before = x.clone();
  const double modelledMs = comm.modelledSeconds(x.nbytes()) * 1e3;
  EXPECT_NEAR(modelledMs, 1.0 + 1.5 * 8.388608, 1e-9);
  const auto start = std::chrono::steady_clock::now();
  auto work = comm.allReduce(x, distributed::ReduceOp::Avg, "bucket 0");
  const double launchMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(launchMs, modelledMs / 2) << "allReduce must return before the link is done";
  work->wait();
  const WorkTiming t = work->timing();
  EXPECT_GE(t.finishedMs - t.startedMs, modelledMs);
  EXPECT_LE(t.finishedMs - t.startedMs, modelledMs + 40.0);
  EXPECT_EQ(std::memcmp(x.raw(), before.raw(), x.nbytes()), 0);
  EXPECT_THROW(comm.allReduce(Tensor(), distributed::ReduceOp::Avg, "bucket 1"), Error);
}

TEST(EmulatedCommunicator, IdenticalRanksSumMaxAndMinEveryDtype) {
  // 4 identical ranks: a sum is 4 copies added as the dtype adds (int8 wraps: 4 x 50 = 200 is -56), a maximum
  // or minimum is the copy itself; an average of integers is refused. The CPU link, and the CUDA one where
  // there is a GPU.
  std::vector<Device> devices{Device::CPU};
  if (runtime::cudaAvailable()) devices.push_back(Device::CUDA);
  for (Device device : devices) {
    SCOPED_TRACE(deviceName(device));
    EmulatedCommunicator comm(4, 1e3, 0, device == Device::CUDA, 0, true);
    const auto reduce = [&comm, device](auto values, distributed::ReduceOp op) {
      using T = typename decltype(values)::value_type;
      Tensor t = Tensor::fromVector(values, {static_cast<int64_t>(values.size())}, device);
      comm.allReduce(t, op, "bucket 0")->wait();
      return t.toVector<T>();
    };
    const size_t n = 3;
    EXPECT_EQ(reduce(std::vector<int8_t>(n, 50), distributed::ReduceOp::Sum), std::vector<int8_t>(n, -56));
    EXPECT_EQ(reduce(std::vector<uint8_t>(n, 70), distributed::ReduceOp::Sum), std::vector<uint8_t>(n, 24));  // 280
    EXPECT_EQ(reduce(std::vector<int32_t>(n, -7), distributed::ReduceOp::Sum), std::vector<int32_t>(n, -28));
    for (const fp16 v : reduce(std::vector<fp16>(n, floatToFp16(1.5f)), distributed::ReduceOp::Sum)) {
      EXPECT_EQ(fp16ToFloat(v), 6.0f);
    }
    for (const bf16 v : reduce(std::vector<bf16>(n, floatToBf16(0.75f)), distributed::ReduceOp::Sum)) {
      EXPECT_EQ(bf16ToFloat(v), 3.0f);
    }
    const std::vector<float> x = testing::randomTensor({3}, 8, -1, 1, DType::F32).toVector<float>();
    for (distributed::ReduceOp op :
         {distributed::ReduceOp::Max, distributed::ReduceOp::Min, distributed::ReduceOp::Avg}) {
      EXPECT_EQ(reduce(x, op), x) << distributed::reduceOpName(op);
    }
    EXPECT_EQ(reduce(std::vector<int8_t>(n, -5), distributed::ReduceOp::Min), std::vector<int8_t>(n, -5));
    EXPECT_THROW(reduce(std::vector<int8_t>(n, 1), distributed::ReduceOp::Avg), Error);
  }
}

TEST(EmulatedCommunicator, ZeroCollectivesActOnRankZerosShardAndTakeTheHalfRingTime) {
  // 4 identical ranks, 12 elements: rank 0's shard is elements 0-2. A reduce-scatter's average leaves it, a sum
  // is 4 times it; the shard gather repeats it into the other three slots. Each takes latency + 3/4 bytes / bandwidth.
  std::vector<Device> devices{Device::CPU};
  if (runtime::cudaAvailable()) devices.push_back(Device::CUDA);
  for (Device device : devices) {
    SCOPED_TRACE(deviceName(device));
    EmulatedCommunicator comm(4, 1e-3, 200, device == Device::CUDA, 0, true);
    std::vector<float> x(12);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i) - 1.0f;
    Tensor t = Tensor::fromVector(x, {12}, device);
    comm.reduceScatter(t, distributed::ReduceOp::Avg, "bucket 0")->wait();
    EXPECT_EQ(t.toVector<float>(), x);
    comm.reduceScatter(t, distributed::ReduceOp::Sum, "bucket 0")->wait();
    std::vector<float> got = t.toVector<float>();
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i], 4 * x[i]) << i;
    auto work = comm.allGatherShards(t, "params 0");
    work->wait();
    got = t.toVector<float>();
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], 4 * x[i % 3]) << i;
    // 48 bytes at 1 MB/s: 200 us + 0.75 * 48 us = 236 us.
    EXPECT_NEAR(comm.modelledHalfRingSeconds(48) * 1e6, 236.0, 1e-6);
    const WorkTiming timing = work->timing();
    EXPECT_GE(timing.finishedMs - timing.startedMs, 0.236 * 0.99);
    Tensor odd = Tensor::zeros({10}, DType::F32, device);
    EXPECT_THROW(comm.allGatherShards(odd, "params 1"), Error);
  }
}

/// A collective that never finishes.
class StuckWork : public Work {
 public:
  StuckWork() : Work("bucket 7", 4096), since_(hostNowMs()) {}
  void wait() override {}
  bool completed() const override { return false; }
  double runningSinceMs() const override { return since_; }
  WorkTiming timing(cudaEvent_t) const override { return {}; }

 private:
  double since_;
};

TEST(Watchdog, ReportsAStuckCollectiveAndIgnoresFinishedOnes) {
  std::atomic<int> fired{0};
  Watchdog watchdog(0.2, 3, [&](const std::string&) { ++fired; });
  auto done = std::make_shared<CompletedWork>("bucket 0", 8);
  watchdog.watch(done);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(fired.load(), 0);
  auto stuck = std::make_shared<StuckWork>();
  watchdog.watch(stuck);
  for (int i = 0; i < 100 && fired.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(fired.load(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(fired.load(), 1) << "reported once";
  const std::string line = Watchdog::describeTimeout(*stuck, 3, 301.5);
  EXPECT_NE(line.find("rank 3: collective 'bucket 7' (4096 bytes) has not completed after 301.5 s"), std::string::npos)
      << line;
  const std::string named = Watchdog::describeTimeout(*stuck, 3, 301.5, "rank(s) 1 did not arrive");
  EXPECT_NE(named.find("after 301.5 s: rank(s) 1 did not arrive; aborting every rank"), std::string::npos) << named;
}

/// A collective that completes when the test says so; never counted as running, so it never times out.
class ControlledWork : public Work {
 public:
  explicit ControlledWork(const std::atomic<bool>& done) : Work("bucket 1", 8), done_(done) {}
  void wait() override {}
  bool completed() const override { return done_; }
  double runningSinceMs() const override { return -1; }
  WorkTiming timing(cudaEvent_t) const override { return {}; }

 private:
  const std::atomic<bool>& done_;
};

TEST(Watchdog, HoldsAWorkItsOwnerReleasedUntilItCompletes) {
  std::atomic<bool> done{false};  // outlives the watchdog's thread
  Watchdog watchdog(0.2, 0, [](const std::string&) {});
  auto work = std::make_shared<ControlledWork>(done);
  const std::weak_ptr<Work> observer = work;
  watchdog.watch(work);
  work.reset();  // what a CUDA caller does right after wait(), which returns at once
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(observer.expired()) << "released before it completed";
  done = true;
  for (int i = 0; i < 100 && !observer.expired(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(observer.expired()) << "still held after it completed";
}

TEST(Watchdog, ReportsAFailedHealthCheckOnce) {
  std::atomic<bool> broken{false};
  std::atomic<int> fired{0};
  ::testing::internal::CaptureStderr();
  {
    Watchdog watchdog(
        0.2, 1,
        [&](const std::string& line) {
          std::fprintf(stderr, "%s\n", line.c_str());
          ++fired;
        },
        {}, [&]() -> std::string { return broken ? "link is down" : ""; });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(fired.load(), 0);
    broken = true;
    for (int i = 0; i < 100 && fired.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(fired.load(), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(fired.load(), 1) << "reported once";
  }
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(printed.find("link is down\n"), std::string::npos) << printed;
}

/// A collective whose completion check blocks until the test releases it (a slow event query).
class SlowQueryWork : public Work {
 public:
  SlowQueryWork(std::atomic<bool>& inQuery, const std::atomic<bool>& release)
      : Work("bucket 2", 8), inQuery_(inQuery), release_(release) {}
  void wait() override {}
  bool completed() const override {
    inQuery_ = true;
    while (!release_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  }
  double runningSinceMs() const override { return -1; }
  WorkTiming timing(cudaEvent_t) const override { return {}; }

 private:
  std::atomic<bool>& inQuery_;
  const std::atomic<bool>& release_;
};

TEST(Watchdog, WatchNeverWaitsForAScan) {
  std::atomic<bool> inQuery{false}, release{false};  // outlive the watchdog's thread
  Watchdog watchdog(0.2, 0, [](const std::string&) {});
  watchdog.watch(std::make_shared<SlowQueryWork>(inQuery, release));
  for (int i = 0; i < 200 && !inQuery; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(inQuery) << "the watchdog never scanned";
  // The scan is stuck in completed(); every bucket launch calls watch() meanwhile: it must not block.
  std::atomic<bool> returned{false};
  std::thread launcher([&] {
    watchdog.watch(std::make_shared<CompletedWork>("bucket 3", 8));
    returned = true;
  });
  for (int i = 0; i < 100 && !returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(returned) << "watch() waited for the scan's lock";
  release = true;
  launcher.join();
}

TEST(Watchdog, RunExclusiveWaitsForTheHealthCheckAndEndsIt) {
  std::atomic<bool> checking{false};
  std::atomic<int> checksAfter{0};
  std::atomic<bool> freed{false};  // what runExclusive's action frees (the NCCL communicator)
  Watchdog watchdog(
      0.04, 0, [](const std::string&) {}, {},
      [&]() -> std::string {
        checking = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        if (freed) ++checksAfter;  // a query of a freed communicator
        checking = false;
        return "";
      });
  for (int i = 0; i < 200 && !checking; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  watchdog.runExclusive([&] {
    EXPECT_FALSE(checking.load()) << "ran while the health check was querying";
    freed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(checksAfter.load(), 0) << "the health check ran after the abort";
}

TEST(Deadline, FiresOnlyWhenTheScopeOutlivesIt) {
  std::atomic<int> fired{0};
  ::testing::internal::CaptureStderr();
  {
    Deadline quick(1.0, "late", [&] { ++fired; });
  }
  EXPECT_EQ(fired.load(), 0);
  {
    Deadline slow(0.05, "minidp watchdog: MPI_Finalize did not complete", [&] { ++fired; });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(fired.load(), 1);
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed, "minidp watchdog: MPI_Finalize did not complete\n");
}

}  // namespace
}  // namespace minidp::distributed
