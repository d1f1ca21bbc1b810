#include "framework/distributed/comm/backends/mpi_communicator.h"

#include <climits>
#include <cstdio>
#include <sstream>

#include "framework/distributed/comm/comm_thread.h"
#include "framework/tensor/dispatch.h"
#include "kernels/bf16_cast.h"
#include "kernels/elementwise_kernels.h"

namespace minidp::distributed {

namespace {

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT;
    case DType::BF16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

void checkCpu(const char* what, const Tensor& t) {
  MINIDP_CHECK(t.defined() && !t.isCuda(), "mpi " << what << " needs a CPU tensor");
  MINIDP_CHECK(t.numel() <= INT_MAX, "mpi " << what << " of " << t.numel() << " elements (at most INT_MAX)");
}

}  // namespace

namespace {

/// The bf16 sum as an MPI reduction (commutative): inout = bf16(in + inout), element by element.
void bf16SumOp(void* in, void* inout, int* length, MPI_Datatype*) {
  kernels::cpu::addBf16(static_cast<const bf16*>(in), static_cast<bf16*>(inout), *length);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MpiEnvironment& env, double watchdogSeconds)
    : env_(env),
      watchdog_(
          watchdogSeconds, env.rank(),
          [&env](const std::string& line) { env.endJob(1, line, [line](bool) { return line; }); }, {}, {},
          [&env](const std::string& tag) { return env.census(tag); }) {
  env_.execute([this] { MPI_CHECK(MPI_Op_create(&bf16SumOp, 1, &bf16Sum_)); }, "bf16 sum op");
}

MpiCommunicator::~MpiCommunicator() {
  try {
    env_.execute([this] { MPI_CHECK(MPI_Op_free(&bf16Sum_)); }, "bf16 sum op");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minidp: %s\n", e.what());
  }
}

std::string MpiCommunicator::describe() const {
  std::ostringstream os;
  os << "mpi: rank " << rank() << " of " << worldSize() << ", reduce to rank 0 + broadcast on a comm thread";
  return os.str();
}

std::shared_ptr<Work> MpiCommunicator::allReduce(Tensor buffer, ReduceOp op, const std::string& tag) {
  return reduce(std::move(buffer), op, false, tag);
}

std::shared_ptr<Work> MpiCommunicator::reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) {
  return reduce(std::move(buffer), op, true, tag);
}

std::shared_ptr<Work> MpiCommunicator::reduce(Tensor buffer, ReduceOp op, bool scatter, const std::string& tag) {
  checkCpu("reduction", buffer);
  checkReduction(buffer, scatter, worldSize());
  MPI_Comm comm = env_.comm();
  const int rank = env_.rank(), world = env_.worldSize();
  MPI_Op bf16Sum = bf16Sum_;
  std::shared_ptr<Work> work = env_.post(
      [buffer, op, scatter, comm, rank, world, bf16Sum] {
        const bool bf16 = buffer.dtype() == DType::BF16;
        void* data = buffer.raw();
        const int count = static_cast<int>(buffer.numel());
        const MPI_Datatype type = mpiType(buffer.dtype());
        // ncclAvg on bf16: every rank's input is pre-multiplied by bf16(1/N), then summed.
        if (bf16 && op == ReduceOp::Avg) {
          kernels::cpu::scaleBf16(buffer.data<minidp::bf16>(), bf16ToFloat(floatToBf16(1.0f / static_cast<float>(world))),
                                  count);
        }
        const MPI_Op mpiOp = bf16 ? bf16Sum : MPI_SUM;
        if (rank == 0) {
          MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, data, count, type, mpiOp, 0, comm));
          // fp32 / fp64: the one place a sum becomes an average (bf16 was scaled before the sum).
          if (!bf16 && op == ReduceOp::Avg) {
            MINIDP_DISPATCH_FLOAT(
                buffer.dtype(), T,
                kernels::cpu::scale<T>(static_cast<T*>(data), T(1) / T(world), static_cast<T*>(data), count));
          }
        } else {
          MPI_CHECK(MPI_Reduce(data, nullptr, count, type, mpiOp, 0, comm));
        }
        // Rank 0's bits go to every rank: the whole buffer, or each rank its shard.
        if (!scatter) {
          MPI_CHECK(MPI_Bcast(data, count, type, 0, comm));
          return;
        }
        const int n = count / world;
        void* mine = static_cast<char*>(data) + static_cast<size_t>(rank) * n * dtypeSize(buffer.dtype());
        MPI_CHECK(MPI_Scatter(data, n, type, rank == 0 ? MPI_IN_PLACE : mine, n, type, 0, comm));
      },
      tag, buffer.nbytes());
  watchdog_.watch(work);
  return work;
}

std::shared_ptr<Work> MpiCommunicator::allGatherShards(Tensor buffer, const std::string& tag) {
  checkCpu("allGatherShards", buffer);
  MINIDP_CHECK(buffer.numel() % worldSize() == 0,
               "all-gather of shards of " << buffer.numel() << " elements over " << worldSize() << " ranks");
  MPI_Comm comm = env_.comm();
  const int world = env_.worldSize();
  std::shared_ptr<Work> work = env_.post(
      [buffer, comm, world] {
        const int shard = static_cast<int>(buffer.numel() / world);
        MPI_CHECK(
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer.raw(), shard, mpiType(buffer.dtype()), comm));
      },
      tag, buffer.nbytes());
  watchdog_.watch(work);
  return work;
}

std::shared_ptr<Work> MpiCommunicator::allGather(Tensor input, Tensor output, const std::string& tag) {
  checkCpu("allGather", output);
  checkAllGather(input, output, worldSize());
  MPI_Comm comm = env_.comm();
  std::shared_ptr<Work> work = env_.post(
      [input, output, comm] {
        const MPI_Datatype type = mpiType(input.dtype());
        const int n = static_cast<int>(input.numel());
        MPI_CHECK(MPI_Allgather(input.raw(), n, type, output.raw(), n, type, comm));
      },
      tag, output.nbytes());
  watchdog_.watch(work);
  return work;
}

std::shared_ptr<Work> MpiCommunicator::enqueue(const std::string& tag, Tensor keep,
                                               const std::function<void(cudaStream_t)>& task) {
  return env_.post([keep, task] { task(nullptr); }, tag, 0);
}

void MpiCommunicator::broadcast(Tensor& tensor, int root) {
  checkCpu("broadcast", tensor);
  env_.broadcastBytes(tensor.raw(), tensor.nbytes(), root);
}

std::vector<std::string> MpiCommunicator::allGather(const std::string& bytes) { return env_.allGather(bytes); }

void MpiCommunicator::abort() noexcept { MpiEnvironment::abortAll(1); }

}  // namespace minidp::distributed
