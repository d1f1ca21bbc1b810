#include "framework/distributed/mpi_communicator.h"

#include <climits>
#include <sstream>

#include "framework/distributed/comm_thread.h"
#include "framework/ops/dispatch.h"
#include "kernels/elementwise.h"

namespace minidp::distributed {

namespace {

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT;
  }
  return MPI_DATATYPE_NULL;
}

void checkCpu(const char* what, const Tensor& t) {
  MINIDP_CHECK(t.defined() && !t.isCuda(), "mpi " << what << " needs a CPU tensor");
  MINIDP_CHECK(t.numel() <= INT_MAX, "mpi " << what << " of " << t.numel() << " elements (at most INT_MAX)");
}

}  // namespace

MpiCommunicator::MpiCommunicator(MpiEnvironment& env, double watchdogSeconds)
    : env_(env), watchdog_(watchdogSeconds, env.rank(), [] { MpiEnvironment::abortAll(1); }) {}

std::string MpiCommunicator::describe() const {
  std::ostringstream os;
  os << "mpi: rank " << rank() << " of " << worldSize() << ", reduce to rank 0 + broadcast on a comm thread";
  return os.str();
}

std::shared_ptr<Work> MpiCommunicator::allReduceAverage(Tensor buffer, const std::string& tag) {
  checkCpu("allReduceAverage", buffer);
  MINIDP_CHECK(buffer.dtype() != DType::I32, "allReduceAverage of an int32 tensor");
  const size_t bytes = buffer.nbytes();
  MPI_Comm comm = env_.comm();
  const int rank = env_.rank(), world = env_.worldSize();
  std::shared_ptr<Work> work = env_.post(
      [buffer, comm, rank, world] {
        void* data = buffer.raw();
        const int count = static_cast<int>(buffer.numel());
        const MPI_Datatype type = mpiType(buffer.dtype());
        if (rank == 0) {
          MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, data, count, type, MPI_SUM, 0, comm));
          // The one place the sum becomes an average; the broadcast hands these bits to every rank.
          MINIDP_DISPATCH_FLOAT(buffer.dtype(), T, kernels::cpu::scale<T>(static_cast<T*>(data),
                                                                           T(1) / T(world),
                                                                           static_cast<T*>(data), count));
        } else {
          MPI_CHECK(MPI_Reduce(data, nullptr, count, type, MPI_SUM, 0, comm));
        }
        MPI_CHECK(MPI_Bcast(data, count, type, 0, comm));
      },
      tag, bytes);
  watchdog_.watch(work);
  return work;
}

void MpiCommunicator::broadcast(Tensor& tensor, int root) {
  checkCpu("broadcast", tensor);
  env_.broadcastBytes(tensor.raw(), tensor.nbytes(), root);
}

std::vector<std::string> MpiCommunicator::allGather(const std::string& bytes) { return env_.allGather(bytes); }

void MpiCommunicator::abort() noexcept { MpiEnvironment::abortAll(1); }

}  // namespace minidp::distributed
