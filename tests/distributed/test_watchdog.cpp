// End to end under mpirun -np 2: rank 0 starts an all-reduce that rank 1 never joins. The watchdog
// (2 s) must print its line, naming rank 1 as the rank that did not arrive, and end BOTH ranks (rank 1
// sleeps for two minutes, longer than the test's timeout). ctest passes on the watchdog's line (PASS_REGULAR_EXPRESSION) within the timeout.
#include <chrono>
#include <cstdio>
#include <thread>

#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/job/mpi_environment.h"

using namespace minidp;

int main() {
  distributed::MpiEnvironment env;
  distributed::CommOptions opts;
  opts.backend = "mpi";
  opts.watchdogSeconds = 2;
  auto comm = distributed::makeCommunicator(opts, &env);
  if (comm->rank() == 0) {
    Tensor buffer = Tensor::zeros({8}, DType::F32, Device::CPU);
    comm->allReduce(buffer, distributed::ReduceOp::Avg, "bucket 0")->wait();
    std::printf("rank 0: the all-reduce completed, which it cannot\n");
  } else {
    std::this_thread::sleep_for(std::chrono::minutes(2));
  }
  return 0;
}
