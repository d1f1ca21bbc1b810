// GoogleTest main of the distributed suites: owns the MPI environment (when started by mpirun), selects
// the GPU of the node-local rank, and owns the shared communicators; rank 0 prints the full report,
// other ranks only their failures (prefixed with the rank); the exit code is non-zero when any rank failed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "framework/runtime/device.h"
#include "tests/distributed/dist_test_env.h"

namespace minidp::testing {

namespace {

std::unique_ptr<distributed::MpiEnvironment> gEnv;
std::map<Device, std::shared_ptr<distributed::Communicator>> gComms;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  // Not UnitTest::current_test_info(): gtest holds its own lock while it calls this.
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: %s\n", rank_, test_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.message());
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace

distributed::MpiEnvironment* mpiEnvironment() { return gEnv.get(); }

std::string cudaTestBackend() {
  // More ranks than GPUs (several ranks on one GPU, which NCCL refuses): CUDA tensors over MPI, staged
  // through pinned host buffers; MINIDP_TEST_CUDA_COMM=mpi chooses that with one GPU per rank too.
  const char* forced = std::getenv("MINIDP_TEST_CUDA_COMM");
  const bool shared = gEnv && gEnv->localSize() > runtime::cudaDeviceCount();
  return shared || (forced && std::string(forced) == "mpi") ? "mpi" : "nccl";
}

std::shared_ptr<distributed::Communicator> sharedCommunicator(Device device, std::string* skipReason) {
  auto it = gComms.find(device);
  if (it != gComms.end()) return it->second;
  distributed::CommOptions opts;
  opts.cuda = device == Device::CUDA;
  opts.watchdogSeconds = 120;
  if (opts.cuda) {
    if (!runtime::cudaAvailable()) {
      *skipReason = "no CUDA device";
      return nullptr;
    }
    opts.backend = cudaTestBackend();
  }
  return gComms[device] = distributed::makeCommunicator(opts, gEnv.get());
}

}  // namespace minidp::testing

int main(int argc, char** argv) {
  using minidp::testing::gEnv;
  ::testing::InitGoogleTest(&argc, argv);
  if (minidp::distributed::MpiEnvironment::launchedByMpirun()) {
    gEnv = std::make_unique<minidp::distributed::MpiEnvironment>();
    // The rank's GPU, selected before any suite creates CUDA state (on device 0 otherwise, after which
    // NCCL could not select the rank's own). With fewer GPUs than ranks, ranks share them over MPI.
    namespace runtime = minidp::runtime;
    if (runtime::cudaAvailable()) runtime::setDevice(gEnv->localRank() % runtime::cudaDeviceCount());
  }
  const int rank = gEnv ? gEnv->rank() : 0;
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new minidp::testing::FailurePrinter(rank));
  }
  const bool failed = RUN_ALL_TESTS() != 0;
  bool anyFailed = failed;
  if (gEnv) {
    for (const std::string& vote : gEnv->allGather(failed ? "1" : "0")) anyFailed = anyFailed || vote == "1";
  }
  if (rank == 0 && anyFailed && !failed) std::fprintf(stderr, "another rank failed (see its [rank N] lines)\n");
  minidp::testing::gComms.clear();
  gEnv.reset();
  return anyFailed ? 1 : 0;
}
